"""Prefix-affinity routing: bounded load, key stability, remapping when a server goes down."""

from __future__ import annotations

import asyncio
import math
import random
import threading
import time
from pathlib import Path

import pytest

from fabrika.llm import ChatRequest, LLMConfig, build_engine
from fabrika.llm.factory import routing_policy
from fabrika.llm.routing import AffinityPolicy, CapacityPolicy, CircuitBreaker, Endpoint, EndpointPool
from fabrika.testing import FakeOpenAIServer, SimVLLMConfig
from tests.llm.llm_helpers import http_config


def endpoints(n: int, cap: int = 1000, caps: list[int] | None = None) -> list[Endpoint]:
    caps = caps or [cap] * n
    return [Endpoint(base_url=f"http://10.0.0.{i}:8000/v1", url="", headers={}, api_key="", max_concurrency=c,
                     breaker=CircuitBreaker()) for i, c in enumerate(caps)]


def req(key: str | None, text: str = "q") -> ChatRequest:
    return ChatRequest(messages=({"role": "user", "content": text},), routing_key=key)


@pytest.mark.parametrize("epsilon", [0.0, 0.1, 0.5])
async def test_bounded_load_holds_under_a_hot_key(epsilon: float) -> None:
    eps = endpoints(4)
    pool = EndpointPool(eps, AffinityPolicy(epsilon=epsilon))
    rng = random.Random(3)
    held: list[Endpoint] = []
    for i in range(600):
        key = "hot" if rng.random() < 0.7 else f"k{rng.randrange(20)}"  # one episode takes most requests
        ep, probe = await pool.acquire(req(key))
        held.append(ep)
        total = sum(e.in_flight for e in eps)
        bound = math.ceil((1 + epsilon) * total / len(eps))
        assert max(e.in_flight for e in eps) <= bound, (i, [e.in_flight for e in eps], bound)
        if rng.random() < 0.3 and held:  # some finish, in random order
            done = held.pop(rng.randrange(len(held)))
            pool.release(done, None, False)


async def test_bounded_load_is_capacity_aware() -> None:
    eps = endpoints(2, caps=[300, 100])
    policy = AffinityPolicy(epsilon=0.1)
    pool = EndpointPool(eps, policy)
    for _ in range(200):
        await pool.acquire(req("same"))
    big, small = eps[0].in_flight, eps[1].in_flight
    assert small <= math.ceil(1.1 * 200 * 100 / 400) and big <= math.ceil(1.1 * 200 * 300 / 400)
    assert big + small == 200


async def test_same_key_same_endpoint_and_keys_spread() -> None:
    eps = endpoints(4)
    policy = AffinityPolicy(epsilon=0.25)
    pool = EndpointPool(eps, policy)
    homes: dict[str, set[str]] = {}
    for _rep in range(3):
        for k in range(200):
            ep, _ = await pool.acquire(req(f"episode-{k}"))
            homes.setdefault(f"episode-{k}", set()).add(ep.base_url)
            pool.release(ep, None, False)  # light load: every request goes home
    assert all(len(v) == 1 for v in homes.values())
    per_ep = {e.base_url: sum(1 for v in homes.values() if e.base_url in v) for e in eps}
    assert min(per_ep.values()) > 20  # the ring spreads 200 keys over 4 servers
    # without a routing key, the prompt is the key: K samples of one prompt meet on one server
    seen = set()
    for _ in range(5):
        ep, _ = await pool.acquire(req(None, "один и тот же промпт"))
        seen.add(ep.base_url)
        pool.release(ep, None, False)
    assert len(seen) == 1


async def test_down_endpoint_remaps_only_its_keys() -> None:
    eps = endpoints(4)
    pool = EndpointPool(eps, AffinityPolicy())

    async def home(key: str) -> str:
        ep, _ = await pool.acquire(req(key))
        pool.release(ep, None, False)
        return ep.base_url

    before = {f"e{k}": await home(f"e{k}") for k in range(200)}
    dead = eps[1]
    dead.breaker.state, dead.breaker.open_until = "open", time.monotonic() + 3600
    after = {k: await home(k) for k in before}
    assert all(after[k] != dead.base_url for k in after)
    moved = {k for k in before if before[k] != after[k]}
    assert moved == {k for k in before if before[k] == dead.base_url}  # the others keep their server (and cache)


def test_config_default_is_affinity_with_several_endpoints() -> None:
    one = LLMConfig(backend="openai", endpoints=[{"base_url": "http://a:1/v1"}])
    two = LLMConfig(backend="openai", endpoints=[{"base_url": "http://a:1/v1"}, {"base_url": "http://b:1/v1"}])
    assert isinstance(routing_policy(one), CapacityPolicy)
    assert isinstance(routing_policy(two), AffinityPolicy)
    assert isinstance(routing_policy(two.model_copy(update={"routing": "least_loaded"})), CapacityPolicy)
    assert routing_policy(two.model_copy(update={"routing_epsilon": 0.5})).epsilon == 0.5
    with pytest.raises(ValueError):
        LLMConfig(backend="openai", endpoints=[{"base_url": "http://a:1/v1"}], routing="random")


async def _episodes(eng, n_episodes: int, turns: int, think_s: float = 0.0) -> list[list[str]]:  # noqa: ANN001
    """Multi-turn conversations: each turn's prompt carries the previous answers (like an FC episode);
    ``think_s``: up to that long between turns (client-side work), so the fleet's load moves meanwhile."""

    async def episode(e: int) -> list[str]:
        rng = random.Random(e)
        # each episode has its own long prefix (in FC: its plan's tool schemas)
        msgs: list[dict[str, str]] = [{"role": "system", "content": f"Эпизод {e}. " + "Ты — вежливый помощник. " * 10}]
        out = []
        for t in range(turns):
            msgs.append({"role": "user", "content": f"Эпизод {e}, вопрос {t}: что дальше?"})
            resp = await eng.complete_one(ChatRequest(messages=tuple(msgs), routing_key=f"ep-{e}", tag="fc.user"))
            assert resp.ok, resp.error
            out.append(resp.text)
            msgs.append({"role": "assistant", "content": resp.text})
            if think_s:
                await asyncio.sleep(rng.random() * think_s)
        return out

    return list(await asyncio.gather(*[episode(e) for e in range(n_episodes)]))


async def test_dataset_identical_between_routing_modes_and_affinity_reuses_cache(tmp_path: Path) -> None:
    cfg = SimVLLMConfig(slots=8, time_scale=100.0)
    results, cached = {}, {}
    for mode in ("least_loaded", "affinity"):
        servers = [FakeOpenAIServer(vllm=cfg).start() for _ in range(4)]
        try:
            eng = build_engine(http_config(*servers, routing=mode, cache={"enabled": False}), tmp_path / mode)
            async with eng:
                results[mode] = await _episodes(eng, 32, 5, think_s=0.02)
            cached[mode] = sum(s.sim_stats()["prompt_tokens_cached"] for s in servers)
        finally:
            for s in servers:
                s.stop()
    assert results["affinity"] == results["least_loaded"]
    assert cached["affinity"] > 1.5 * cached["least_loaded"]  # the bench measures the 2x goal at scale


async def test_endpoint_down_mid_run_loses_nothing(tmp_path: Path) -> None:
    cfg = SimVLLMConfig(slots=8, time_scale=20.0)
    servers = [FakeOpenAIServer(vllm=cfg).start() for _ in range(3)]
    try:
        eng = build_engine(http_config(*servers, routing="affinity", max_retries=8, cache={"enabled": False},
                                       breaker={"failure_threshold": 1, "cooldown_s": 30.0}), tmp_path)
        def kill_when_busy() -> None:  # down mid-run: after it has answered 15 requests
            deadline = time.monotonic() + 20
            while servers[0].served < 15 and time.monotonic() < deadline:
                time.sleep(0.002)
            servers[0].stop()

        killer = threading.Thread(target=kill_when_busy)
        killer.start()
        async with eng:
            results = await _episodes(eng, 30, 6, think_s=0.01)
        killer.join()
        assert 15 <= servers[0].served < 40  # it went down early (its fair share was 60 of 180)
        assert all(len(r) == 6 and all(results_i for results_i in r) for r in results)
        assert not servers[0].running
        served = [s.served for s in servers]
        assert served[1] + served[2] >= 180 - served[0]  # every turn answered; the dead server's keys moved
        health = {h["base_url"]: h for h in eng.backend.health()}
        assert health[servers[0].base_url.rstrip("/")]["breaker"] == "open"
    finally:
        for s in servers:
            s.stop()


def test_routing_key_is_not_in_the_cache_key(tmp_path: Path) -> None:
    from fabrika.llm.cache import request_key

    a, b = req("ep-1", "вопрос"), req("ep-2", "вопрос")
    assert request_key(a, scope="openai") == request_key(b, scope="openai")
    assert request_key(a, scope="openai") != request_key(req("ep-1", "другой вопрос"), scope="openai")



async def test_ring_shares_are_even_enough_that_the_bound_rarely_bites() -> None:
    """Each key alone (light load): its home's share of 8,000 keys stays near 1/4 for several fleets."""
    for base in (0, 7, 40):
        eps = [Endpoint(base_url=f"http://127.0.0.1:{41000 + base + i}/v1", url="", headers={}, api_key="",
                        max_concurrency=1000, breaker=CircuitBreaker()) for i in range(4)]
        policy = AffinityPolicy()
        pool = EndpointPool(eps, policy)
        for k in range(8000):
            ep, _ = await pool.acquire(req(f"plan-{k}"))
            pool.release(ep, None, False)
        shares = [e.served / 8000 for e in eps]
        assert max(shares) < 1.15 / 4 and min(shares) > 0.85 / 4, shares
        assert policy.stats["spill"] == policy.stats["fallback"] == 0


async def test_bounded_load_counts_the_samples_of_an_n_request() -> None:
    """An n=8 request takes 8 sequence slots on a vLLM server: the bound and the fallback weigh it so."""
    eps = endpoints(4)
    pool = EndpointPool(eps, AffinityPolicy(epsilon=0.25))
    held = []
    for k in range(64):  # many keys, K=8 samples each as one request
        r = ChatRequest(messages=({"role": "user", "content": f"prompt {k}"},), n=8)
        ep, _ = await pool.acquire(r)
        held.append(ep)
        total = sum(e.in_flight for e in eps)
        assert total == 8 * (k + 1)
        assert max(e.in_flight for e in eps) <= math.ceil(1.25 * total / 4) + 7  # one request's overshoot at most
    for ep in held:
        pool.release(ep, None, False, 8)
    assert [e.in_flight for e in eps] == [0, 0, 0, 0]


async def test_an_n_request_goes_home_in_an_idle_fleet() -> None:
    """The bound never refuses an endpoint that holds nothing: a lone n=8 request is not sent away from its cache."""
    eps = endpoints(4)
    policy = AffinityPolicy(epsilon=0.25)
    pool = EndpointPool(eps, policy)
    homes = set()
    for _ in range(3):
        r = ChatRequest(messages=({"role": "user", "content": "один промпт"},), n=8)
        ep, _ = await pool.acquire(r)
        homes.add(ep.base_url)
        pool.release(ep, None, False, 8)
    assert len(homes) == 1 and policy.stats["home"] == 3


async def test_home_wait_goes_home_when_the_home_frees_in_time_and_spills_after_the_wait() -> None:
    """``home_wait_s``: a request whose home is past the bound waits for that server's next release (then
    goes home), spills once the wait is over, and never waits for a home that is down."""
    eps = endpoints(2)
    policy = AffinityPolicy(epsilon=0.0, home_wait_s=0.5)
    pool = EndpointPool(eps, policy)
    first, _ = await pool.acquire(req("hot"))
    other = next(e for e in eps if e is not first)
    # the home holds 1 of 1 in flight: with epsilon 0 a second request of the key is past the bound and waits
    t0 = time.monotonic()
    second = asyncio.create_task(pool.acquire(req("hot")))
    await asyncio.sleep(0.05)
    assert not second.done() and policy.wait_stats["waited"] == 1
    pool.release(first, None, False)  # the home finishes its request: the waiter goes home
    ep, _ = await asyncio.wait_for(second, 1.0)
    assert ep is first and time.monotonic() - t0 < 0.4 and policy.wait_stats["waited_then_spilled"] == 0
    # nobody releases: after the wait it spills to the next server, within the bound
    t0 = time.monotonic()
    ep, _ = await pool.acquire(req("hot"))
    assert ep is other and time.monotonic() - t0 >= 0.45 and policy.wait_stats["waited_then_spilled"] == 1
    # a home that is down is not waited for
    first.breaker.state, first.breaker.open_until = "open", time.monotonic() + 60
    t0 = time.monotonic()
    ep, _ = await pool.acquire(req("hot"))
    assert ep is other and time.monotonic() - t0 < 0.1


@pytest.mark.parametrize("epsilon", [0.0, 0.25])
async def test_bounded_load_holds_with_home_wait(epsilon: float) -> None:
    """Waiting for the home changes when a request is placed, never where past the bound; with requests
    finishing concurrently every waiter is placed (no deadlock)."""
    eps = endpoints(4)
    pool = EndpointPool(eps, AffinityPolicy(epsilon=epsilon, home_wait_s=0.05))
    rng = random.Random(5)
    violations = []

    async def one(i: int) -> None:
        key = "hot" if rng.random() < 0.6 else f"k{rng.randrange(30)}"
        ep, _ = await pool.acquire(req(key))
        total = sum(e.in_flight for e in eps)
        if ep.in_flight > max(1, math.ceil((1 + epsilon) * total / len(eps))):
            violations.append((i, [e.in_flight for e in eps]))
        await asyncio.sleep(rng.random() * 0.02)
        pool.release(ep, None, False)

    await asyncio.wait_for(asyncio.gather(*(one(i) for i in range(300))), 30)
    assert violations == [] and [e.in_flight for e in eps] == [0, 0, 0, 0]


async def test_a_spill_moves_the_whole_episode_and_its_new_home_sticks() -> None:
    """Once a turn spills, the episode's later turns go to the server that turn left its prefix on, even
    after the original home is free again (a single-turn spill would come back to a stale copy)."""
    eps = endpoints(2)
    policy = AffinityPolicy(epsilon=0.0)
    pool = EndpointPool(eps, policy)
    first, _ = await pool.acquire(req("ep-7"))
    other = next(e for e in eps if e is not first)
    spilled, _ = await pool.acquire(req("ep-7"))  # home holds 1 of 1 allowed: the turn spills
    assert spilled is other and policy.stats["spill"] == 1 and policy.stats["rehomed"] == 1
    pool.release(first, None, False)
    pool.release(spilled, None, False)
    for _ in range(3):  # the fleet is idle again: every later turn goes to the new home
        ep, _ = await pool.acquire(req("ep-7"))
        assert ep is other
        pool.release(ep, None, False)
    assert policy.stats["home"] == 4 and policy.stats["rehomed"] == 1
    # a new home that goes down hands the key on along the ring (its original home), not to the fallback
    other.breaker.state, other.breaker.open_until = "open", time.monotonic() + 60
    ep, _ = await pool.acquire(req("ep-7"))
    assert ep is first


async def test_the_sticky_table_is_bounded() -> None:
    eps = endpoints(2)
    policy = AffinityPolicy(epsilon=0.0, sticky_keys=3)
    pool = EndpointPool(eps, policy)
    for k in range(10):
        a, _ = await pool.acquire(req(f"k{k}"))
        b, _ = await pool.acquire(req(f"k{k}"))  # spills: re-homes k
        pool.release(a, None, False)
        pool.release(b, None, False)
    from fabrika.llm.routing import _hash64

    assert policy.stats["rehomed"] == 10 and list(policy._sticky) == [_hash64(f"k{k}") for k in (7, 8, 9)]


async def test_home_wait_only_while_the_fleet_is_saturated() -> None:
    """Below ``saturation`` a request past its home's bound spills at once (a server has room); at or above it
    the request waits for its home."""
    eps = endpoints(2, cap=4)
    policy = AffinityPolicy(epsilon=0.0, home_wait_s=5.0, saturation=0.5)
    pool = EndpointPool(eps, policy)
    home, _ = await pool.acquire(req("a"))
    other = next(e for e in eps if e is not home)
    # below saturation (2 of 4) the home keeps its key although 2 > the plain bound ceil(2 / 2)
    again, _ = await pool.acquire(req("a"))
    assert again is home and policy.stats["spill"] == 0
    # load 2/8 < 0.5: the third request of "a" (past both) spills without waiting, and "a" moves
    ep, _ = await asyncio.wait_for(pool.acquire(req("a")), 1.0)
    assert ep is other and policy.wait_stats["waited"] == 0 and policy.stats["rehomed"] == 1
    pool.release(home, None, False)
    pool.release(home, None, False)
    pool.release(other, None, False)
    # 4 of 8 in flight (saturated), the new home past its bound (3 + 1 > ceil(5 / 2)): the turn waits
    home.in_flight, other.in_flight = 1, 3
    waiter = asyncio.create_task(pool.acquire(req("a")))
    await asyncio.sleep(0.05)
    assert not waiter.done() and policy.wait_stats["waited"] == 1
    # the home finishes one: 3 of 8, no longer saturated, and it is still past its bound: the turn spills now
    pool.release(other, None, False)
    ep, _ = await asyncio.wait_for(waiter, 1.0)
    assert ep is home and policy.wait_stats["waited_then_spilled"] == 0


def test_config_default_waits_for_the_home_in_a_saturated_fleet() -> None:
    cfg = LLMConfig(backend="openai", model="m", endpoints=[{"base_url": "http://127.0.0.1:1/v1"},
                                                             {"base_url": "http://127.0.0.1:2/v1"}])
    policy = routing_policy(cfg)
    assert isinstance(policy, AffinityPolicy)
    assert policy.home_wait_s == cfg.routing_home_wait_s > 0 and policy.saturation == cfg.routing_saturation == 0.5


async def test_a_key_seen_for_the_first_time_never_waits() -> None:
    """No server holds a new key's prefix: in a saturated fleet with its home full it goes to a free server at
    once (and that server becomes its home), so distinct prompts fill every endpoint to its limit."""
    eps = endpoints(2, cap=2)
    policy = AffinityPolicy(epsilon=0.0, home_wait_s=5.0, saturation=0.5)
    pool = EndpointPool(eps, policy)
    full = eps[0]
    full.in_flight = 2  # saturated fleet (2 of 4), one endpoint full
    fresh = next(f"new{i}" for i in range(1000) if policy.home(req(f"new{i}"), time.monotonic()) is full)
    ep, _ = await asyncio.wait_for(pool.acquire(req(fresh)), 1.0)
    assert ep is eps[1] and policy.wait_stats["waited"] == 0
    # its second request now has a home (eps[1]) with room: it goes there
    ep2, _ = await asyncio.wait_for(pool.acquire(req(fresh)), 1.0)
    assert ep2 is eps[1]


def test_ray_engine_actors_get_the_configured_affinity_policy():
    """Ray engine replicas are placed by the same policy as HTTP endpoints: the home wait and the
    saturation floor of the config reach them, not only epsilon."""
    from fabrika.ray.vllm import engine_routing

    llm = LLMConfig(routing_epsilon=0.5, routing_home_wait_s=1.5, routing_saturation=0.25)
    policy = engine_routing(llm, 3)
    assert isinstance(policy, AffinityPolicy)
    assert (policy.epsilon, policy.home_wait_s, policy.saturation) == (0.5, 1.5, 0.25)
    assert isinstance(engine_routing(llm, 1), CapacityPolicy)
