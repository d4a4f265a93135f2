"""Bench: export 300K FC turns from a materialised version to HF ``datasets`` on disk.

Builds a version directory of 300K FC sample rows (the store's row format: JSON
string columns, tool calls whose argument keys differ from row to row, 1–3
tools per row, multi-turn prompts with tool results), then times
``fabrika.export.writer.export`` (SFT, ``hf`` format: chat conversion,
``List(Json())`` Arrow columns, ``save_to_disk``, dataset card) without
validation, and separately chat-template validation of the first rows read back.
Goal: the export <= 30 s.

    .venv/bin/python bench/export.py [--rows 300000] [--validate 5000]
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import tempfile
import time
from pathlib import Path

import polars as pl

from fabrika.export.source import open_version
from fabrika.export.validate import validate_pairs
from fabrika.export.writer import ExportConfig, export
from fabrika.schemas.chat import sft_record

CITIES = ["Москва", "Казань", "Тверь", "Paris", "Berlin", "Новосибирск"]
TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "description": "Погода в городе", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}, "required": ["city"]}}},
    {"type": "function", "function": {"name": "book_ticket", "description": "Book a train ticket", "parameters": {
        "type": "object", "properties": {"from_city": {"type": "string"}, "to_city": {"type": "string"},
                                         "passengers": {"type": "array", "items": {"type": "string"}}},
        "required": ["from_city", "to_city"]}}},
    {"type": "function", "function": {"name": "convert_currency", "description": "Курс валют", "parameters": {
        "type": "object", "properties": {"amount": {"type": "number"}, "from": {"type": "string"},
                                         "to": {"type": "string"}}, "required": ["amount", "from", "to"]}}},
]


def _dumps(v: object) -> str:
    return json.dumps(v, ensure_ascii=False, separators=(",", ":"))


def make_rows(n: int, seed: int = 0) -> pl.DataFrame:
    r = random.Random(seed)
    cols: dict[str, list] = {k: [] for k in ("id", "status", "expert", "lang", "target_type", "prompt", "completion",
                                              "tools", "ground_truth", "meta", "llm_backend")}
    for i in range(n):
        lang = "en" if r.random() < 0.7 else "ru"
        city = r.choice(CITIES)
        args = r.choice([{"city": city}, {"city": city, "days": r.randint(1, 7)},
                         {"from_city": city, "to_city": r.choice(CITIES), "passengers": ["Анна", "Bob"][: r.randint(1, 2)]},
                         {"amount": r.randint(1, 500) + 0.5, "from": "RUB", "to": "EUR"}])
        name = "get_weather" if "city" in args else "book_ticket" if "to_city" in args else "convert_currency"
        prompt = [{"role": "system", "content": "Ты — полезный ассистент." if lang == "ru" else "You are helpful."},
                  {"role": "user", "content": f"Запрос номер {i} про {city}" if lang == "ru" else f"Request {i} about {city}"}]
        if r.random() < 0.3:
            prompt += [{"role": "assistant", "content": None, "tool_calls": [
                {"id": f"c{i}", "name": "get_weather", "arguments": {"city": city}}], "train": False, "flag": None},
                {"role": "tool", "tool_call_id": f"c{i}", "name": "get_weather", "content": _dumps({"temp": r.randint(-20, 30)})}]
        if r.random() < 0.8:
            completion = [{"role": "assistant", "content": None, "train": True,
                           "tool_calls": [{"id": f"k{i}", "name": name, "arguments": args}]}]
            tt, gt = "tool_call", {"calls": [{"name": name, "arguments": args}]}
        else:
            completion = [{"role": "assistant", "content": f"Ответ {i}: уточните, пожалуйста.", "train": True}]
            tt, gt = r.choice(["text", "clarification", "irrelevance"]), {"calls": []}
        cols["id"].append(f"{i:020x}")
        cols["status"].append("ok")
        cols["expert"].append("fc")
        cols["lang"].append(lang)
        cols["target_type"].append(tt)
        cols["prompt"].append(_dumps(prompt))
        cols["completion"].append(_dumps(completion))
        cols["tools"].append(_dumps(r.sample(TOOLS, r.randint(1, 3))))
        cols["ground_truth"].append(_dumps(gt))
        cols["meta"].append(_dumps({"episode": f"e{i // 3}", "step": i % 3}))
        cols["llm_backend"].append("sim")
    return pl.DataFrame(cols)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=300_000)
    ap.add_argument("--validate", type=int, default=5_000, help="rows to validate with the chat template (timed apart)")
    args = ap.parse_args()
    import datasets

    datasets.disable_progress_bars()
    root = Path(tempfile.mkdtemp(prefix="fabrika-bench-export-"))
    try:
        t0 = time.perf_counter()
        run = root / "run"
        (run / "versions" / "v1" / "data").mkdir(parents=True)
        rows = make_rows(args.rows)
        for s, part in enumerate(rows.iter_slices(n_rows=50_000)):
            part.write_parquet(run / "versions" / "v1" / "data" / f"fc.samples-{s}.parquet")
        (run / "manifest.json").write_text(json.dumps({"latest_version": "v1"}), "utf-8")
        print(f"built {args.rows} FC rows in a version ({time.perf_counter() - t0:.1f}s)")

        t0 = time.perf_counter()
        res = export(open_version(run), ExportConfig(kind="sft", format="hf", out=root / "sft", validate_rows=0))
        t_export = time.perf_counter() - t0
        ds = datasets.load_from_disk(str(root / "sft"))
        assert len(ds) == args.rows and ds[0]["prompt"][0]["role"] == "system"
        size_mb = sum(p.stat().st_size for p in (root / "sft").rglob("*") if p.is_file()) / 2**20
        print(f"export sft -> hf: {res.rows} rows, {size_mb:.0f} MiB on disk, {t_export:.2f} s "
              f"({res.rows / t_export:,.0f} rows/s)  goal <= 30 s: {'OK' if t_export <= 30 else 'MISSED'}")

        n_val = min(args.validate, args.rows)
        expected = [sft_record(r) for r in rows.head(n_val).to_dicts()]
        t0 = time.perf_counter()
        report = validate_pairs(zip(ds.select(range(n_val)), expected))
        t_val = time.perf_counter() - t0
        assert report.ok, report.summary()
        print(f"chat-template validation (Qwen3, read back + render prompt and prompt+completion): {report.rows} rows, "
              f"{report.failed} failed, {t_val / max(report.rows, 1) * 1e3:.2f} ms/row")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
