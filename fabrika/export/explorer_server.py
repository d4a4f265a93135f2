"""``fabrika browse RUN``: the run explorer served from the run's shards on 127.0.0.1.

The same page as the offline report's explorer (:func:`fabrika.export.browser.explorer_html`),
with ``mode: server``: the script asks ``api/rows`` for one page at a time, so a run of any size
is browsed without loading it. Endpoints (JSON):

* ``GET /`` — the page, with the run's counts (:meth:`RunExplorer.summary`) inline;
* ``GET /api/summary`` — the counts alone;
* ``GET /api/rows?stage=S&group=G&reason=R&q=TEXT&vs=V&offset=N&limit=M`` — one page
  (:meth:`RunExplorer.page`): ``total`` rows the filter selects and up to ``limit`` (≤ 500) rows,
  each with its own item's LLM requests (excerpts);
* ``GET /api/requests?stage=S&id=ROW`` — the LLM requests of one row and of the rows it was made
  from, up its lineage (:meth:`RunExplorer.request_chain`);
* ``GET /api/request?key=K`` — one request whole: messages, tools and settings as sent, and the answer.

The server only reads the run directory and binds loopback only; one explorer (its per-stage
indexes) is shared by the request threads under a lock.
"""

from __future__ import annotations

import html
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

from fabrika.errors import StoreError
from fabrika.export.browser import explorer_html, template
from fabrika.export.explorer import RunExplorer

HOST = "127.0.0.1"
MAX_LIMIT = 500


def page_html(explorer: RunExplorer, summary: dict[str, Any]) -> str:
    name = html.escape(str(summary.get("run")))
    return "\n".join([
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>",
        f"<title>fabrika browse: {name}</title><style>{template('report.css')}</style></head><body>",
        f"<h1>Run {name} — version {html.escape(str(explorer.version))}</h1>",
        "<p>Served by <code>fabrika browse</code> from the run's shards: every row of every stage, a page at a "
        "time. Every count is the one <code>fabrika status</code> prints.</p>",
        explorer_html({"mode": "server", "summary": summary, "page_size": 50}),
        "</body></html>",
    ])


class ExplorerServer(ThreadingHTTPServer):
    """A loopback HTTP server over one :class:`RunExplorer`."""

    daemon_threads = True

    def __init__(self, run_dir: str | Path, version: str | None = None, port: int = 0) -> None:
        self.explorer = RunExplorer(run_dir, version)
        self.lock = threading.Lock()
        self._summary: dict[str, Any] | None = None
        self._warming = False
        super().__init__((HOST, port), _Handler)

    def summary(self) -> dict[str, Any]:
        with self.lock:
            if self._summary is None:
                self._summary = self.explorer.summary()
            return self._summary

    def warm(self) -> None:
        """Index every stage in the background once the first page is out (later pages and filters then only
        slice the index)."""
        with self.lock:
            if self._warming:
                return
            self._warming = True

        def build() -> None:
            for stage in self.explorer.stages():
                try:
                    self.explorer.prepare(stage)
                except Exception:  # noqa: BLE001 - a request for that stage reports the error itself
                    continue

        threading.Thread(target=build, name="fabrika-browse-index", daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.server_address[1]}/"


class _Handler(BaseHTTPRequestHandler):
    server: ExplorerServer

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        return  # quiet: the terminal shows the URL, not every request

    def _send(self, code: int, body: str, kind: str = "application/json") -> None:
        data = body.encode("utf-8")
        self.send_response(code)
        self.send_header("Content-Type", f"{kind}; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        url = urlparse(self.path)
        query = {k: v[-1] for k, v in parse_qs(url.query).items()}
        try:
            if url.path == "/favicon.ico":
                self._send(204, "", "image/x-icon")
            elif url.path == "/":
                self._send(200, page_html(self.server.explorer, self.server.summary()), "text/html")
            elif url.path == "/api/summary":
                self._send(200, json.dumps(self.server.summary(), ensure_ascii=False, default=str))
            elif url.path == "/api/rows":
                self._send(200, json.dumps(self._rows(query), ensure_ascii=False, default=str))
                self.server.warm()
            elif url.path == "/api/requests":
                stage, row_id = self._stage(query), query.get("id") or ""
                with self.server.lock:
                    chain = self.server.explorer.request_chain(stage, row_id)
                self._send(200, json.dumps({"stage": stage, "id": row_id, "steps": chain}, ensure_ascii=False,
                                           default=str))
            elif url.path == "/api/request":
                with self.server.lock:
                    body = self.server.explorer.requests.full(query.get("key") or "")
                self._send(200, json.dumps(body, ensure_ascii=False, default=str))
            else:
                self._send(404, json.dumps({"error": f"no such path {url.path}"}))
        except (StoreError, ValueError) as exc:
            self._send(400, json.dumps({"error": str(exc)}, ensure_ascii=False))

    def _stage(self, query: dict[str, str]) -> str:
        explorer = self.server.explorer
        stage = query.get("stage") or (explorer.stages() or [""])[0]
        if stage not in explorer.stages():
            raise ValueError(f"stage {stage!r}: not a browsable stage; stages: {', '.join(explorer.stages())}")
        return stage

    def _rows(self, query: dict[str, str]) -> dict[str, Any]:
        explorer = self.server.explorer
        stage = self._stage(query)
        offset = max(0, int(query.get("offset") or 0))
        limit = min(MAX_LIMIT, max(1, int(query.get("limit") or 50)))
        with self.server.lock:
            return explorer.page(stage, group=query.get("group") or None, reason=query.get("reason") or None,
                                 query=query.get("q") or None, offset=offset, limit=limit, vs=query.get("vs") or None)


def serve(run_dir: str | Path, version: str | None = None, port: int = 8765,
          ready: Any = None) -> None:  # pragma: no cover - blocking loop; tests drive ExplorerServer
    """Serve until interrupted; ``ready(url)`` is called once the socket listens."""
    server = ExplorerServer(run_dir, version, port)
    try:
        if ready is not None:
            ready(server.url)
        server.serve_forever()
    finally:
        server.server_close()
