"""Input files in lineage: an edited input file redoes exactly the stages that read it and their dependants."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from fabrika.pipeline.config import PipelineConfig, validate_data
from fabrika.pipeline.fingerprint import stage_fingerprints, stale_stages
from fabrika.pipeline.input_digest import clear_cache, directory_digest, input_file_digests, path_digest
from fabrika.pipeline.preflight import InputFile
from fabrika.pipeline.runner import run_pipeline
from fabrika.pipeline.stage import STAGES
from fabrika.store import RunStore
from fabrika.store.versions import scan_version


def write_prompts(path: Path, prompts: list[str]) -> None:
    path.write_text("".join(json.dumps({"prompt": p}, ensure_ascii=False) + "\n" for p in prompts), "utf-8")


def make_config(tmp_path: Path) -> PipelineConfig:
    doc = {
        "name": "files",
        "run_dir": str(tmp_path / "run"),
        "llm": {"backend": "sim", "model": "sim"},
        "stages": [
            {"kind": "generic.prompts", "name": "prompts_a", "path": "a.jsonl"},
            {"kind": "generic.complete", "name": "answers_a", "input": "prompts_a"},
            {"kind": "generic.prompts", "name": "prompts_b", "path": "b.jsonl"},
            {"kind": "generic.complete", "name": "answers_b", "input": "prompts_b"},
        ],
        "dataset": {"stages": ["answers_a", "answers_b"]},
    }
    cfg, issues = validate_data(doc, str(tmp_path / "files.yaml"), tmp_path)
    assert cfg is not None, issues
    return cfg


def shard_names(run_dir: Path, stage: str) -> list[str]:
    return sorted(p.name for p in RunStore(run_dir).shards(stage))


def dataset_prompts(run_dir: Path, version: str) -> set[str]:
    lf = scan_version(run_dir, version)
    assert lf is not None
    return set(lf.collect()["prompt"].to_list())


def fresh(tmp_path: Path) -> tuple[PipelineConfig, Any]:
    write_prompts(tmp_path / "a.jsonl", ["Как варить гречку?", "Что такое фотосинтез?"])
    write_prompts(tmp_path / "b.jsonl", ["Сколько лун у Марса?", "Кто написал «Войну и мир»?"])
    cfg = make_config(tmp_path)
    return cfg, run_pipeline(cfg, progress=False)


def test_an_edited_input_file_redoes_exactly_its_stages_and_their_dependants(tmp_path: Path) -> None:
    cfg, first = fresh(tmp_path)
    run_dir = first.run_dir
    before = {s: shard_names(run_dir, s) for s in ("prompts_a", "answers_a", "prompts_b", "answers_b")}
    assert dataset_prompts(run_dir, first.version.name) == {
        "Как варить гречку?", "Что такое фотосинтез?", "Сколько лун у Марса?", "Кто написал «Войну и мир»?"}

    write_prompts(tmp_path / "b.jsonl", ["Сколько лун у Марса?", "Почему небо голубое?"])  # one prompt replaced
    stale = stale_stages(cfg, RunStore(run_dir).read_manifest())  # what `fabrika status` shows
    assert stale == {"prompts_b": {"input file changed": ["path (b.jsonl)"]},
                     "answers_b": {"upstream changed": ["prompts_b"]}}

    again = run_pipeline(cfg, progress=False)
    assert again.stats["prompts_b"].reprocessed == ["input file path (b.jsonl)"]
    assert again.stats["answers_b"].reprocessed == ["input prompts_b"]
    for s in ("prompts_a", "answers_a"):  # the other branch keeps its shards as they are
        assert not again.stats[s].reprocessed and again.stats[s].processed == 0
        assert shard_names(run_dir, s) == before[s]
    assert shard_names(run_dir, "prompts_b") != before["prompts_b"]
    assert again.version is not None
    assert dataset_prompts(run_dir, again.version.name) == {  # the removed prompt is gone, the new one is in
        "Как варить гречку?", "Что такое фотосинтез?", "Сколько лун у Марса?", "Почему небо голубое?"}
    assert stale_stages(cfg, again.manifest) == {}


def test_a_touched_file_with_the_same_content_redoes_nothing(tmp_path: Path) -> None:
    cfg, first = fresh(tmp_path)
    run_dir = first.run_dir
    before = {s: shard_names(run_dir, s) for s in ("prompts_a", "answers_a", "prompts_b", "answers_b")}
    path = tmp_path / "b.jsonl"
    path.write_bytes(path.read_bytes())  # rewritten: a new mtime, the same bytes
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 5_000_000_000))
    assert stale_stages(cfg, RunStore(run_dir).read_manifest()) == {}
    again = run_pipeline(cfg, progress=False)
    assert all(not s.reprocessed and s.processed == 0 for s in again.stats.values())
    assert {s: shard_names(run_dir, s) for s in before} == before


def test_a_missing_input_file_does_not_break_fingerprinting(tmp_path: Path) -> None:
    write_prompts(tmp_path / "a.jsonl", ["Привет"])
    write_prompts(tmp_path / "b.jsonl", ["Пока"])
    cfg = make_config(tmp_path)
    (tmp_path / "b.jsonl").unlink()
    fps = stage_fingerprints(cfg)
    assert fps["prompts_b"][1]["files"] == {"path": {"path": "b.jsonl", "digest": "missing"}}
    assert fps["prompts_a"][1]["files"]["path"]["digest"] not in ("missing", "unreadable")


def test_file_digest_is_of_the_content_and_cached_by_size_and_mtime(tmp_path: Path) -> None:
    clear_cache()
    path = tmp_path / "f.txt"
    path.write_text("один", "utf-8")
    first = path_digest(path)
    st = path.stat()
    path.write_text("пять", "utf-8")  # same size
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))  # and the same mtime: the cached digest is reused
    assert path_digest(path) == first
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1))
    assert path_digest(path) != first
    path.write_text("один", "utf-8")
    assert path_digest(path) == first  # content, not mtime


def test_a_directory_input_changes_with_a_small_config_file_not_with_a_touched_weight_file(
        tmp_path: Path, monkeypatch: Any) -> None:
    import fabrika.pipeline.input_digest as input_digest

    monkeypatch.setattr(input_digest, "SMALL_FILE_BYTES", 64)
    model = tmp_path / "rm"
    model.mkdir()
    (model / "config.json").write_text('{"num_labels": 1}', "utf-8")
    (model / "tokenizer.json").write_text('{"model": {"type": "BPE"}}', "utf-8")
    weights = model / "model.safetensors"
    weights.write_bytes(b"\x01" * 200)
    (model / ".git").mkdir()
    (model / ".git" / "HEAD").write_text("ref: refs/heads/main", "utf-8")
    base = directory_digest(model)

    (model / ".git" / "HEAD").write_text("ref: refs/heads/other", "utf-8")
    assert directory_digest(model) == base  # dot entries are skipped
    (model / "config.json").write_text('{"num_labels": 2}', "utf-8")
    changed = directory_digest(model)
    assert changed != base
    (model / "config.json").write_text('{"num_labels": 1}', "utf-8")
    assert directory_digest(model) == base
    st = weights.stat()
    weights.write_bytes(b"\x02" * 200)  # a big file is known by size and mtime_ns only
    os.utime(weights, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert directory_digest(model) == base
    os.utime(weights, ns=(st.st_atime_ns, st.st_mtime_ns + 1))
    assert directory_digest(model) != base
    (model / "extra.txt").write_text("x", "utf-8")
    assert directory_digest(model) not in (base, changed)


def test_stages_digest_their_declared_files_and_class_defaults(tmp_path: Path) -> None:
    """A reward model directory (``rm``), a default query pool, a live-calls OpenAPI spec: all digested."""
    model = tmp_path / "rm"
    model.mkdir()
    (model / "config.json").write_text("{}", "utf-8")
    spec = tmp_path / "api.yaml"
    spec.write_text("openapi: 3.0.0\ninfo: {title: t, version: '1'}\npaths: {}\n", "utf-8")
    write_prompts(tmp_path / "a.jsonl", ["Привет"])
    write_prompts(tmp_path / "b.jsonl", ["Пока"])
    cfg = make_config(tmp_path)
    kinds = {
        "general.rm": {"kind": "general.rm", "name": "x", "input": "prompts_a", "rm": "rm"},
        "rm.teacher_scores": {"kind": "rm.teacher_scores", "name": "x", "input": "prompts_a", "rm": "rm"},
        "if.queries": {"kind": "if.queries", "name": "x", "input": "prompts_a"},
        "fc.live_calls": {"kind": "fc.live_calls", "name": "x", "input": "prompts_a",
                          "openapi": {"spec": "api.yaml", "mock": True}},
    }
    for kind, raw in kinds.items():
        cls = STAGES[kind]
        stage = cls.Config.model_validate(raw)
        files = input_file_digests(stage, cls.input_files, cfg)
        assert files, kind
        for entry in files.values():
            assert entry["digest"] not in ("missing", "unreadable"), (kind, entry)
    pool = input_file_digests(STAGES["if.queries"].Config.model_validate(kinds["if.queries"]),
                              STAGES["if.queries"].input_files, cfg)
    assert pool["query_pool"]["path"].startswith("package://")  # the shipped default, not this checkout's path
    assert STAGES["fc.live_calls"].input_files[0].key == "openapi.spec"


def test_an_input_file_key_names_list_items(tmp_path: Path) -> None:
    (tmp_path / "s1.jsonl").write_text('{"text": "a"}\n', "utf-8")
    (tmp_path / "s2.jsonl").write_text('{"text": "b"}\n', "utf-8")
    write_prompts(tmp_path / "a.jsonl", ["Привет"])
    write_prompts(tmp_path / "b.jsonl", ["Пока"])
    cfg = make_config(tmp_path)
    spec = InputFile("seed_files[]", "seed file")
    files = input_file_digests({"seed_files": ["s1.jsonl", "s2.jsonl"]}, (spec,), cfg)
    assert list(files) == ["seed_files[0]", "seed_files[1]"]
    assert files["seed_files[0]"]["digest"] != files["seed_files[1]"]["digest"]


def test_an_edited_if_seed_file_is_named_by_its_list_key(tmp_path: Path) -> None:
    """``if.expand``'s ``seed_files[]``: the change is named ``input file seed_files[1] (<path>)``."""
    from fabrika.pipeline.fingerprint import changed_fields, reason_kind

    seeds = [tmp_path / "s1.jsonl", tmp_path / "s2.jsonl"]
    for i, path in enumerate(seeds):
        path.write_text(json.dumps({"text": f"Ответь ровно {i + 2} предложениями."}, ensure_ascii=False) + "\n",
                        "utf-8")
    write_prompts(tmp_path / "a.jsonl", ["Привет"])
    write_prompts(tmp_path / "b.jsonl", ["Пока"])
    cfg = make_config(tmp_path)
    cls = STAGES["if.expand"]
    stage = cls.Config.model_validate({"kind": "if.expand", "name": "x", "seed_files": [str(p) for p in seeds]})
    before = {"files": input_file_digests(stage, cls.input_files, cfg)}
    assert set(before["files"]) == {"seed_files[0]", "seed_files[1]"}
    seeds[1].write_text(json.dumps({"text": "Ответь одним словом."}, ensure_ascii=False) + "\n", "utf-8")
    after = {"files": input_file_digests(stage, cls.input_files, cfg)}
    assert changed_fields(before, after) == [f"input file seed_files[1] ({seeds[1]})"]
    assert reason_kind(changed_fields(before, after)[0]) == "input file changed"


def test_rows_written_before_files_were_digested_say_so() -> None:
    from fabrika.pipeline.fingerprint import changed_fields

    old = {"stage": {"path": "b.jsonl"}, "seed": 0}
    new = {**old, "files": {"path": {"path": "b.jsonl", "digest": "d1"}}}
    assert changed_fields(old, new) == ["input file path (b.jsonl) — not digested when its rows were written"]


def _api_with_external_ref(tmp_path: Path) -> Path:
    """An OpenAPI document whose request body lives in ``schemas/order.yaml``, which refers to ``common.yaml``."""
    (tmp_path / "schemas").mkdir()
    (tmp_path / "schemas" / "order.yaml").write_text(
        "Order:\n  type: object\n  required: [city]\n  properties:\n"
        "    city: {type: string, description: Город доставки}\n"
        "    size: {$ref: 'common.yaml#/Size'}\n", "utf-8")
    (tmp_path / "schemas" / "common.yaml").write_text(
        "Size: {type: string, enum: [S, M, L]}\nLoop: {$ref: 'order.yaml#/Order'}\n", "utf-8")
    spec = tmp_path / "api.yaml"
    spec.write_text(
        "openapi: 3.0.0\ninfo: {title: Заказы, version: '1'}\npaths:\n  /orders:\n    post:\n"
        "      operationId: createOrder\n      summary: Создать заказ\n      requestBody:\n"
        "        required: true\n        content:\n          application/json:\n"
        "            schema: {$ref: 'schemas/order.yaml#/Order'}\n"
        "      responses: {'200': {description: ok}}\n"
        "components:\n  schemas:\n    Local: {type: string}\n    Alias: {$ref: '#/components/schemas/Local'}\n", "utf-8")
    return spec


def test_a_document_digest_follows_its_external_refs_transitively(tmp_path: Path) -> None:
    """The importer inlines ``$ref`` s to other local files, so their bytes are part of the spec's digest."""
    from fabrika.generators.fc.tools_import import import_tools
    from fabrika.pipeline.input_digest import document_digest, file_digest

    clear_cache()
    spec = _api_with_external_ref(tmp_path)
    (cand,) = import_tools(spec)
    assert cand.error is None
    assert cand.parameters["properties"]["size"]["enum"] == ["S", "M", "L"]  # read from the second file
    first = document_digest(spec)
    assert first != file_digest(spec)  # ... so the digest covers the referenced files

    common = tmp_path / "schemas" / "common.yaml"
    common.write_text(common.read_text("utf-8").replace("[S, M, L]", "[S, M, L, XL]"), "utf-8")
    second = document_digest(spec)
    assert second != first  # an edit two refs away (the cycle back to order.yaml terminates)
    common.unlink()
    assert document_digest(spec) not in (first, second)  # a referenced file that went missing changes it too

    plain = tmp_path / "plain.yaml"  # only same-document refs: the plain file digest, as before
    plain.write_text("openapi: 3.0.0\npaths: {}\ncomponents:\n  schemas:\n    A: {$ref: '#/components/schemas/B'}\n"
                     "    B: {type: string}\n", "utf-8")
    assert document_digest(plain) == file_digest(plain)


def test_an_edited_file_an_imported_spec_refers_to_redoes_the_import(tmp_path: Path) -> None:
    spec = _api_with_external_ref(tmp_path)
    cls = STAGES["fc.tools_import"]
    stage = cls.Config.model_validate({"kind": "fc.tools_import", "name": "tools", "sources": [{"path": str(spec)}]})
    write_prompts(tmp_path / "a.jsonl", ["Привет"])
    write_prompts(tmp_path / "b.jsonl", ["Пока"])
    cfg = make_config(tmp_path)
    clear_cache()
    before = input_file_digests(stage, cls.input_files, cfg)
    order = tmp_path / "schemas" / "order.yaml"
    order.write_text(order.read_text("utf-8").replace("Город доставки", "Город, куда везти заказ"), "utf-8")
    after = input_file_digests(stage, cls.input_files, cfg)
    assert list(after) == ["sources[0].path"]
    assert after["sources[0].path"]["digest"] != before["sources[0].path"]["digest"]


def test_a_changed_annotator_redoes_the_stages_that_read_its_scores(tmp_path: Path) -> None:
    """``if_grpo`` copies α from the ``if_teacher`` annotation of ``if_queries``: a changed teacher RM makes it
    stale (before, only the annotator was redone and the GRPO rows kept the old α and ``rm_id``)."""
    import yaml

    from fabrika.pipeline.fingerprint import changed_fields

    path = Path(__file__).resolve().parents[2] / "configs" / "if_demo.yaml"
    doc = yaml.safe_load(path.read_text("utf-8"))
    doc["run_dir"] = str(tmp_path / "run")

    def fingerprints(k: int) -> dict[str, Any]:
        for stage in doc["stages"]:
            if stage.get("name") == "if_teacher":
                stage["k"] = k
        cfg, issues = validate_data(doc, str(path), path.parent)
        assert cfg is not None, issues
        return stage_fingerprints(cfg)

    before, after = fingerprints(4), fingerprints(2)
    changed = {name for name in before if before[name][0] != after[name][0]}
    assert {"if_teacher", "if_grpo"} <= changed
    assert "input if_teacher" in changed_fields(before["if_grpo"][1], after["if_grpo"][1])
    assert changed == {"if_teacher", "if_grpo"}  # upstream and the readers that ignore α are untouched
    assert "if_multi_grpo" not in changed  # it reads another table's annotator
