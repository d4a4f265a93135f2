"""One reward model per process: a thread-safe, lazily loaded scorer shared by every caller.

The IF correction compares S (a policy completion's RM score during GRPO) with α (the mean
RM score of the teacher's answers, stored by ``rm.teacher_scores``); ``general.rm`` ranks
teacher answers and the general reward scores completions with the same RM. All of them
ask this module for the RM, so a process holds **one** copy of it whoever calls first:

* :func:`get_reward_model` returns the one :class:`RewardModel` of an :class:`RMSpec`
  (same spec → same object, across threads);
* :class:`RewardModel` loads its scorer on the first call, under a lock — 256 threads
  calling at once cause exactly one load (an 8B RM loaded three times does not fit, and a
  second thread importing ``transformers`` mid-import raised ``ImportError``); a failed
  load stores nothing, so the next call tries again;
* every RM has an ``rm_id``, recorded next to every stored score (α and S are only
  comparable under one id): ``<dir>@<sha256 of config and weights>`` for a local model,
  ``<model>@<base_url>`` for a served one (``/rerank`` or ``/predict`` appended for the
  TEI-style APIs), :data:`SIM_RM_ID` for the offline stand-in.

Scorers (an :class:`RMSpec` holds exactly one):

* ``path`` — a local ``AutoModelForSequenceClassification`` directory (never downloaded),
  :class:`fabrika.rewards.general.SequenceClassifierRM`; one forward pass at a time;
* ``endpoint`` — a served RM: vLLM's ``/pooling`` (``{model, messages}``, the first pooled
  value), or a TEI-style ``/rerank`` (``{query, texts}``, one request per prompt) or
  ``/predict`` (``{inputs: [[query, answer], …]}``, the first label's raw score). The
  TEI APIs take text, so the prompt is sent as ``role: content`` lines. What a failed request
  means follows the failure taxonomy (:mod:`fabrika.pipeline.taxonomy`), see :class:`EndpointScorer`;
* ``sim`` — :func:`sim_scores`, a deterministic hash of prompt and answer mapped to
  [-2, 2]. It ships in the package so the offline demo produces α and S on one scale;
  like the ``sim`` LLM backend it only exercises the pipeline — **never train a real
  model on its scores** (the dataset card says so when rows carry ``rm_id: sim@v1``).

Only the visible answer is scored (:func:`fabrika.textutil.reasoning.answer_text`).
No torch at import: the local model's libraries load inside the first call.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import math
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable, Literal, Sequence

from pydantic import BaseModel, ConfigDict, Field, model_validator

from fabrika.errors import StageConfigError, TransientError
from fabrika.textutil.reasoning import answer_text

__all__ = ["SIM_RM_ID", "UNSCORED_HTTP", "RMAnswerError", "RMEndpoint", "RMSpec", "RMUnavailable", "RewardModel",
           "get_reward_model", "reset_reward_models", "sim_scores"]

SIM_RM_ID = "sim@v1"

Scorer = Callable[[Sequence[Any], Sequence[Any]], Sequence[float]]
Loader = Callable[[], Scorer]


class RMEndpoint(BaseModel):
    """A served reward model: vLLM ``--task reward``/``classify`` (``/pooling``) or a TEI-style server."""

    model_config = ConfigDict(extra="forbid")

    base_url: str = Field(description="Server root, e.g. http://127.0.0.1:8001 (without /v1).")
    model: str = Field(description="Served model name (sent as `model`; part of rm_id).")
    api: Literal["pooling", "rerank", "predict"] = Field(
        default="pooling", description="vLLM `/pooling` ({model, messages}), or TEI's `/rerank` ({query, texts}) "
        "or `/predict` ({inputs: [[query, answer]]}).")
    api_key: str | None = Field(default=None, description="Bearer token, if the server needs one.", repr=False)
    timeout_s: float = Field(default=60.0, gt=0, description="Per-request timeout.")
    max_retries: int = Field(default=2, ge=0, le=10, description="Retries of a transient failure (connection "
                             "error, timeout, 5xx, 429, a cut or garbled body) before the RM is reported unavailable "
                             "(the item stays pending; it is never scored NaN).")
    retry_wait_s: float = Field(default=0.5, ge=0, description="Wait before the first retry; doubled before each "
                                "next one.")
    concurrency: int = Field(default=8, ge=1, le=256, description="Requests in flight per scoring call.")

    @property
    def rm_id(self) -> str:
        root = self.base_url.rstrip("/")
        return f"{self.model}@{root}" if self.api == "pooling" else f"{self.model}@{root}/{self.api}"


class RMSpec(BaseModel):
    """Which reward model scores: exactly one of ``path``, ``endpoint``, ``sim``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    path: Path | None = Field(default=None, description="Local sequence-classification RM directory.")
    endpoint: RMEndpoint | None = Field(default=None, description="A served RM instead of a local one.")
    sim: bool = Field(default=False, description="The offline deterministic stand-in (demo and tests only).")
    batch_size: int = Field(default=8, ge=1, description="Batch size of the local RM.")

    @model_validator(mode="after")
    def _one_scorer(self) -> RMSpec:
        chosen = [n for n, v in (("rm", self.path), ("endpoint", self.endpoint), ("sim", self.sim or None)) if v]
        if len(chosen) != 1:
            raise ValueError(f"a reward model needs exactly one of rm, endpoint, sim: true; got {chosen or 'none'}")
        return self

    @classmethod
    def of(cls, value: RMSpec | str | Path, *, batch_size: int = 8) -> RMSpec:
        """A spec from a spec, a local directory, or the word ``sim`` (how ``rm_path`` names them)."""
        if isinstance(value, RMSpec):
            return value
        if str(value) == "sim":
            return cls(sim=True)
        return cls(path=Path(value), batch_size=batch_size)

    def key(self) -> str:
        """The process-wide identity of this RM (what makes two callers share one instance)."""
        if self.sim:
            return SIM_RM_ID
        if self.endpoint is not None:
            return "endpoint:" + self.endpoint.model_dump_json()
        assert self.path is not None
        return f"path:{Path(self.path).resolve()}"


def sim_scores(prompts: Sequence[Any], completions: Sequence[Any]) -> list[float]:
    """Deterministic pseudo-scores in [-2, 2] from prompt and visible answer (the offline stand-in RM)."""
    out = []
    for p, c in zip(prompts, completions, strict=True):
        digest = hashlib.sha256(json.dumps([p, answer_text(c)], ensure_ascii=False).encode()).digest()
        out.append(round(int.from_bytes(digest[:8], "big") / 2**64 * 4 - 2, 6))
    return out


def prompt_text(prompt: Any) -> str:
    """The prompt as text for the TEI-style APIs: ``role: content`` lines (a string stays itself)."""
    if isinstance(prompt, str):
        return prompt
    messages = [prompt] if isinstance(prompt, dict) else list(prompt or [])
    return "\n\n".join(f"{m.get('role', 'user')}: {m.get('content') or ''}" for m in messages if isinstance(m, dict))


#: HTTP statuses that refuse *this* request (too long for the RM, unprocessable): a verdict on that answer.
UNSCORED_HTTP = frozenset({400, 413, 422})
#: HTTP statuses that say the configuration is wrong (key, model name, route): the stage stops (exit 2).
CONFIG_HTTP = frozenset({401, 403, 404, 405})


class RMUnavailable(TransientError):
    """A served RM failed past its retries (connection, timeout, 5xx, 429, a cut or garbled body).

    Infrastructure, not a property of the item: the runner leaves the item pending and retries it
    (:mod:`fabrika.pipeline.taxonomy`); a GRPO reward stops the step rather than invent a reward.
    """


class RMAnswerError(StageConfigError):
    """The RM server refused the configuration (401/403/404) or answers in a shape its ``api`` does not
    produce (a TEI server behind ``api: pooling``): every item would fail alike, so the stage stops (exit 2)."""


def _first_number(value: Any) -> float:
    """The first number of a pooled value (``[[0.7]]``, ``[{"score": 0.7}]``, ``0.7``); TypeError when none."""
    while isinstance(value, list) and value:
        value = value[0]
    if isinstance(value, dict):
        value = value.get("score")
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"not a number: {value!r}")
    return float(value)


def _finite(value: float) -> float:
    """A non-finite score (NaN, ±inf) is the RM's verdict that it cannot score this answer: :data:`math.nan`,
    which every caller counts as unscored (never stores, never rewards)."""
    return value if math.isfinite(value) else math.nan


class _Refused(Exception):
    """A 400/413/422 answer to one request: a verdict on that answer (it is not scored)."""


class EndpointScorer:
    """``(prompts, completions) -> scores`` over HTTP (stdlib ``urllib``: thread-safe, no event loop).

    What a request's failure means (the failure taxonomy, :mod:`fabrika.pipeline.taxonomy`):

    * **transient** — connection refused or reset, a timeout, 5xx, 429, a body that is not JSON (cut
      or garbled): retried ``max_retries`` times with doubling waits, then :class:`RMUnavailable` (a
      :class:`~fabrika.errors.TransientError`): the item stays pending, no row, no NaN;
    * **configuration** — 401/403/404/405, or JSON in a shape the configured ``api`` never answers:
      :class:`RMAnswerError` (the stage stops, exit 2, naming the field to fix);
    * **verdict on one answer** — 400/413/422 for its request (too long for the RM), or a
      non-finite score: that answer is *unscored* (``math.nan`` in the returned list, which
      ``rm.teacher_scores`` and ``general.rm`` count in ``teacher_rm_failed`` and never store, the
      general reward scores like a missing answer and the IF reward refuses to compare).
    """

    def __init__(self, endpoint: RMEndpoint, *, sleep: Callable[[float], None] = time.sleep) -> None:
        self.endpoint = endpoint
        self._sleep = sleep

    def _url(self, route: str) -> str:
        return f"{self.endpoint.base_url.rstrip('/')}/{route}"

    def _post(self, route: str, body: dict[str, Any]) -> Any:
        """The decoded JSON answer; raises :class:`_Refused`, :class:`RMAnswerError` or :class:`RMUnavailable`."""
        ep = self.endpoint
        data = json.dumps(body, ensure_ascii=False).encode()
        headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {ep.api_key}"} if ep.api_key else {})}
        last = "no attempt"
        for attempt in range(ep.max_retries + 1):
            if attempt:
                self._sleep(ep.retry_wait_s * 2 ** (attempt - 1))
            request = urllib.request.Request(self._url(route), data=data, headers=headers, method="POST")
            try:
                with urllib.request.urlopen(request, timeout=ep.timeout_s) as resp:  # noqa: S310 - configured URL
                    raw = resp.read()
            except urllib.error.HTTPError as exc:
                if exc.code in UNSCORED_HTTP:
                    raise _Refused(f"HTTP {exc.code}") from exc
                if exc.code in CONFIG_HTTP:
                    raise RMAnswerError(
                        f"reward model {ep.rm_id}: HTTP {exc.code} from {self._url(route)}",
                        "check endpoint.base_url, endpoint.model, endpoint.api and endpoint.api_key") from exc
                if exc.code < 500 and exc.code not in (408, 429):
                    raise RMAnswerError(f"reward model {ep.rm_id}: HTTP {exc.code} from {self._url(route)}",
                                        "see the RM server's log; the request is not one it accepts") from exc
                last = f"HTTP {exc.code}"
                continue
            except (OSError, ValueError, http.client.HTTPException) as exc:  # refused, reset, timed out, cut
                last = f"{type(exc).__name__}: {exc}"
                continue
            try:
                return json.loads(raw.decode("utf-8"))
            except (UnicodeDecodeError, ValueError):
                last = f"a body that is not JSON ({len(raw)} bytes: {raw[:40]!r})"
        raise RMUnavailable(f"reward model {ep.rm_id} at {self._url(route)} failed {ep.max_retries + 1} times "
                            f"(last: {last}); the item stays pending and is retried")

    def _shape(self, answer: Any, expected: str) -> RMAnswerError:
        text = json.dumps(answer, ensure_ascii=False, default=str)[:120]
        return RMAnswerError(f"reward model {self.endpoint.rm_id}: the server's answer is not a {self.endpoint.api!r} "
                             f"answer ({expected}); got {text}",
                             "set endpoint.api to the API the server speaks (pooling, rerank or predict)")

    def _pooling(self, prompt: Any, completion: Any) -> float:
        messages = ([{"role": "user", "content": prompt}] if isinstance(prompt, str) else list(prompt)) + [
            {"role": "assistant", "content": answer_text(completion)}]
        try:
            answer = self._post("pooling", {"model": self.endpoint.model, "messages": messages})
        except _Refused:
            return math.nan
        try:
            return _finite(_first_number(answer["data"][0]["data"]))
        except (KeyError, IndexError, TypeError) as exc:
            raise self._shape(answer, '{"data": [{"data": [score]}]}') from exc

    def _rerank(self, prompt: Any, completions: list[Any]) -> list[float]:
        try:
            answer = self._post("rerank", {"model": self.endpoint.model, "query": prompt_text(prompt),
                                           "raw_scores": True, "texts": [answer_text(c) for c in completions]})
        except _Refused:
            return [math.nan] * len(completions)
        out: list[float | None] = [None] * len(completions)
        try:
            for item in answer:
                out[int(item["index"])] = _finite(_first_number(item["score"]))
        except (KeyError, IndexError, TypeError, ValueError) as exc:
            raise self._shape(answer, '[{"index": i, "score": s}, …]') from exc
        if any(s is None for s in out):
            raise self._shape(answer, f"one score per text, {len(completions)} in all")
        return [float(s) for s in out if s is not None]

    def _predict(self, prompt: Any, completion: Any) -> float:
        try:
            answer = self._post("predict", {"model": self.endpoint.model, "raw_scores": True,
                                            "inputs": [[prompt_text(prompt), answer_text(completion)]]})
        except _Refused:
            return math.nan
        try:
            return _finite(_first_number(answer))
        except TypeError as exc:
            raise self._shape(answer, '[[{"label": …, "score": s}]]') from exc

    def __call__(self, prompts: Sequence[Any], completions: Sequence[Any]) -> list[float]:
        pairs = list(zip(prompts, completions, strict=True))
        if not pairs:
            return []
        api = self.endpoint.api
        with ThreadPoolExecutor(max_workers=min(self.endpoint.concurrency, len(pairs))) as pool:
            if api == "rerank":  # one request per distinct prompt, its answers as the texts
                groups: dict[str, list[int]] = {}
                for i, (p, _) in enumerate(pairs):
                    groups.setdefault(json.dumps(p, ensure_ascii=False, sort_keys=True), []).append(i)
                scores = [math.nan] * len(pairs)
                jobs = [(idx, pool.submit(self._rerank, pairs[idx[0]][0], [pairs[i][1] for i in idx]))
                        for idx in groups.values()]
                for idx, job in jobs:  # the first failure (pending or config) is raised: no partial scores
                    for i, s in zip(idx, job.result()):
                        scores[i] = s
                return scores
            one = self._pooling if api == "pooling" else self._predict
            return list(pool.map(lambda pc: one(*pc), pairs))


def _default_loader(spec: RMSpec) -> Loader:
    def load() -> Scorer:
        if spec.sim:
            return sim_scores
        if spec.endpoint is not None:
            return EndpointScorer(spec.endpoint)
        from fabrika.rewards.rm_local import SequenceClassifierRM

        assert spec.path is not None
        model = SequenceClassifierRM(spec.path, batch_size=spec.batch_size)
        model.load()
        return model

    return load


class RewardModel:
    """A scorer loaded on first use under a lock; ``rm(prompts, completions) -> list[float]``.

    Thread-safe: concurrent first calls wait for the one load; a local model scores one batch at
    a time (a served one scores concurrently). ``loads`` counts successful loads (1 after use).
    """

    def __init__(self, spec: RMSpec, loader: Loader | None = None) -> None:
        if loader is None and spec.path is not None and not Path(spec.path).is_dir():
            raise ValueError(f"rm path {str(spec.path)!r} is not a local directory; the RM is never downloaded — "
                             "point `rm` at a saved AutoModelForSequenceClassification")
        self.spec = spec
        self._loader = loader or _default_loader(spec)
        self._scorer: Scorer | None = None
        self._rm_id: str | None = None
        self._load_lock = threading.Lock()
        self._score_lock = threading.Lock() if spec.path is not None else None
        self.loads = 0

    @property
    def rm_id(self) -> str:
        """The id recorded next to every score of this RM (a local model's weights are hashed once)."""
        if self._rm_id is None:
            with self._load_lock:
                if self._rm_id is None:
                    self._rm_id = self._identity()
        return self._rm_id

    def _identity(self) -> str:
        if self.spec.sim:
            return SIM_RM_ID
        if self.spec.endpoint is not None:
            return self.spec.endpoint.rm_id
        from fabrika.rewards.rm_local import rm_identity

        assert self.spec.path is not None
        return rm_identity(self.spec.path)

    def scorer(self) -> Scorer:
        """The loaded scorer (loading it now, once, if nobody has)."""
        scorer = self._scorer
        if scorer is None:
            with self._load_lock:
                if self._scorer is None:
                    self._scorer = self._loader()
                    self.loads += 1
                scorer = self._scorer
        return scorer

    def __call__(self, prompts: Sequence[Any], completions: Sequence[Any]) -> list[float]:
        scorer = self.scorer()
        if self._score_lock is None:
            scores = list(scorer(prompts, completions))
        else:
            with self._score_lock:
                scores = list(scorer(prompts, completions))
        if len(scores) != len(completions):
            raise ValueError(f"reward model {self.rm_id} returned {len(scores)} scores for {len(completions)} answers")
        return [float(s) for s in scores]

    def __repr__(self) -> str:
        return f"<RewardModel {self.spec.key()} loaded={self._scorer is not None}>"


_INSTANCES: dict[str, RewardModel] = {}
_GUARD = threading.Lock()


def get_reward_model(spec: RMSpec | str | Path, *, loader: Loader | None = None, batch_size: int = 8) -> RewardModel:
    """The process's one :class:`RewardModel` of ``spec`` (created on first request, loaded on first call).

    ``loader`` replaces how the scorer is built (tests count loads with it); it is used only by
    the call that creates the instance.
    """
    spec = RMSpec.of(spec, batch_size=batch_size)
    key = spec.key()
    with _GUARD:
        rm = _INSTANCES.get(key)
        if rm is None:
            rm = _INSTANCES[key] = RewardModel(spec, loader)
        return rm


def reset_reward_models() -> None:
    """Forget every instance (tests; a long-lived process that wants the memory back)."""
    with _GUARD:
        _INSTANCES.clear()
