"""LLM-calling stages in ``llm_workers`` processes: the split, the divided limits, the same dataset for
any N, a worker killed with ``kill -9`` (nothing lost), a worker's bug (the stage stops, exit 4)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

import fabrika.pipeline.execute as execute
from fabrika.errors import StageFailure
from fabrika.llm.config import LLMConfig
from fabrika.llm.routing import AffinityPolicy, CircuitBreaker, Endpoint
from fabrika.llm.types import ChatRequest
from fabrika.pipeline.config import PipelineConfig, validate_data
from fabrika.pipeline.llm_workers import SubprocessLauncher, preload_modules, start_llm_workers
from fabrika.pipeline.outcome import StageStats
from fabrika.pipeline.partition import Partition, merge_stats, partition_of, worker_config
from fabrika.pipeline.runner import run_pipeline
from fabrika.schemas.ids import stable_id
from fabrika.store.journal import JOURNAL, StageJournal, count_rows, partition_journal
from fabrika.store.run import RunStore
from fabrika.testing import FakeOpenAIServer
from tests.pipeline import llm_worker_stages as ws


def config(tmp_path: Path, doc: dict) -> PipelineConfig:
    cfg, issues = validate_data(doc, "w.yaml", tmp_path)
    assert cfg is not None, issues
    return cfg


# -- the split and the limits (pure) ------------------------------------------------------------


def test_partition_is_a_stable_hash_of_the_id_and_balanced() -> None:
    ids = [stable_id("x", i) for i in range(2000)]
    assert [partition_of(i, 4) for i in ids[:8]] == [partition_of(i, 4) for i in ids[:8]]
    # blake2b of the id, not Python's salted hash: a fixed value in every process
    assert partition_of("abc", 1000) == int.from_bytes(__import__("hashlib").blake2b(b"abc", digest_size=8)
                                                       .digest(), "big") % 1000
    counts = Counter(partition_of(i, 4) for i in ids)
    assert set(counts) == {0, 1, 2, 3} and min(counts.values()) > 400
    parts = [Partition(k, 3) for k in range(3)]
    assert all(sum(p.owns(i) for p in parts) == 1 for i in ids)  # every item has exactly one owner
    assert parts[2].journal == partition_journal(2) != JOURNAL


def test_worker_config_divides_every_limit_so_n_workers_never_pass_it(tmp_path: Path) -> None:
    doc = ws.pipeline_doc(tmp_path / "r", 3, llm={
        "backend": "openai", "model": "m", "max_in_flight": 100,
        "endpoints": [{"base_url": "http://127.0.0.1:1/v1", "max_concurrency": 10},
                      {"base_url": "http://127.0.0.1:2/v1", "max_concurrency": 3}]})
    doc["stages"][1]["max_in_flight"] = 8
    cfg = config(tmp_path, doc)
    w = worker_config(cfg, 3)
    assert [e.max_concurrency for e in w.llm.endpoints] == [3, 1]
    assert w.llm.max_in_flight == 33 and w.max_in_flight == 1 and w.stages[1].max_in_flight == 2
    for ep, mine in zip(cfg.llm.endpoints, w.llm.endpoints):
        assert 3 * mine.max_concurrency <= ep.max_concurrency
    assert [e.base_url for e in w.llm.endpoints] == [e.base_url for e in cfg.llm.endpoints]


def test_an_endpoint_limit_below_llm_workers_is_a_config_error(tmp_path: Path) -> None:
    doc = ws.pipeline_doc(tmp_path / "r", 4, llm={
        "backend": "openai", "model": "m", "endpoints": [{"base_url": "http://127.0.0.1:1/v1", "max_concurrency": 3}]})
    cfg, issues = validate_data(doc, "w.yaml", tmp_path)
    errors = [i for i in issues if i.level == "error"]
    assert cfg is None and errors and errors[0].path == "llm.endpoints[0].max_concurrency"
    assert "llm_workers=4" in errors[0].message


def test_routing_home_is_the_same_from_any_worker() -> None:
    """The affinity ring is built from URLs only: divided limits do not move an episode's home server."""
    full = LLMConfig(backend="openai", model="m", endpoints=[
        {"base_url": f"http://127.0.0.1:{p}/v1", "max_concurrency": 64} for p in (1, 2, 3)])

    def policy(llm: LLMConfig) -> AffinityPolicy:
        p = AffinityPolicy()
        p.bind([Endpoint(base_url=e.base_url, url=e.base_url, headers={}, api_key="", max_concurrency=e.max_concurrency,
                         breaker=CircuitBreaker(5, 1.0, 10.0)) for e in llm.endpoints])
        return p

    divided = [e.model_copy(update={"max_concurrency": 16}) for e in full.endpoints]
    one, other = policy(full), policy(full.model_copy(update={"endpoints": divided}))
    homes = []
    for k in range(200):
        req = ChatRequest(messages=({"role": "user", "content": "x"},), routing_key=f"episode-{k}")
        a, b = one.home(req, 0.0), other.home(req, 0.0)
        assert a is not None and b is not None and a.base_url == b.base_url
        homes.append(a.base_url)
    assert len(set(homes)) == 3


def test_merge_stats_adds_counters_and_llm_tallies() -> None:
    a, b = StageStats(seen=3, processed=2, pending=1), StageStats(seen=4, processed=4, ok_rows=4)
    b.llm.requests, b.llm.errors_by_kind = 5, {"timeout": 2}
    b.llm.failures.counts["timeout:"] = 2
    b.llm.failures.examples["timeout:"] = "timeout"
    merge_stats(a, b)
    assert (a.seen, a.processed, a.pending, a.ok_rows, a.llm.requests) == (7, 6, 1, 4, 5)
    assert a.llm.errors_by_kind == {"timeout": 2} and a.llm.failures.most_common() == ("timeout", 2)


def test_every_journal_of_a_stage_is_recovered_and_counted(tmp_path: Path) -> None:
    """A stopped run's workers leave journal-w<k>.jsonl files: status counts them, the next run keeps their items."""
    store = RunStore(tmp_path / "run")
    d = store.stage_dir("s")
    for name, item in ((JOURNAL, "a"), (partition_journal(0), "b"), (partition_journal(3), "c")):
        j = StageJournal(d, sync_s=0.0, name=name)
        j.append([{"id": item, "input_id": item, "status": "ok", "reason": None}])
        j.close(remove=False)
    assert count_rows(d) == 3
    done = store.done_ids("s")
    assert store.recover_journal("s", done) == 3
    assert {"a", "b", "c"} <= set(r["input_id"] for r in store.scan_raw("s").collect().to_dicts())  # type: ignore[union-attr]
    assert not list(d.glob("journal*.jsonl"))


# -- whole runs: worker processes ---------------------------------------------------------------


def test_dataset_is_identical_for_1_2_and_4_workers_and_no_endpoint_limit_is_passed(tmp_path: Path) -> None:
    digests = {}
    with FakeOpenAIServer(latency_ms=20) as srv:
        llm = {"backend": "openai", "model": "fake", "max_retries": 0,
               "endpoints": [{"base_url": srv.base_url, "max_concurrency": 4}]}
        for n in (1, 2, 4):
            cfg = config(tmp_path, ws.pipeline_doc(tmp_path / f"r{n}", n, n=32, llm=llm,
                                                   log=str(tmp_path / f"calls{n}.log")))
            srv.reset_counts()
            result = run_pipeline(cfg, resume=False, progress=False)
            assert result.complete, result.problems
            digests[n] = ws.dataset_digest(cfg.resolved_run_dir)
            st = result.stats["test.wask"]
            assert (st.processed, st.ok_rows, st.llm.requests) == (32, 32, 32)
            assert srv.max_in_flight <= 4  # the endpoint's limit, divided among the workers
            pids = {pid for pid, _ in ws.calls(tmp_path / f"calls{n}.log")}
            assert len(pids) == n
            if n > 1:
                assert st.report["llm_workers"]["workers"] == n and len(st.report["llm_workers"]["pids"]) == n
                by_pid: dict[int, set[int]] = {}
                for pid, i in ws.calls(tmp_path / f"calls{n}.log"):
                    by_pid.setdefault(pid, set()).add(i)
                owners = {i: partition_of(stable_id("numbers", i), n) for i in range(32)}
                # each process did exactly the items of one partition
                assert sorted(sorted({owners[i] for i in items}) for items in by_pid.values()) == [[k] for k in range(n)]
            assert not list((cfg.resolved_run_dir / "stages" / "test.wask").glob("journal*"))
    assert digests[1] == digests[2] == digests[4] and digests[1][1] == 32


def test_a_worker_killed_with_kill_9_loses_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Worker 0 SIGKILLs itself mid-stage: its partition alone is retried, items it had finished (in its
    journal) are not redone, and the dataset is the one-process dataset."""
    import os

    waits: list[float] = []

    async def clock(seconds: float) -> None:
        waits.append(seconds)

    monkeypatch.setattr(execute, "transient_wait", clock)
    n_items = 30
    victim = next(i for i in range(10, n_items) if partition_of(stable_id("numbers", i), 2) == 0)
    ask = {"kill_on": victim, "marker": str(tmp_path / "kills"), "driver_pid": os.getpid()}
    ref = config(tmp_path, ws.pipeline_doc(tmp_path / "ref", 1, n=n_items, **ask))
    assert run_pipeline(ref, resume=False, progress=False).complete  # in this process: never kills
    log = tmp_path / "calls.log"
    cfg = config(tmp_path, ws.pipeline_doc(tmp_path / "run", 2, n=n_items, log=str(log), **ask))
    result = run_pipeline(cfg, resume=False, progress=False)
    assert result.complete, result.problems
    assert (tmp_path / "kills").read_text() == "1" and waits == [execute.TRANSIENT_BACKOFF_S[0]]
    report = result.stats["test.wask"].report["llm_workers"]
    assert report["retried_rounds"] == 1 and report["deaths"][0].startswith("worker 0: was killed by signal 9")
    assert ws.dataset_digest(cfg.resolved_run_dir) == ws.dataset_digest(ref.resolved_run_dir)
    store = RunStore(cfg.resolved_run_dir)
    assert store.counts("test.wask")["duplicate_ids"] == 0
    done_twice = [i for i, c in Counter(i for _, i in ws.calls(log)).items() if c > 1]
    # only what was in flight in the killed worker (its share of max_in_flight: 2) is done again
    assert victim in done_twice and len(done_twice) <= 2
    first_pid = ws.calls(log)[0][0]
    before_kill = [i for pid, i in ws.calls(log) if pid == first_pid]
    assert len(before_kill) > 2  # it had finished items before the kill: they came back from its journal


def test_a_worker_that_keeps_dying_leaves_its_items_pending_and_the_next_run_finishes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    async def clock(seconds: float) -> None:
        return None

    monkeypatch.setattr(execute, "transient_wait", clock)
    victim = next(i for i in range(12) if partition_of(stable_id("numbers", i), 2) == 1)
    ask = {"kill_on": victim, "marker": str(tmp_path / "kills"), "driver_pid": os.getpid(),
           "kills": execute.TRANSIENT_ROUNDS + 1}
    cfg = config(tmp_path, ws.pipeline_doc(tmp_path / "run", 2, n=12, **ask))
    result = run_pipeline(cfg, resume=False, progress=False)
    st = result.stats["test.wask"]
    assert not result.complete and st.pending >= 1 and "pending" in result.problems[0]
    assert result.version is None
    assert len(st.report["llm_workers"]["deaths"]) == execute.TRANSIENT_ROUNDS + 1
    again = run_pipeline(cfg, resume=True, progress=False)
    assert again.complete, again.problems
    assert again.stats["test.wask"].processed == st.pending  # only the unfinished items were done
    ref = config(tmp_path, ws.pipeline_doc(tmp_path / "ref", 1, n=12, **ask))
    assert run_pipeline(ref, resume=False, progress=False).complete
    assert ws.dataset_digest(cfg.resolved_run_dir) == ws.dataset_digest(ref.resolved_run_dir)


def test_a_bug_in_a_worker_stops_the_stage_with_exit_4_and_one_line(tmp_path: Path) -> None:
    from fabrika.cli.app import app

    doc = ws.pipeline_doc(tmp_path / "run", 1, n=10, raise_on=5)
    path = tmp_path / "w.yaml"
    path.write_text(yaml.safe_dump(doc), encoding="utf-8")
    res = CliRunner().invoke(app, ["run", str(path), "--llm-workers", "2", "--no-progress"])
    assert res.exit_code == 4, res.output
    line = [ln for ln in res.output.splitlines() if "bug in the stage" in ln]
    item = stable_id("numbers", 5)
    assert line and "stage test.wask" in line[0] and "RuntimeError: boom on 5" in line[0] and item in line[0]
    with pytest.raises(StageFailure) as info:
        run_pipeline(config(tmp_path, {**doc, "llm_workers": 2}), resume=True, progress=False)
    assert info.value.kind == "bug" and info.value.item_id == item


# -- workers start with the run ----------------------------------------------------------------------------


def test_workers_start_with_the_run_import_their_modules_before_a_job_and_serve_every_split_stage(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The driver's first stage (``test.numbers``, no LLM) waits in its setup until both workers have imported the
    plugin: they were started when the run started and import it before any job (there is none before the split
    stage). Those same processes then do the split stage, and the dataset is the one-process dataset."""
    import fabrika.pipeline.runner as runner

    started: list[int] = []
    real_start = SubprocessLauncher.start

    async def start(self: SubprocessLauncher, count: int) -> None:
        await real_start(self, count)
        started.extend(w.proc.pid for w in self.workers.values())

    monkeypatch.setattr(SubprocessLauncher, "start", start)
    split_began: list[list[int]] = []
    real_split = runner.run_llm_workers

    async def split(*args: Any, **kwargs: Any) -> None:
        split_began.append(list(started))
        await real_split(*args, **kwargs)

    monkeypatch.setattr(runner, "run_llm_workers", split)
    imports = tmp_path / "imports.log"
    monkeypatch.setenv(ws.IMPORT_LOG, str(imports))
    ref = config(tmp_path, ws.pipeline_doc(tmp_path / "ref", 1, n=20))
    assert run_pipeline(ref, resume=False, progress=False).complete
    assert not started and not imports.exists()  # one worker: everything in the driver, nothing started
    cfg = config(tmp_path, ws.pipeline_doc(tmp_path / "run", 2, n=20))
    cfg.stages[0].await_imports = str(imports)  # type: ignore[attr-defined]
    cfg.stages[0].imports = 2  # type: ignore[attr-defined]
    result = run_pipeline(cfg, resume=False, progress=False)
    assert result.complete, result.problems
    assert len(started) == 2 and split_began == [started]  # started before the split stage began
    assert result.stats["test.numbers"].report["worker_imports_seen"] == sorted(started)
    report = result.stats["test.wask"].report["llm_workers"]
    assert report["pids"] == sorted(started) and report["deaths"] == []  # the early processes did the work
    assert ws.dataset_digest(cfg.resolved_run_dir) == ws.dataset_digest(ref.resolved_run_dir)


def test_a_worker_started_with_the_run_that_dies_before_its_first_job_is_replaced(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import os
    import signal

    killed: list[int] = []
    real_start = SubprocessLauncher.start

    async def start(self: SubprocessLauncher, count: int) -> None:
        await real_start(self, count)
        victim = self.workers[0].proc
        os.kill(victim.pid, signal.SIGKILL)
        await victim.wait()
        killed.append(victim.pid)

    monkeypatch.setattr(SubprocessLauncher, "start", start)
    ref = config(tmp_path, ws.pipeline_doc(tmp_path / "ref", 1, n=20))
    assert run_pipeline(ref, resume=False, progress=False).complete
    cfg = config(tmp_path, ws.pipeline_doc(tmp_path / "run", 2, n=20))
    result = run_pipeline(cfg, resume=False, progress=False)
    assert result.complete, result.problems
    report = result.stats["test.wask"].report["llm_workers"]
    # a fresh process took its place for the first job: no death counted, no partition retried
    assert report["deaths"] == [] and report["retried_rounds"] == 0 and result.stats["test.wask"].transient == 0
    assert len(report["pids"]) == 2 and killed and killed[0] not in report["pids"]
    assert ws.dataset_digest(cfg.resolved_run_dir) == ws.dataset_digest(ref.resolved_run_dir)


def test_workers_are_started_early_only_for_a_run_with_a_split_stage_on_local_processes(tmp_path: Path) -> None:
    """``--until`` a stage before the split one, one worker, or Ray (actors per job): nothing starts; otherwise
    the workers start, import the plugins first, then the engine, and exit 0 when the run closes them."""
    import asyncio

    two = config(tmp_path, ws.pipeline_doc(tmp_path / "r", 2))
    assert preload_modules(two) == ["tests.pipeline.llm_worker_stages", "fabrika.llm.factory", "fabrika.llm.sim"]

    async def early(cfg: PipelineConfig, names: list[str]) -> list[int | None] | None:
        launcher = await start_llm_workers(cfg, [s for s in cfg.stages if s.stage_name in names])
        if launcher is None:
            return None
        assert launcher.preload == preload_modules(cfg)
        procs = [w.proc for w in launcher.workers.values()]
        await launcher.aclose()
        await launcher.aclose()  # closing twice (the run's resources, then the run's start) is harmless
        return [p.returncode for p in procs]

    one = config(tmp_path, ws.pipeline_doc(tmp_path / "r1", 1))
    assert asyncio.run(early(two, ["test.numbers", "test.wask"])) == [0, 0]
    assert asyncio.run(early(two, ["test.numbers"])) is None
    assert asyncio.run(early(one, ["test.numbers", "test.wask"])) is None
    ray = config(tmp_path, {**ws.pipeline_doc(tmp_path / "r2", 2), "executor": "ray"})
    assert asyncio.run(early(ray, ["test.numbers", "test.wask"])) is None
