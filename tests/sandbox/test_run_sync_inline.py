"""``run_sync`` runs a one-batch call in the caller's thread: concurrent callers (sync and async) still
each get their own verdicts, and ``close`` waits for a batch a caller is running instead of killing it."""

from __future__ import annotations

import asyncio
import threading

from fabrika.sandbox import SandboxConfig, SandboxPool

#: Verifier ``i`` accepts exactly the responses that contain its own marker.
MARKED = "def evaluate(response):\n    return 'm{i}' in response\n"
#: A verifier that computes a while before it answers (a batch that is in flight when ``close`` comes).
SLOW = "def evaluate(response):\n    total = 0\n    for k in range(300000):\n        total += k % 7\n    return total > 0\n"


def test_concurrent_sync_and_async_callers_get_their_own_verdicts():
    results: dict[str, list[bool | None]] = {}
    with SandboxPool(SandboxConfig(workers=1, timeout_s=5.0)) as pool:

        def sync_caller(i: int) -> None:
            verdicts = pool.run_sync(MARKED.format(i=i), [f"m{i}", "m9", f"x m{i} y"])
            results[f"sync{i}"] = [v.value for v in verdicts]

        async def async_callers() -> None:
            got = await asyncio.gather(*(pool.run(MARKED.format(i=i), [f"m{i}", "nothing"]) for i in (5, 6)))
            for i, verdicts in zip((5, 6), got):
                results[f"async{i}"] = [v.value for v in verdicts]

        threads = [threading.Thread(target=sync_caller, args=(i,)) for i in range(4)]
        threads.append(threading.Thread(target=lambda: asyncio.run(async_callers())))
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=300)  # a hang guard, not a speed check
        assert not any(thread.is_alive() for thread in threads)
        assert pool.stats["batches"] >= 6
    assert results == {**{f"sync{i}": [True, False, True] for i in range(4)},
                       "async5": [True, False], "async6": [True, False]}


def test_close_waits_for_a_batch_a_caller_runs_in_its_own_thread():
    pool = SandboxPool(SandboxConfig(workers=1, timeout_s=10.0))
    started, got = threading.Event(), []
    real = pool._run_batch  # noqa: SLF001 - to know when the caller's batch is in flight

    def run_batch(*args, **kwargs):
        started.set()
        return real(*args, **kwargs)

    pool._run_batch = run_batch  # type: ignore[method-assign]  # noqa: SLF001
    caller = threading.Thread(target=lambda: got.extend(pool.run_sync(SLOW, ["a", "b"])))
    caller.start()
    assert started.wait(timeout=300)  # a hang guard
    pool.close()
    caller.join(timeout=300)
    assert not caller.is_alive()
    assert [v.status for v in got] == ["true", "true"]  # answered, not killed half-way
    assert all(w.proc is None for w in pool._workers)  # noqa: SLF001 - every worker is stopped
