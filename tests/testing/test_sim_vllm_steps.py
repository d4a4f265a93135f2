"""The step-level simulated vLLM (fabrika.testing.sim_vllm.StepEngine / StepFleet): what vLLM's scheduler does
that the arrival-time model cannot — batch-dependent decode, chunked prefill sharing a step, blocks held only
by running sequences, preemption with recompute, vLLM's prefix-cache counters."""

from __future__ import annotations

from fabrika.testing.multiturn import hit_rate, parse_prefix_cache_counters
from fabrika.testing.sim_vllm import StepEngine, StepEngineConfig, StepFleet

CFG = StepEngineConfig(max_num_seqs=4, max_num_batched_tokens=64, block_size=4, num_blocks=64, step_s=0.01,
                       decode_s_per_seq=0.002, prefill_s_per_token=0.001, request_overhead_s=0.0)


def run(cfg: StepEngineConfig, requests: list[tuple[float, list[int], int]]) -> tuple[list[float], StepEngine]:
    """``(arrival, prompt ids, output tokens)`` on one server; returns each request's finish time."""
    engine = StepEngine(cfg)
    fleet = StepFleet([engine])
    done = [0.0] * len(requests)
    for i, (t, prompt, out) in enumerate(requests):
        fleet.submit(0, t, prompt, out, lambda t_done, _i=i: done.__setitem__(_i, t_done))
    fleet.run()
    return done, engine


def prompt(start: int, n: int) -> list[int]:
    return list(range(start, start + n))


def test_a_lone_request_decodes_faster_than_one_in_a_full_batch() -> None:
    [alone], _ = run(CFG, [(0.0, prompt(0, 3), 20)])
    batch, _ = run(CFG, [(0.0, prompt(100 * i, 3), 20) for i in range(4)])
    # one step prefills the 3 tokens and samples the first token, then 19 decode steps
    assert abs(alone - (0.01 + 0.003 + 19 * 0.012)) < 1e-9
    assert min(batch) > alone and abs(max(batch) - (0.01 + 0.012 + 19 * (0.01 + 4 * 0.002))) < 1e-9


def test_a_long_prefill_shares_the_step_in_chunks_and_slows_the_decodes() -> None:
    [short_alone], _ = run(CFG, [(0.0, prompt(0, 3), 10)])
    (short, _long), engine = run(CFG, [(0.0, prompt(0, 3), 10), (0.02, prompt(1000, 200), 1)])
    assert short > short_alone  # the decode steps that carried prefill chunks took longer
    # 200 prompt tokens with 64-token budgets: at least four steps carried chunks of it
    assert engine.stats["prefill_tokens"] == 203 and engine.stats["steps"] >= 4 + 1


def test_requests_beyond_max_num_seqs_queue() -> None:
    done, _ = run(CFG, [(0.0, prompt(100 * i, 3), 5) for i in range(5)])
    assert sorted(done)[-1] > 1.5 * sorted(done)[3]  # the fifth starts when one of the first four finishes


def test_the_prefix_cache_counts_like_vllm_and_only_full_blocks_hit() -> None:
    base = prompt(0, 10)  # two full blocks of 4 and a partial one
    _, engine = run(CFG, [(0.0, base, 2), (1.0, base + [77, 78], 2)])
    # the second prompt (12 tokens) finds the first two blocks (8 tokens); the third block was partial
    assert engine.stats["queries"] == 22 and engine.stats["hits"] == 8
    # the same prompt again: at most prompt - 1 tokens come from the cache (the last one is computed)
    _, engine = run(CFG, [(0.0, prompt(0, 8), 1), (1.0, prompt(0, 8), 1)])
    assert engine.stats["hits"] == 4


def test_generated_blocks_are_cached_when_the_caller_gives_their_ids() -> None:
    engine = StepEngine(CFG)
    fleet = StepFleet([engine])
    fleet.submit(0, 0.0, prompt(0, 4), 4, lambda t: None, output=[50, 51, 52, 53])
    fleet.run()
    fleet.submit(0, fleet.now + 1, prompt(0, 4) + [50, 51, 52, 53, 9], 1, lambda t: None)
    fleet.run()
    # the prompt block and the block of generated tokens 50..52 + ... : the output's KV exists up to its last
    # token but one, so the second block (50-53) is complete only without the final token: one block hits
    assert engine.stats["hits"] == 4
    engine2 = StepEngine(CFG)
    fleet2 = StepFleet([engine2])
    fleet2.submit(0, 0.0, prompt(0, 4), 5, lambda t: None, output=[50, 51, 52, 53, 54])
    fleet2.run()
    fleet2.submit(0, fleet2.now + 1, prompt(0, 4) + [50, 51, 52, 53, 9], 1, lambda t: None)
    fleet2.run()
    assert engine2.stats["hits"] == 8  # five generated: the KV of 50..53 exists, a full block


def test_only_running_sequences_hold_blocks_and_a_full_kv_preempts() -> None:
    small = StepEngineConfig(max_num_seqs=4, max_num_batched_tokens=64, block_size=4, num_blocks=10, step_s=0.01,
                             decode_s_per_seq=0.0, prefill_s_per_token=0.0, request_overhead_s=0.0)
    # four sequences growing to 4 + 12 tokens (4 blocks each) cannot all fit in 10 blocks: one is preempted
    done, engine = run(small, [(0.0, prompt(100 * i, 4), 12) for i in range(4)])
    assert engine.stats["preemptions"] >= 1 and len(done) == 4 and min(done) > 0
    # nothing runs any more: every block is free again (cached ones are evictable)
    assert len(engine._free) == small.num_blocks and not engine.running and not engine.waiting
    # a queued request holds nothing: one running at a time, the three queued ones take no blocks
    one = StepEngineConfig(**{**{k: getattr(small, k) for k in small.__dataclass_fields__}, "max_num_seqs": 1})
    done, engine = run(one, [(0.0, prompt(100 * i, 4), 12) for i in range(4)])
    assert engine.stats["preemptions"] == 0 and len(set(done)) == 4


def test_prefix_cache_counters_from_vllm_metrics_text() -> None:
    text = """# HELP vllm:prefix_cache_queries Prefix cache queries
vllm:prefix_cache_queries_total{engine="0",model_name="m"} 1200.0
vllm:prefix_cache_queries_created{engine="0",model_name="m"} 1.79e+09
vllm:prefix_cache_hits_total{engine="0",model_name="m"} 384.0
vllm:external_prefix_cache_hits_total{engine="0",model_name="m"} 99.0
"""
    assert parse_prefix_cache_counters(text) == (1200.0, 384.0)
    assert hit_rate([(100.0, 0.0), (0.0, 0.0)], [(300.0, 50.0), (200.0, 150.0)]) == 0.5


def test_servers_sharing_a_hosts_cores_slow_each_other_by_the_contention_factor() -> None:
    def pair(contention: float, second_at: float) -> list[float]:
        fleet = StepFleet([StepEngine(CFG), StepEngine(CFG)], contention=contention)
        done = [0.0, 0.0]
        fleet.submit(0, 0.0, prompt(0, 3), 20, lambda t: done.__setitem__(0, t))
        fleet.submit(1, second_at, prompt(100, 3), 20, lambda t: done.__setitem__(1, t))
        fleet.run()
        return done

    alone = 0.01 + 0.003 + 19 * 0.012  # one prefill step, then 19 decode steps of one sequence
    # both servers step the whole time: every step of each takes (1 + 1.0 × 1 other) times as long
    assert all(abs(d - 2 * alone) < 1e-9 for d in pair(1.0, 0.0))
    assert all(abs(d - 1.5 * alone) < 1e-9 for d in pair(0.5, 0.0))
    # no contention (servers on their own GPUs): independent; and a server busy alone runs at full speed
    assert all(abs(d - alone) < 1e-9 for d in pair(0.0, 0.0))
    first, second = pair(1.0, 1.0)
    assert abs(first - alone) < 1e-9 and abs(second - (1.0 + alone)) < 1e-9


def test_a_serial_api_server_queues_concurrent_requests_a_plain_overhead_does_not() -> None:
    def two_at_once(serial: bool) -> list[float]:
        cfg = StepEngineConfig(**{**{k: getattr(CFG, k) for k in CFG.__dataclass_fields__},
                                  "request_overhead_s": 0.1, "api_serial": serial})
        fleet = StepFleet([StepEngine(cfg)])
        done = [0.0, 0.0]
        for i in range(2):
            fleet.submit(0, 0.0, prompt(100 * i, 3), 1, lambda t, _i=i: done.__setitem__(_i, t))
        fleet.run()
        return done

    step2 = 0.01 + 0.006  # one step prefills both 3-token prompts and samples their only token
    plain = two_at_once(False)
    assert all(abs(d - (0.05 + step2 + 0.05)) < 1e-9 for d in plain)
    # serial: the API process takes the first in (until 0.05), then the second (until 0.10); the first's answer
    # (its engine step ends at 0.063) waits for the process until 0.10 and leaves at 0.15; the second's at 0.20
    first, second = two_at_once(True)
    assert abs(first - 0.15) < 1e-9 and abs(second - 0.20) < 1e-9


def test_a_shared_host_runs_the_servers_steps_and_api_work_one_at_a_time() -> None:
    def pair(host_serial: bool, overhead: float = 0.0) -> list[float]:
        cfg = StepEngineConfig(**{**{k: getattr(CFG, k) for k in CFG.__dataclass_fields__},
                                  "request_overhead_s": overhead})
        fleet = StepFleet([StepEngine(cfg), StepEngine(cfg)], host_serial=host_serial)
        done = [0.0, 0.0]
        fleet.submit(0, 0.0, prompt(0, 3), 20, lambda t: done.__setitem__(0, t))
        fleet.submit(1, 0.0, prompt(100, 3), 20, lambda t: done.__setitem__(1, t))
        fleet.run()
        return done

    alone = 0.01 + 0.003 + 19 * 0.012  # one prefill step, then 19 decode steps of one sequence
    assert all(abs(d - alone) < 1e-9 for d in pair(False))
    # one host: the two servers' steps alternate, so each of the 20 steps of one waits for one of the other;
    # server 0's last step ends one step before server 1's
    first, second = pair(True)
    assert abs(second - 2 * alone) < 1e-9 and abs(first - (2 * alone - 0.012)) < 1e-9
    # the requests' overheads queue on the same host: both arrivals (0.05 each) before any step, and every
    # answer's half after the step that finished it
    first, second = pair(True, overhead=0.1)
    assert abs(second - (0.1 + 2 * alone + 0.1)) < 1e-9 and first < second
    assert abs(first - (0.1 + 2 * alone - 0.012 + 0.05)) < 1e-9
