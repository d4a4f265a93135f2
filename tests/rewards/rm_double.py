"""A served reward model on loopback that injects tagged faults (a test double, like FcModelDouble for FC).

It speaks vLLM's ``/pooling`` and TEI's ``/rerank`` and ``/predict`` and scores an answer by its
length / 10 (so a test knows the true score of every answer). Faults are drawn per answer from a
seed (deterministic, whatever the order of requests), each one recorded with its tag:

* transient — ``timeout`` (answers after the client gave up), ``reset`` (closes without a reply),
  ``http_503``, ``http_429``, ``garbled`` (a 200 whose body is not JSON), ``cut`` (a 200 whose body
  stops short of its Content-Length);
* verdicts on one answer — ``http_400`` (the request refused), ``nan`` (a non-finite score);
* configuration — ``shape`` (JSON in another API's shape), ``http_404``.

A transient fault is *flaky* (the first ``flaky_attempts`` requests of the answer fail, then it is
answered) or, for a ``down_share`` of the faulted answers, *down* (every request fails until
:meth:`RMDouble.heal`).
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections import Counter
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Iterable

TRANSIENT = ("timeout", "reset", "http_503", "http_429", "garbled", "cut")
VERDICTS = ("http_400", "nan")
CONFIG = ("shape", "http_404")
KINDS = TRANSIENT + VERDICTS + CONFIG


@dataclass(frozen=True)
class Fault:
    """One injected fault: its tag, the answer it hit, and which request of that answer it was (1-based)."""

    kind: str
    answer: str
    attempt: int


def true_score(answer: str) -> float:
    """The score the double gives ``answer`` when it answers."""
    return len(answer) / 10


class RMDouble:
    """A loopback RM server with seeded, tagged faults (see the module doc); a context manager."""

    def __init__(self, *, seed: int = 0, rate: float = 0.3, kinds: Iterable[str] = TRANSIENT + VERDICTS,
                 down_share: float = 0.3, flaky_attempts: int = 1, timeout_delay: float = 0.5) -> None:
        unknown = set(kinds) - set(KINDS)
        if unknown:
            raise ValueError(f"unknown fault kinds {sorted(unknown)}; use some of {KINDS}")
        self.seed, self.rate, self.kinds = seed, rate, tuple(sorted(kinds))
        self.down_share, self.flaky_attempts, self.timeout_delay = down_share, flaky_attempts, timeout_delay
        self.faults: list[Fault] = []
        self.attempts: Counter[str] = Counter()
        self.healed = False
        self._lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                return None

            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.handle(self, body)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    # --- the plan ---------------------------------------------------------------------------

    def _draw(self, answer: str) -> tuple[str | None, bool]:
        """``(kind, down)`` of ``answer``: its fault (None: never faulted) and whether it stays down."""
        digest = hashlib.sha256(f"{self.seed}\x00{answer}".encode()).digest()
        u = int.from_bytes(digest[:8], "big") / 2**64
        if not self.kinds or u >= self.rate:
            return None, False
        kind = self.kinds[digest[8] % len(self.kinds)]
        down = kind in TRANSIENT and digest[9] / 256 < self.down_share
        return kind, down

    def plan(self, answer: str) -> tuple[str | None, bool]:
        """What happens to ``answer`` (for the test's expectations): ``(kind, down)``."""
        return self._draw(answer)

    def heal(self) -> None:
        """The outage ends: answers that were down are answered from now on (flaky and verdict faults stay)."""
        self.healed = True

    def fault_of(self, answer: str, attempt: int) -> str | None:
        kind, down = self._draw(answer)
        if kind is None:
            return None
        if kind in TRANSIENT:
            if down and not self.healed:
                return kind
            return kind if (not down and attempt <= self.flaky_attempts) else None
        return kind  # verdicts and configuration faults answer the same every time

    # --- serving ----------------------------------------------------------------------------

    def handle(self, h: BaseHTTPRequestHandler, body: dict[str, Any]) -> None:
        if h.path == "/pooling":
            answers = [body["messages"][-1]["content"]]
        elif h.path == "/rerank":
            answers = list(body["texts"])
        else:
            answers = [body["inputs"][0][1]]
        key = "\x00".join(answers)
        with self._lock:
            self.attempts[key] += 1
            attempt = self.attempts[key]
        kind = next((k for k in (self.fault_of(a, attempt) for a in answers) if k is not None), None)
        if kind is not None:
            with self._lock:
                self.faults.append(Fault(kind, key, attempt))
        scores = [float("nan") if self.fault_of(a, attempt) == "nan" else true_score(a) for a in answers]
        if kind == "timeout":
            time.sleep(self.timeout_delay)
            return self._send(h, 200, self._ok(h.path, scores))
        if kind == "reset":
            h.close_connection = True
            return None
        if kind in ("http_503", "http_429", "http_400", "http_404"):
            return self._send(h, int(kind[5:]), b'{"error": "injected"}')
        if kind == "garbled":
            return self._send(h, 200, b"<html>502 Bad Gateway</html>")
        if kind == "cut":
            data = self._ok(h.path, scores)
            h.send_response(200)
            h.send_header("Content-Type", "application/json")
            h.send_header("Content-Length", str(len(data) + 50))
            h.end_headers()
            h.wfile.write(data[: len(data) // 2])
            h.close_connection = True
            return None
        if kind == "shape":
            return self._send(h, 200, json.dumps({"result": scores}).encode())
        return self._send(h, 200, self._ok(h.path, scores))

    @staticmethod
    def _ok(path: str, scores: list[float]) -> bytes:
        if path == "/pooling":
            out: Any = {"data": [{"index": 0, "data": [scores[0]]}]}
        elif path == "/rerank":
            out = [{"index": i, "score": s} for i, s in enumerate(scores)]
        else:
            out = [[{"label": "LABEL_0", "score": scores[0]}]]
        return json.dumps(out).encode()  # NaN is written as the bare token NaN, as Python servers do

    @staticmethod
    def _send(h: BaseHTTPRequestHandler, status: int, data: bytes) -> None:
        try:
            h.send_response(status)
            h.send_header("Content-Type", "application/json")
            h.send_header("Content-Length", str(len(data)))
            h.end_headers()
            h.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):  # the client gave up (timeout)
            pass

    def counts(self) -> dict[str, int]:
        return dict(Counter(f.kind for f in self.faults))

    def __enter__(self) -> RMDouble:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
