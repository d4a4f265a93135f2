"""The run explorer in a real headless Chromium, as the offline report page and as `fabrika browse`: every count
on the page equals `fabrika status`, no gate-dropped row is labelled kept, a rejected FC dialogue shows its
transcript, a search by a value finds its row and a field name does not match everything.

Chromium is Debian's ``chromium`` (``make test`` / ``.ci/run`` install it when missing) driven by
Playwright with ``executable_path`` — Playwright's own browser download is never used.
"""

from __future__ import annotations

import shutil
import threading
from pathlib import Path
from typing import Any, Iterator

import pytest

from fabrika.export.explorer_server import ExplorerServer
from fabrika.export.report import build_report
from tests.report.explorer_checks import status_json, status_value, version_ids

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def _playwright() -> Any:
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip("BROWSER TEST SKIPPED: the `playwright` package is missing (pip install -e '.[dev]')")
    if CHROMIUM is None:
        pytest.skip("BROWSER TEST SKIPPED: no `chromium` on PATH and it could not be installed (apt-get install chromium)")
    return sync_playwright


@pytest.fixture(scope="module", params=["report", "browse"])
def page_url(request: pytest.FixtureRequest, explorer_run: Path, tmp_path_factory: pytest.TempPathFactory
             ) -> Iterator[str]:
    _playwright()  # skip before building anything when there is no browser
    if request.param == "report":
        yield build_report(explorer_run, tmp_path_factory.mktemp("report")).as_uri()
        return
    server = ExplorerServer(explorer_run, port=0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.url
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=30)


def _wait(page: Any, before: str) -> None:
    page.wait_for_function(f"document.body.dataset.loaded && document.body.dataset.loaded !== '{before}'",
                           timeout=60_000)


def _set(page: Any, action: Any) -> None:
    before = page.evaluate("document.body.dataset.loaded || ''")
    action()
    _wait(page, before)


def _cards(page: Any) -> list[dict[str, str]]:
    return page.eval_on_selector_all("#samples .card", "cs => cs.map(c => ({id: c.dataset.id, group: c.dataset.group}))")


def test_explorer_in_chromium_tells_the_truth(page_url: str, explorer_run: Path, tmp_path: Path):
    sync_playwright = _playwright()
    status = status_json(explorer_run)
    errors: list[str] = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 1000})
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto(page_url)
            _wait(page, "")
            # every count on the page is status's number
            counts = page.eval_on_selector_all("[data-count]", "es => es.map(e => [e.dataset.count, e.textContent])")
            assert len(counts) > 30
            wrong = [(path, text, status_value(status, path)) for path, text in counts
                     if text != str(status_value(status, path))]
            assert not wrong, wrong
            assert {p for p, _ in counts} >= {"stages/fc.dialogues/rejected/too_many_injected", "gates/fc.samples/out",
                                              "gates/fc.samples/dropped_language.allowed", "versions/v1/rows"}
            # page through every row of a dataset stage: no gate-dropped row is labelled kept
            _set(page, lambda: page.select_option("#f-stage", "fc.samples"))
            kept, dropped = version_ids(explorer_run, "v2", "fc.samples"), version_ids(
                explorer_run, "v2", "fc.samples", dropped=True)
            seen: list[dict[str, str]] = []
            while True:
                seen += _cards(page)
                if page.locator("#next").is_disabled():
                    break
                _set(page, lambda: page.click("#next"))
            assert len(seen) == status["stages"]["fc.samples"]["rows"] == len({c["id"] for c in seen})
            assert {c["id"] for c in seen if c["group"] == "kept"} == kept
            assert all(c["group"] == "gate-dropped" for c in seen if c["id"] in dropped)
            _set(page, lambda: page.select_option("#f-group", "gate-dropped"))
            gate = page.locator("#samples .card .gate").first.inner_text()
            assert gate.startswith("dropped by gate ") and "threshold" in gate
            # a rejected FC dialogue shows its transcript
            _set(page, lambda: page.select_option("#f-stage", "fc.dialogues"))
            _set(page, lambda: page.select_option("#f-group", "rejected"))
            card = page.locator("#samples .card").first
            assert card.get_attribute("data-group") == "rejected"
            assert card.locator(".msg.user").count() >= 1 and card.locator(".msg.assistant").count() >= 1
            assert "transcript up to the rejection" in card.inner_text()
            rejected_id = card.get_attribute("data-id")
            word = card.locator(".raw").inner_text().split()[1]
            page.screenshot(path=str(tmp_path / "explorer.png"))
            # search by a value finds the row; a field name or a JSON key does not match everything
            _set(page, lambda: page.select_option("#f-group", ""))
            total = int(page.locator("#shown").get_attribute("data-total"))
            _set(page, lambda: page.fill("#f-text", word))
            assert rejected_id in {c["id"] for c in _cards(page)}
            _set(page, lambda: page.fill("#f-text", "n_wrong"))
            assert page.locator("#shown").get_attribute("data-total") == "0"
            _set(page, lambda: page.fill("#f-text", "wrong"))
            assert 0 < int(page.locator("#shown").get_attribute("data-total")) < total
            # the version diff: what the Russian-only refilter removed
            _set(page, lambda: page.fill("#f-text", ""))
            _set(page, lambda: page.select_option("#f-stage", "fc.samples"))
            _set(page, lambda: page.select_option("#f-vs", "v1"))
            _set(page, lambda: page.select_option("#f-group", "removed"))
            removed = version_ids(explorer_run, "v1", "fc.samples") - kept
            assert int(page.locator("#shown").get_attribute("data-total")) == len(removed) > 0
            assert {c["id"] for c in _cards(page)} <= removed
        finally:
            browser.close()
    assert not errors, errors
    assert (tmp_path / "explorer.png").stat().st_size > 20_000


def test_a_plain_text_prompt_is_shown(tmp_path: Path):
    """`generic.prompts`-style rows keep their prompt as plain text: the card shows it as the user's turn."""
    sync_playwright = _playwright()
    from tests.export.export_fixtures import make_rows, make_run

    rows = make_rows(3)
    for i, row in enumerate(rows):
        row.update(prompt=f"Объясни простыми словами, что такое фотосинтез ({i}).", completion=None)
    page_path = build_report(make_run(tmp_path, rows, stage="general_prompts"))
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            page = browser.new_page()
            page.goto(page_path.as_uri())
            _wait(page, "")
            users = page.locator("#samples .card .msg.user .content").all_inner_texts()
            assert sorted(users) == [f"Объясни простыми словами, что такое фотосинтез ({i})." for i in range(3)]
        finally:
            browser.close()


def _open_requests(page: Any, card: Any, mode: str) -> None:
    """Open a card's LLM requests; in ``fabrika browse`` fetch those of the rows it was made from."""
    card.locator("details.llm-requests > summary").click()
    button = card.locator("details.llm-requests button.lineage")
    if mode == "browse" and button.count():
        button.click()
        card.locator("details.llm-requests[data-lineage='loaded']").wait_for(timeout=60_000)


def _requests_shown(card: Any) -> dict[str, Any]:
    return card.evaluate("""c => ({
        steps: Array.from(c.querySelectorAll('.llm-requests .step')).map(s => s.dataset.stage),
        reqs: Array.from(c.querySelectorAll('.llm-requests tr.req')).map(r => ({key: r.dataset.key,
              cached: r.dataset.cached, attempts: r.dataset.attempts})),
        text: (c.querySelector('.llm-requests') || {innerText: ''}).innerText})""")


def test_every_kind_of_row_shows_the_llm_requests_behind_it(page_url: str, explorer_run: Path):
    """A kept and a gate-dropped sample show the requests of the dialogue they were cut from (and of its plan);
    a rejected dialogue shows its own; one click opens a request whole: the messages sent and the answer."""
    sync_playwright = _playwright()
    mode = "report" if page_url.startswith("file:") else "browse"
    errors: list[str] = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 1000})
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto(page_url)
            _wait(page, "")
            _set(page, lambda: page.select_option("#f-stage", "fc.samples"))
            for group in ("kept", "gate-dropped"):
                _set(page, lambda g=group: page.select_option("#f-group", g))
                card = page.locator("#samples .card").first
                assert card.get_attribute("data-group") == group
                _open_requests(page, card, mode)
                shown = _requests_shown(card)
                assert "fc.dialogues" in shown["steps"] and "fc.plans" in shown["steps"], shown["steps"]
                if mode == "browse":  # the plan's tools: the request that wrote them
                    assert "fc.tools" in shown["steps"], shown["steps"]
                assert len(shown["reqs"]) >= 3 and all(len(r["key"]) == 64 for r in shown["reqs"])
                assert "made from row" in shown["text"] and "tokens" in shown["text"]
                assert all(r["cached"] in ("cached", "fresh") and int(r["attempts"]) >= 0 for r in shown["reqs"])
            # the full body of the dialogue's first request, one click away
            card.locator("button.open-request").first.click()
            full = card.locator(".full-request").first
            full.wait_for(timeout=60_000)
            assert full.locator(".msg").count() >= 2  # what was sent, and the answer
            assert full.locator(".msg.target").count() >= 1
            assert "messages sent" in full.inner_text()
            # a rejected FC dialogue: its own requests, with the answer the rejection is about
            _set(page, lambda: page.select_option("#f-stage", "fc.dialogues"))
            _set(page, lambda: page.select_option("#f-group", "rejected"))
            card = page.locator("#samples .card").first
            assert card.get_attribute("data-group") == "rejected"
            card.locator("details.llm-requests > summary").click()
            shown = _requests_shown(card)
            assert shown["steps"][0] == "fc.dialogues" and len(shown["reqs"]) >= 2
            assert "answer ·" in shown["text"] and "sent ·" in shown["text"]
        finally:
            browser.close()
    assert not errors, errors


def test_a_tool_row_and_a_topic_row_show_the_requests_that_made_them(tmp_path: Path):
    """A run from a global topic stage: a tool's card (``fc.tools_dedup``) shows the request that wrote it and the
    one that made its topic; a topic's card (``fc.topics``, a global stage) shows its own label request."""
    sync_playwright = _playwright()
    import yaml

    from fabrika.pipeline.config import validate_data
    from fabrika.pipeline.runner import run_pipeline

    configs = Path(__file__).parents[2] / "configs"
    topics = next(s for s in yaml.safe_load((configs / "demo.yaml").read_text(encoding="utf-8"))["stages"]
                  if s["kind"] == "fc.topics")
    run = tmp_path / "run"
    doc = {"name": "t", "seed": 7, "run_dir": str(run), "llm": {"backend": "sim", "sim": {"seed": 7}},
           "stages": [{**topics, "languages": ["ru"], "target_size": {"ru": 6}},
                      {"kind": "fc.tools", "input": "fc.topics", "tools_per_topic": 2},
                      {"kind": "fc.tools_dedup", "input": "fc.tools"}],
           "dataset": {"stages": ["fc.tools_dedup"]}}
    config, issues = validate_data(doc, str(configs / "demo.yaml"), configs)
    assert config is not None, [str(i) for i in issues]
    assert run_pipeline(config, resume=False, progress=False).manifest["status"] == "done"
    server = ExplorerServer(run, port=0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    errors: list[str] = []
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
            try:
                for mode, url in (("report", build_report(run, tmp_path / "report").as_uri()), ("browse", server.url)):
                    page = browser.new_page(viewport={"width": 1280, "height": 1000})
                    page.on("pageerror", lambda e: errors.append(str(e)))
                    page.goto(url)
                    _wait(page, "")
                    _set(page, lambda pg=page: pg.select_option("#f-stage", "fc.tools_dedup"))
                    card = page.locator("#samples .card").first
                    _open_requests(page, card, mode)
                    shown = _requests_shown(card)
                    assert shown["steps"][:2] == ["fc.tools", "fc.topics"], (mode, shown["steps"])
                    assert "fc.tools" in shown["text"] and "fc.topics.label" in shown["text"], shown["text"]
                    assert all(len(r["key"]) == 64 for r in shown["reqs"]) and len(shown["reqs"]) >= 2
                    _set(page, lambda pg=page: pg.select_option("#f-stage", "fc.topics"))
                    card = page.locator("#samples .card").first
                    card.locator("details.llm-requests > summary").click()
                    shown = _requests_shown(card)
                    assert shown["steps"] == ["fc.topics"] and len(shown["reqs"]) == 1, (mode, shown)
                    assert "fc.topics.label" in shown["text"] and "sent ·" in shown["text"]
                    page.close()
            finally:
                browser.close()
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=30)
    assert not errors, errors


def test_each_request_shows_the_endpoint_that_answered_and_where_an_attempt_failed(tmp_path: Path):
    """A run against a loopback server that answers one request with a 500 first: in the offline page every
    request names that server, and the retried one says its first attempt failed there."""
    sync_playwright = _playwright()
    from fabrika.pipeline.config import validate_data
    from fabrika.pipeline.runner import run_pipeline
    from fabrika.testing import FakeOpenAIServer
    from tests.pipeline import llm_worker_stages as ws

    with FakeOpenAIServer() as srv:
        srv.script(match="число 3:", responses=[{"fault": "server"}])
        doc = ws.pipeline_doc(tmp_path / "run", 1, n=4)
        doc["llm"] = {"backend": "openai", "model": "fake", "max_retries": 1, "probe": False,
                      "backoff_initial_s": 0.01, "backoff_max_s": 0.02, "backoff_jitter_s": 0.0,
                      "endpoints": [{"base_url": srv.base_url}]}
        cfg, issues = validate_data(doc, "w.yaml", tmp_path)
        assert cfg is not None, issues
        assert run_pipeline(cfg, progress=False).manifest["status"] == "done"
    page_path = build_report(tmp_path / "run", tmp_path / "report")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 1000})
            page.goto(page_path.as_uri())
            _wait(page, "")
            _set(page, lambda: page.select_option("#f-stage", "test.wask"))
            for summary in page.locator("#samples .card details.llm-requests > summary").all():
                summary.click()
            shown = page.evaluate("""() => ({
                endpoints: Array.from(document.querySelectorAll('.llm-requests tr.req')).map(r => r.dataset.endpoint),
                cells: Array.from(document.querySelectorAll('.llm-requests tr.req')).map(r => r.children[5].innerText),
                failed: Array.from(document.querySelectorAll('.llm-requests .attempt-error')).map(d => d.innerText),
                answered: Array.from(document.querySelectorAll('.llm-requests .attempt-ok')).map(d => d.innerText)})""")
        finally:
            browser.close()
    assert len(shown["endpoints"]) == 4 and set(shown["endpoints"]) == set(shown["cells"]) == {srv.base_url}
    assert len(shown["failed"]) == 1 and shown["failed"][0].startswith(f"attempt 1 failed at {srv.base_url}: server:")
    assert shown["answered"] == [f"attempt 2 answered by {srv.base_url}"]
