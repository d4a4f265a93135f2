"""general.prompts at scale: reading, normalising and template-clustering a synthetic pool.

Runs each size in its own process (peak RSS is per process) and prints time, peak RSS and the
growth ratios side by side. The pool mixes free prompts with 50 templated "services" (fixed
system prompt + template text around a filled slot), like production logs.

    python bench/general_pool.py --sizes 10000 100000
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

WORDS = ("как почему зачем что где когда можно нужно лучше объясни расскажи помоги подскажи составь напиши план "
         "письмо отчёт ребёнку начальнику врачу дача кот собака погода поезд билет ипотека вклад налог "
         "рецепт ужин завтрак спорт бег книга фильм история физика химия язык перевод").split()


def make_pool(path: Path, n: int, seed: int = 0) -> None:
    rng = random.Random(seed)
    services = [(f"Ты — помощник сервиса №{i}. Отвечай коротко и вежливо.", f"Задача {i}: обработай запрос",
                 "и верни ответ клиенту.") for i in range(50)]
    with path.open("w", encoding="utf-8") as fh:
        for i in range(n):
            if rng.random() < 0.3:
                system, head, tail = rng.choice(services)
                fill = " ".join(rng.choices(WORDS, k=rng.randint(3, 12)))
                rec = {"messages": [{"role": "system", "content": system},
                                    {"role": "user", "content": f"{head} «{fill}» {tail}"}]}
            else:
                rec = {"prompt": " ".join(rng.choices(WORDS, k=rng.randint(4, 20))) + f" ({i})?"}
            fh.write(json.dumps(rec, ensure_ascii=False) + "\n")


def measure(path: Path) -> dict[str, float]:
    from types import SimpleNamespace

    from fabrika.generators.general.prompts import GeneralPromptsConfig, GeneralPromptsStage

    stage = GeneralPromptsStage(GeneralPromptsConfig(path=path, templates=True),
                                SimpleNamespace(pipeline=SimpleNamespace(resolve_path=Path)))
    start = time.perf_counter()
    rows = templates = 0
    seen: set[str] = set()

    async def go() -> None:
        nonlocal rows
        for row in stage.input_rows():
            (out,) = await stage.process(row)
            rows += 1
            if out.get("template_id"):
                seen.add(out["template_id"])

    asyncio.run(go())
    templates = len(seen)
    return {"rows": rows, "templates": templates, "seconds": time.perf_counter() - start,
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--child", type=Path)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure(args.child)))
        return
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for n in args.sizes:
            path = Path(tmp) / f"pool_{n}.jsonl"
            make_pool(path, n)
            out = subprocess.run([sys.executable, __file__, "--child", str(path)], check=True, capture_output=True,
                                 text=True).stdout
            results.append(json.loads(out.strip().splitlines()[-1]))
    print("| prompts | templates | seconds | prompts/s | peak RSS MB |")
    print("|---|---|---|---|---|")
    for r in results:
        print(f"| {r['rows']} | {r['templates']} | {r['seconds']:.1f} | {r['rows'] / r['seconds']:.0f} | "
              f"{r['peak_rss_mb']:.0f} |")
    a, b = results[0], results[-1]
    print(f"size ×{b['rows'] / a['rows']:.0f}: time ×{b['seconds'] / a['seconds']:.2f}, "
          f"peak RSS ×{b['peak_rss_mb'] / a['peak_rss_mb']:.2f}")


if __name__ == "__main__":
    main()
