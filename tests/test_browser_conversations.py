"""The chat's conversation controls in a real browser (Debian Chromium via Playwright) against the real server and
the real 0.5B model: stop an answer while it streams (what was written stays, marked stopped), regenerate it
(a second version to switch to), reload the page and reopen the conversation from the history list, export it
as Markdown with its citations as footnotes; the interface follows the browser's language on a first visit.
Screenshots at 1400 px and 390 px go to docs/screenshots/ (shown in docs/ui.md)."""
from __future__ import annotations

import re
import shutil
import time
from collections.abc import Iterator

import pytest
import test_browser
from httpkit import ServerProcess
from test_browser import ARGS, ARTIFACTS, CHROMIUM, QUESTION, REPO

pytestmark = [pytest.mark.browser, pytest.mark.slow]
ui_server = test_browser.ui_server  # the same fixture: the shared real server, skipped without Chromium
SHOTS = REPO / "docs" / "screenshots"


@pytest.fixture()
def browser(ui_server: ServerProcess) -> Iterator[object]:
    from playwright.sync_api import sync_playwright

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
        yield b
        b.close()


def open_page(browser, server: ServerProcess, locale: str = "zh-CN", width: int = 1400):  # type: ignore[no-untyped-def]
    context = browser.new_context(viewport={"width": width, "height": 1000}, locale=locale)
    page = context.new_page()
    page.goto(server.base + "/", wait_until="load")
    page.wait_for_selector("#fa-question textarea", timeout=120_000)
    return page


def bubbles(page) -> int:  # type: ignore[no-untyped-def]
    return page.evaluate("document.querySelectorAll('#fa-chat .message-content').length")


def status_has(page, text: str, timeout: int = 600_000) -> None:  # type: ignore[no-untyped-def]
    page.wait_for_function(f"document.querySelector('#fa-status').innerText.includes({text!r})", timeout=timeout)


def test_stop_regenerate_reload_reopen_and_export(browser, ui_server: ServerProcess) -> None:
    page = open_page(browser, ui_server)
    box = page.locator("#fa-question textarea")
    box.fill(QUESTION)
    box.press("Enter")
    page.locator("#fa-stop").wait_for(state="visible", timeout=60_000)
    page.wait_for_function(  # the answer is streaming: some text, not finished
        "(() => { const b = document.querySelectorAll('#fa-chat .message-content');"
        " return b.length >= 2 && b[b.length - 1].innerText.trim().length > 8; })()", timeout=300_000)
    assert "完成" not in page.locator("#fa-status").inner_text()
    page.locator("#fa-stop").click()
    status_has(page, "已停止", 60_000)
    last = page.locator("#fa-chat .message-content").last.inner_text()
    assert "（已停止）" in last and len(last) > 8
    page.locator("#fa-stop").wait_for(state="hidden", timeout=30_000)
    # the box takes the focus in the step after the one that hides Stop (ui/history.py, FOCUS_JS): wait for it
    page.wait_for_function("document.activeElement === document.querySelector('#fa-question textarea')",
                           timeout=10_000)
    page.screenshot(path=str(ARTIFACTS / "10-stopped.png"))

    page.locator("#fa-regenerate").click()
    status_has(page, "第 2 版")
    assert "完成" in page.locator("#fa-status").inner_text()
    assert bubbles(page) == 2  # the turn was answered again, not appended
    assert "（已停止）" not in page.locator("#fa-chat .message-content").last.inner_text()
    versions = page.locator("#fa-versions")
    # the radio is filled by the event that follows the answer's stream (a .then()), so wait for it as a user would
    versions.wait_for(state="visible", timeout=30_000)
    assert versions.locator("label").count() == 2
    versions.locator("label").first.click()  # back to the stopped version
    page.wait_for_function("document.querySelector('#fa-chat').innerText.includes('（已停止）')", timeout=30_000)
    versions.locator("label").nth(1).click()
    page.wait_for_function("!document.querySelector('#fa-chat').innerText.includes('（已停止）')", timeout=30_000)

    page.reload(wait_until="load")
    page.wait_for_selector("#fa-question textarea", timeout=120_000)
    item = page.locator("#fa-history label", has_text="DeepSpeed")
    try:
        item.first.wait_for(timeout=60_000)
    except Exception:
        page.screenshot(path=str(ARTIFACTS / "11-history-missing.png"), full_page=True)
        raise AssertionError(page.locator("#fa-history-col").inner_text()) from None
    assert bubbles(page) == 0 and page.locator("#fa-sources details").count() == 0  # a fresh page: nothing shown
    item.first.click()
    page.wait_for_function("document.querySelectorAll('#fa-chat .message-content').length === 2", timeout=30_000)
    assert "ZeRO" in page.locator("#fa-chat").inner_text()
    # the sources panel shows what the last answer cites, and its [n] open their passages, as right after answering
    page.wait_for_function("document.querySelectorAll('#fa-sources details.fa-cited').length > 0", timeout=30_000)
    cite = page.locator("#fa-chat a.fa-cite").first
    n = (cite.get_attribute("href") or "").removeprefix("#src-")
    assert n.isdigit() and page.locator(f"#fa-sources details#src-{n}").count() == 1
    cite.click()
    page.wait_for_function(f"document.getElementById('src-{n}').open === true", timeout=10_000)
    page.locator("#fa-history-search textarea, #fa-history-search input").first.fill("没有这段文字的对话")
    page.wait_for_function("document.querySelectorAll('#fa-history label').length === 0", timeout=30_000)
    page.locator("#fa-history-search textarea, #fa-history-search input").first.fill("ZeRO")
    item.first.wait_for(timeout=30_000)

    page.locator("#fa-export").click()
    link = page.locator("#fa-export-file a").first
    link.wait_for(timeout=30_000)
    md = page.request.get(link.get_attribute("href") or "").text()
    assert md.startswith("# DeepSpeed") and f"**问:** {QUESTION}" in md
    notes = re.findall(r"^\[\^(\d+)\]: .*`corpus/[^`]+`, 行 \d+–\d+", md, re.MULTILINE)
    assert notes and "[^1]" in md.split("---")[0], md
    page.screenshot(path=str(ARTIFACTS / "11-conversation-1400.png"), full_page=True)
    SHOTS.mkdir(parents=True, exist_ok=True)
    shutil.copy(ARTIFACTS / "11-conversation-1400.png", SHOTS / "chat-1400.png")

    page.set_viewport_size({"width": 390, "height": 844})
    time.sleep(1)
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= 400, width  # nothing wider than the phone: no sideways scrolling
    assert page.locator("#fa-question textarea").is_visible() and page.locator("#fa-send").is_visible()
    page.screenshot(path=str(ARTIFACTS / "12-conversation-390.png"), full_page=True)
    shutil.copy(ARTIFACTS / "12-conversation-390.png", SHOTS / "chat-390.png")


def test_a_question_sent_while_the_answer_stops_is_answered_not_dropped(browser, ui_server: ServerProcess) -> None:
    """Stop, then send the next question at once (the stopped answer is still being checked and saved): it is shown,
    answered after the stopped one and stored; Regenerate then works on it, not on the stopped answer."""
    second = "JAX 的 jit 有什么用？"
    page = open_page(browser, ui_server)
    box = page.locator("#fa-question textarea")
    box.fill(QUESTION)
    box.press("Enter")
    page.locator("#fa-stop").wait_for(state="visible", timeout=60_000)
    page.wait_for_function(
        "(() => { const b = document.querySelectorAll('#fa-chat .message-content');"
        " return b.length >= 2 && b[b.length - 1].innerText.trim().length > 8; })()", timeout=300_000)
    page.locator("#fa-stop").click()
    box.fill(second)
    box.press("Enter")
    answered = ("(() => { const b = document.querySelectorAll('#fa-chat .message-content');"
                " const s = document.querySelector('#fa-status').innerText;"
                " return b.length === 4 && b[2].innerText.includes(" + repr(second) + ") && b[3].innerText.trim().length > 8"
                " && !b[3].innerText.includes('（已停止）') && s.includes('完成') && !s.includes('已停止'); })()")
    try:
        page.wait_for_function(answered, timeout=600_000)
    except Exception:
        page.screenshot(path=str(ARTIFACTS / "13-second-question.png"), full_page=True)
        raise
    stopped = page.locator("#fa-chat .message-content").nth(1).inner_text()
    if "（已停止）" not in stopped:  # seen once in a full slow run (2026-12-03), not reproduced alone: keep the evidence
        page.screenshot(path=str(ARTIFACTS / "13-stopped-mark.png"), full_page=True)
        log = ui_server.log_path.read_text(encoding="utf-8", errors="replace")[-4000:]
        raise AssertionError(f"the stopped answer shows {stopped!r} without its mark; server log:\n{log}")
    page.locator("#fa-regenerate").click()
    status_has(page, "第 2 版")
    assert bubbles(page) == 4 and second in page.locator("#fa-chat .message-content").nth(2).inner_text()
    assert "（已停止）" in page.locator("#fa-chat .message-content").nth(1).inner_text()  # the stopped turn is kept


def test_first_visit_follows_the_browsers_language(browser, ui_server: ServerProcess) -> None:
    page = open_page(browser, ui_server, locale="en-US")
    page.wait_for_function("document.querySelector('#fa-send').innerText.trim() === 'Send'", timeout=30_000)
    assert page.locator("#fa-stop").is_hidden() and "Regenerate" in page.locator("#fa-regenerate").inner_text()
    page.locator("#fa-lang").get_by_text("中文").click()  # a choice made here is kept for the next visit
    page.wait_for_function("document.querySelector('#fa-send').innerText.trim() === '发送'", timeout=30_000)
    time.sleep(1)  # the choice is saved by the radio's input event
    page.reload(wait_until="load")
    page.wait_for_selector("#fa-send", timeout=120_000)
    page.wait_for_function("document.querySelector('#fa-send').innerText.trim() === '发送'", timeout=60_000)
