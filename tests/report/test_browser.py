"""The report's sample browser in a real headless Chromium: no console error, a wrong turn shows its
flag, the text search filters rows; a screenshot is saved under the test's tmp dir.

Chromium is Debian's ``chromium`` (``make test`` / ``.ci/run`` install it when missing) driven by
Playwright with ``executable_path`` — Playwright's own browser download is never used.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from fabrika.export.report import build_report
from tests.report.report_fixtures import run_fc_demo

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def _playwright():
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip("BROWSER TEST SKIPPED: the `playwright` package is missing (pip install -e '.[dev]')")
    if CHROMIUM is None:
        pytest.skip("BROWSER TEST SKIPPED: no `chromium` on PATH and it could not be installed (apt-get install chromium)")
    return sync_playwright


@pytest.fixture(scope="module")
def report_page(tmp_path_factory: pytest.TempPathFactory) -> Path:
    _playwright()  # skip before building the run when there is no browser
    run = run_fc_demo(tmp_path_factory.mktemp("browser") / "run")
    return build_report(run)


def test_report_opens_in_chromium_shows_wrong_turn_and_search_filters(report_page: Path, tmp_path: Path):
    sync_playwright = _playwright()
    data = json.loads(report_page.read_text("utf-8").split("id='fabrika-samples'>", 1)[1].split("</script>", 1)[0])
    wrong = [r for r in data["samples"] if r["_stage"] == "fc.dialogues" and '"flag":"wrong"' in r.get("dialogue", "")]
    assert wrong, "the demo run must sample a dialogue with a wrong turn"
    target = wrong[0]
    errors: list[str] = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 1000})
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.on("requestfailed", lambda r: errors.append(f"request failed: {r.url}"))
            page.goto(report_page.as_uri())
            cards = page.locator("#samples .card")
            total = cards.count()
            assert total == len(data["samples"]) > 10
            assert page.locator("img[alt='funnel']").evaluate("i => i.naturalWidth") > 100  # embedded charts load
            # the wrong turn is rendered as a chat message with its flag, then the recovery
            card = page.locator(f"#samples .card:has(.rowid:text-is('{target['id']}'))")
            wrong_msg = card.locator(".msg.assistant[data-flag='wrong']")
            assert wrong_msg.count() >= 1 and wrong_msg.first.is_visible()
            assert wrong_msg.first.locator(".badge.flag-wrong").inner_text() == "wrong"
            assert card.locator(".msg.tool").count() >= 1 and card.locator("summary").first.inner_text().startswith(
                "tools the assistant saw")
            # search by the episode id: that dialogue and the samples cut from it stay, nothing else
            page.fill("#f-text", target["id"])
            visible = page.locator("#samples .card:not(.hidden)")
            n = visible.count()
            expected = sum(target["id"] in json.dumps(r, ensure_ascii=False) for r in data["samples"])
            assert 1 <= n == expected < total and card.is_visible()
            assert page.locator("#shown").inner_text().startswith(f"{n} of {total}")
            page.fill("#f-text", target["id"].upper())  # case-insensitive
            assert visible.count() == n
            card.scroll_into_view_if_needed()
            shot = tmp_path / "report.png"
            page.screenshot(path=str(shot))
            # filters: rejected rows of one stage carry their reason
            page.fill("#f-text", "")
            page.select_option("#f-group", "rejected")
            rejected = page.locator("#samples .card:not(.hidden)")
            assert 0 < rejected.count() < total
            assert all(rejected.nth(i).locator(".reason").count() == 1 for i in range(rejected.count()))
            titles = page.locator(".block:not(.hidden) .block-title").all_inner_texts()
            assert titles and all(" — rejected: " in t and "in the stage)" in t for t in titles), titles
            page.fill("#f-text", "no row contains this ∅ string")
            assert page.locator("#samples .card:not(.hidden)").count() == 0
            assert page.locator(".block:not(.hidden)").count() == 0  # empty groups hide their heading
        finally:
            browser.close()
    assert not errors, errors
    assert shot.stat().st_size > 20_000
