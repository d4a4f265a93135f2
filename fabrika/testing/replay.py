"""Record-then-replay answers for the fake OpenAI server, so a bench's server costs almost nothing.

Why: on a small box the fake server answering every request with the sim responders (one Python
process parsing the JSON, running a responder, serialising the answer) costs about as much CPU as
the client it serves, so a bench of client-side scaling (``bench/llm_workers.py``) measures the
server. A :class:`ReplayBook` records each 200 answer the server gives, keyed by a hash of the
request (its ``x-fabrika-tag`` and body bytes as sent), while it *records*; once switched to
*serving*, a request seen before is answered with the recorded response bytes without parsing its
body. The answers are the ones the sim gave, byte for byte, so a replayed run is the same run; a
request not seen while recording is answered by the sim as usual and counted in :attr:`misses`.

Deterministic by construction: the sim's answer is a pure function of the request (its responders
seed from the messages), so recording the first answer of each request and replaying it changes
nothing. Only the completion ``id`` (``chatcmpl-fake<n>``) is the recorded one; clients ignore it.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field


def request_key(tag: str, body: bytes) -> bytes:
    """The replay key of one request: BLAKE2b-128 of its tag and its body bytes."""
    h = hashlib.blake2b(tag.encode("utf-8", "replace"), digest_size=16)
    h.update(b"\0")
    h.update(body)
    return h.digest()


@dataclass
class ReplayBook:
    """Recorded answers (request key → response body bytes) and the counters a bench prints."""

    serving: bool = False
    answers: dict[bytes, bytes] = field(default_factory=dict)
    hits: int = 0
    misses: int = 0

    def lookup(self, tag: str, body: bytes) -> bytes | None:
        """The recorded answer while serving (a hit), else ``None`` (a miss while serving)."""
        if not self.serving:
            return None
        found = self.answers.get(request_key(tag, body))
        if found is None:
            self.misses += 1
        else:
            self.hits += 1
        return found

    def record(self, tag: str, body: bytes, answer: bytes) -> None:
        """Keep the first answer to a request (while recording; serving never changes the book)."""
        if not self.serving:
            self.answers.setdefault(request_key(tag, body), answer)

    def snapshot(self) -> dict[str, int | bool]:
        return {"serving": self.serving, "recorded": len(self.answers), "hits": self.hits, "misses": self.misses}
