"""Secrets out of anything fabrika writes or prints: the manifest, error messages, reports.

:func:`redact` replaces the value of every ``*_key`` / ``*token*`` /
``*secret*`` / ``*password*`` field (``api_key``, ``hf_token``…) and the
password part of URLs (``https://user:pw@host``) with ``***``. It lives in the
LLM layer because API keys do, and every layer above may import it.
"""

from __future__ import annotations

import re
from typing import Any

REDACTED = "***"
_SECRET_FIELD = re.compile(r"(^|_)(api_?)?key$|(^|_)token($|_)|secret|passw(or)?d|authorization|credential", re.I)
_URL_PASSWORD = re.compile(r"(?P<scheme>[a-z][a-z0-9+.-]*://)(?P<user>[^/:@\s]*):[^/@\s]+@", re.I)


def redact(value: Any) -> Any:
    """``value`` with secrets replaced by ``***`` (see module docstring); other values unchanged."""
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if isinstance(k, str) and _SECRET_FIELD.search(k) and isinstance(v, str) and v:
                out[k] = REDACTED
            else:
                out[k] = redact(v)
        return out
    if isinstance(value, (list, tuple)):
        return [redact(v) for v in value]
    if isinstance(value, str) and "@" in value and "://" in value:
        return _URL_PASSWORD.sub(lambda m: f"{m.group('scheme')}{m.group('user')}:{REDACTED}@", value)
    return value



def public_url(url: str) -> str:
    """``url`` as it may be written down (the request log's ``endpoint``): no user or password, no query string
    (``?api-key=…``) and no fragment; ``scheme://host:port/path`` with the trailing ``/`` removed."""
    from urllib.parse import urlsplit, urlunsplit

    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = parts.port
    except ValueError:
        return REDACTED
    if ":" in host:  # IPv6
        host = f"[{host}]"
    netloc = host + (f":{port}" if port is not None else "")
    return urlunsplit((parts.scheme, netloc, parts.path.rstrip("/"), "", ""))
