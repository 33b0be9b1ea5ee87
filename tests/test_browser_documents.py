"""The Documents tab in a real browser (Debian Chromium via Playwright) against a real `assistant serve` (its own
copy of the corpus index and its own state dir; the plumbing engine answers, no model loads): upload a file,
watch the progress end in "done", see it listed, find it in the Retrieval-test tab with its matched terms, delete
it, see the list empty. The screenshot of the tab goes to docs/screenshots/documents.png."""
from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from httpkit import ServerProcess
from test_browser import ARGS, ARTIFACTS, CHROMIUM, REPO

pytestmark = [pytest.mark.browser, pytest.mark.slow]

DOC = """# Zorblax cluster guide

Our Zorblax cluster trains with DeepSpeed ZeRO-3 on 64 nodes. Jobs go to the queue named quasar-7.

## Requesting GPUs

Ask the platform team; a request for more than 16 nodes needs a quasar-7 reservation.
"""


@pytest.fixture(scope="module")
def doc_server(corpus_index: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    if not CHROMIUM.exists():
        pytest.skip("/usr/bin/chromium missing: apt-get install -y chromium fonts-wqy-zenhei")
    base = tmp_path_factory.mktemp("doc-ui")
    shutil.copytree(corpus_index, base / "index")
    srv = ServerProcess(base / "index", base / "state", base / "server.log", ASSISTANT_BACKEND="scripted",
                        ASSISTANT_MODEL="scripted", ASSISTANT_DOCS=str(REPO / "corpus"))
    srv.start()
    yield srv
    srv.stop()


def test_documents_tab_upload_list_search_delete(doc_server: ServerProcess, tmp_path: Path) -> None:
    from playwright.sync_api import sync_playwright

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    doc = tmp_path / "zorblax-guide.md"
    doc.write_text(DOC, encoding="utf-8")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 1000}, locale="zh-CN")
        page.goto(doc_server.base + "/", wait_until="load")
        page.wait_for_selector("#fa-question textarea", timeout=120_000)
        page.get_by_role("tab", name="文档 / Documents").click()
        page.wait_for_selector("#doc-empty", timeout=30_000)

        _choose_file(page, doc, doc_server)
        page.locator("#doc-upload").click()
        page.wait_for_selector("#doc-status progress", timeout=30_000)
        page.wait_for_function("document.querySelector('#doc-status').innerText.includes('完成')", timeout=180_000)
        assert "zorblax-guide.md" in page.locator("#doc-status").inner_text()
        row = page.locator("#doc-list tr.doc-row")
        assert row.count() == 1 and "zorblax-guide.md" in row.first.inner_text()
        assert page.evaluate("document.querySelector('#doc-status progress').value") >= 1
        page.screenshot(path=str(ARTIFACTS / "09-documents.png"))
        shots = REPO / "docs" / "screenshots"
        shots.mkdir(parents=True, exist_ok=True)
        shutil.copy(ARTIFACTS / "09-documents.png", shots / "documents.png")

        # the retrieval test view finds it first, with the terms it matched
        page.get_by_role("tab", name="检索测试 / Retrieval").click()
        page.locator("#ret-query textarea").fill("Zorblax quasar-7 queue")
        page.locator("#ret-run").click()
        page.wait_for_selector("#ret-result tr.ret-row", timeout=60_000)
        first = page.locator("#ret-result tr.ret-row").first.inner_text()
        assert "uploads/" in first and "zorblax" in first.lower(), first
        assert page.locator("#ret-result tr.ret-row").first.locator("mark").count() >= 1
        page.screenshot(path=str(ARTIFACTS / "10-retrieval.png"))

        page.get_by_role("tab", name="文档 / Documents").click()
        page.locator("#doc-pick input").click()
        page.get_by_role("option", name="zorblax-guide.md", exact=False).first.click()
        page.locator("#doc-delete").click()
        page.wait_for_function("document.querySelector('#doc-deleted').innerText.includes('已删除')", timeout=120_000)
        page.wait_for_selector("#doc-empty", timeout=30_000)
        assert page.locator("#doc-list tr.doc-row").count() == 0
        browser.close()


def _choose_file(page, doc: Path, server: ServerProcess) -> None:
    """Choose the file in the Documents tab's file input and wait until Gradio has uploaded it: its preview row
    names the file (`td.filename[aria-label=...]`; the row's text splits the name into stem and extension, and
    the one-piece name shows only while "Uploading..." is on screen). A choice made before the input's handler
    is attached (a loaded machine) leaves the input in place and sends nothing: it is made once more, as a user
    would; a failure names what the browser sent, what the component shows and the server's log."""
    uploaded = f"#doc-file td.filename[aria-label='{doc.name}']"
    sent: list[str] = []
    page.on("request", lambda r: sent.append(f"{r.method} {r.url}") if "upload" in r.url else None)
    for attempt in (1, 2):
        chooser = page.locator("#doc-file input[type=file]")
        if chooser.count():
            chooser.set_input_files(str(doc))
        try:
            page.wait_for_selector(uploaded, timeout=60_000)
            return
        except Exception:
            page.screenshot(path=str(ARTIFACTS / f"09-documents-upload-{attempt}.png"))
    shows = page.locator("#doc-file").inner_text()
    log = server.log_path.read_text(encoding="utf-8", errors="replace")[-3000:]
    raise AssertionError(f"the chosen file was never uploaded into #doc-file (it shows {shows!r}); upload requests "
                         f"sent: {sent}; server log:\n{log}")
