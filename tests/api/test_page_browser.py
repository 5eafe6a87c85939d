"""The page of a served index in a real headless browser: the system's Chromium driven by
Playwright's Python client (never a browser Playwright downloads). Paste task sentences or open
a selection file, see the rows with their scores and parts, the share by a metadata field, the
score distribution with the budget's cut, a row's document context and nearest task sentences,
and download the selection.

Skipped with its reason where Chromium or Playwright is missing; `.ci/run` installs Chromium
from the system's packages, so CI runs it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

CHROMIUM = next((p for p in (shutil.which("chromium"), "/usr/bin/chromium") if p and
                 Path(p).is_file()), None)
if CHROMIUM is None:
    pytest.skip("no Chromium from the system's packages (apt-get install chromium; .ci/run "
                "installs it): the page's browser test cannot run here", allow_module_level=True)
playwright = pytest.importorskip("playwright.sync_api", reason="Playwright's Python client is "
                                 "not installed (pip install -e '.[dev]')")
pytest.importorskip("uvicorn")

import tapt  # noqa: E402
import tapt.indexer.encoding.encoder  # noqa: E402
from conftest import HashingEncoder  # noqa: E402
from http_service import running  # noqa: E402
from tapt.api.rooms import rooms  # noqa: E402
from tapt.api.service import SelectionService  # noqa: E402

TOKEN = "page-test-token-0123456789"
TASK = ["Patient fever therapy dose.", "Kidney biopsy lesion chronic.", "Tumour cardiac nerve."]
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]


@pytest.fixture()
def page_server(fake_index, tmp_path, monkeypatch):
    monkeypatch.setattr(tapt.indexer.encoding.encoder, "load_encoder",
                        lambda spec=None, device="auto", backend="auto", threads=None, **_:
                        HashingEncoder())
    (tmp_path / "token").write_text(TOKEN)
    svc = SelectionService(tapt.Index.open(fake_index),
                           rooms("127.0.0.1", token_file=tmp_path / "token"))
    with running(svc) as base:
        yield base


@pytest.fixture()
def browser():
    with playwright.sync_playwright() as p:
        launched = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS, headless=True)
        try:
            yield launched
        finally:
            launched.close()


def test_the_page_shows_why_each_row_was_picked(page_server, browser, fake_index, tmp_path):
    page = browser.new_page(accept_downloads=True)
    problems: list[str] = []
    page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: problems.append(str(e)))
    page.goto(page_server + "/")
    page.wait_for_function("() => document.getElementById('summary').textContent.includes('token')")
    problems.clear()                    # the summary's 401 before the token is given
    page.fill("#token", TOKEN)
    page.dispatch_event("#token", "change")
    page.wait_for_function("() => document.getElementById('summary').textContent.includes('sentences')")
    assert page.locator("#method option").count() == len(tapt.method_names())

    page.fill("#task", "\n".join(TASK))
    page.fill("#budget", "6")
    page.select_option("#context-choice", "sentence")
    page.click("#run")
    page.wait_for_selector("#rows tr")
    assert page.locator("#rows tr").count() == 6
    assert page.locator("#rows-head th").all_inner_texts()[:3] == ["rank", "score", "centroid"]
    assert "centroid: 6 segments" in page.inner_text("#status")
    # the distribution: the corpus's sample, the selected, the cut
    assert page.locator("#histogram rect.dropped").count() > 0
    assert page.locator("#histogram rect.kept").count() > 0
    assert page.locator("#cut-line").count() == 1
    # the share by any metadata field
    page.select_option("#share-field", "domain")
    assert page.locator("#share tr td").first.inner_text() == "medical"
    assert page.locator("#share-field option").all_inner_texts()[:2] == ["source", "domain"]
    # a row: its document around it, its nearest task sentences, the parts of its score
    page.click("#rows tr >> nth=0")
    page.wait_for_selector("#context span.chosen")
    assert not page.locator("#details").is_hidden()
    assert page.locator("#nearest li").count() == 3
    assert page.locator("#nearest li").first.inner_text().split(" (cosine")[0] in TASK
    assert "centroid:" in page.inner_text("#parts")
    # the export
    with page.expect_download() as download:
        page.click("#download")
    lines = Path(download.value.path()).read_text().splitlines()
    assert len(lines) == 6 and json.loads(lines[0])["rank"] == 0
    # a refusal is shown, not thrown
    page.fill("#budget", "lots")
    page.click("#run")
    page.wait_for_function("() => document.getElementById('status').className === 'error'")
    assert "400" in page.inner_text("#status")
    problems = [p for p in problems if "400" not in p]
    assert not problems, problems

    # a selection file opened from disk, with its manifest
    sel = tapt.Index.open(fake_index).select("fused", TASK, "5",
                                             context="sentence", explain=True)
    path = sel.write(tmp_path / "fused.jsonl")
    page.set_input_files("#file", [str(path), str(path) + ".manifest.json"])
    page.wait_for_function("() => document.getElementById('status').textContent.startsWith('Opened')")
    assert page.locator("#rows tr").count() == 5
    assert page.locator("#rows-head th").all_inner_texts()[2:5] == ["meaning", "lm", "words"]
    assert page.locator("#histogram rect.dropped").count() > 0
    page.screenshot(path=str(tmp_path / "page.png"), full_page=True)
    assert (tmp_path / "page.png").stat().st_size > 10_000
