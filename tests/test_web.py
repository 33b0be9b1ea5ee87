"""The Gradio UI's event handlers (ui/web.py ChatHandlers) called in process, as Gradio calls them, on the real
service with the plumbing model ScriptedChatModel: what the chat, the sources panel and the status line show
at each step, [n] links, escaping, feedback, and errors in the interface language. The browser test drives
the same UI in Chromium."""
from __future__ import annotations

import copy
import html
import re

import pytest

gr = pytest.importorskip("gradio")

from ui.web import ChatHandlers  # noqa: E402


@pytest.fixture(scope="module")
def service(scripted_service):
    svc = scripted_service()
    yield svc
    svc.close()


def run(handlers: ChatHandlers, *args: object) -> list[tuple]:
    """Every step respond() yields, copied when yielded (the handler updates its history list in place,
    as Gradio expects: each step is rendered before the next is produced)."""
    return [copy.deepcopy(step) for step in handlers.respond(*args)]  # type: ignore[arg-type]


def is_skip(value: object) -> bool:
    return isinstance(value, dict) and value.get("__type__") == "update" and len(value) == 1


def test_a_streamed_answer_fills_sources_then_chat_then_links_and_status(service) -> None:
    steps = run(ChatHandlers(service), "DeepSpeed 的 ZeRO 是什么？", [], "", "zh")
    history, sources, status, sid, mid, box = steps[0]
    assert history[-2:] == [{"role": "user", "content": "DeepSpeed 的 ZeRO 是什么？"},
                            {"role": "assistant", "content": "…"}]
    assert status == "检索中…" and box == ""
    assert steps[1][2] == "生成中…" and 'id="src-1"' in steps[1][1] and 'id="src-2"' in steps[1][1]
    tokens = [s for s in steps[2:-2]]
    assert len(tokens) > 3 and all(is_skip(s[1]) for s in tokens)  # tokens leave the sources panel alone
    assert steps[-2][2] == "核对引用中…" and is_skip(steps[-2][1])  # the model is done, the check runs
    history, sources, status, sid, mid, box = steps[-1]
    assert '<a class="fa-cite" href="#src-1">[1]</a>' in history[-1]["content"]
    assert "fa-cited" in sources and "已引用" in sources
    assert status.startswith("完成 · 检索") and sid and mid
    assert service.get_session(sid)["messages"][-1]["id"] == mid
    h = ChatHandlers(service)
    assert h.rate("up", sid, mid, "zh") == "已记录你的反馈，谢谢！"
    assert service.get_session(sid)["feedback"][-1]["rating"] == "up"
    assert h.rate("down", "", "", "en") == "No answer to rate yet."
    assert h.rate("down", sid, "no-such-message", "en") == "Error: No such message in this session."


def statuses(steps: list[tuple]) -> list[str]:
    """The status line's texts in the order shown (a step that leaves it alone, or repeats it, adds none)."""
    out: list[str] = []
    for step in steps:
        if not is_skip(step[2]) and (not out or out[-1] != step[2]):
            out.append(step[2])
    return out


@pytest.mark.parametrize("question,lang,expected", [
    ("What does ZeRO stage 2 partition?", "en", ["Retrieving…", "Generating…", "Checking citations…", "Done"]),
    ("Which framework is best for TPU training?", "en",  # a selection answer (the Advisor's ranking)
     ["Retrieving…", "Generating…", "Checking citations…", "Done"]),
    ("DeepSpeed 的 ZeRO 是什么？", "zh", ["检索中…", "生成中…", "核对引用中…", "完成"]),
], ids=["fact-en", "selection-en", "fact-zh"])
def test_the_status_line_says_each_step_in_order(service, question: str, lang: str, expected: list[str]) -> None:
    shown = statuses(run(ChatHandlers(service), question, [], "", lang))
    assert [s.split(" ·")[0] for s in shown] == expected, shown


def test_a_reopened_conversation_shows_its_last_answers_sources(service) -> None:
    """Opening a conversation from the history list fills the sources panel with what its last answer cites,
    each under the [n] its links open; a passage gone from the index shows what the citation recorded. Another
    browser cannot open it."""
    from ui.history import HistoryHandlers
    from ui.web import stored_sources_html

    client = "browser-reopen-1"
    *_, last = run(ChatHandlers(service), "DeepSpeed 的 ZeRO 是什么？", [], "", "zh", client)
    live_sources, sid = last[1], last[3]
    opened = HistoryHandlers(ChatHandlers(service)).open(sid, "zh", client)
    chat, panel, status = opened[0], opened[1], opened[2]
    assert status == "已打开对话。" and panel and "没有检索到" not in panel
    links = set(re.findall(r'href="#(src-\d+)"', chat[-1]["content"]))
    entries = set(re.findall(r'<details id="(src-\d+)" class="fa-src fa-cited"', panel))
    assert links and links == entries  # every [n] of the answer opens its passage, as right after answering
    for entry in entries:  # the same passage under the same number as the live panel showed
        assert re.search(f'id="{entry}".*?</details>', panel, re.S).group(0).split("fa-text")[1] in live_sources
    stored = service.get_session(sid)["messages"][-1]["citations"]
    gone = stored_sources_html(stored, "en", lambda chunk_id: None)
    assert gone.count("<details") == len(stored) and html.escape(stored[0]["snippet"]) in gone and "lines" in gone
    assert stored_sources_html([], "en", service.passage) == "<p>No relevant sources found.</p>"
    other = HistoryHandlers(ChatHandlers(service)).open(sid, "en", "browser-reopen-2")
    assert other[0] == [] and other[1] == "" and "Open or start a conversation first" in other[2]


def test_a_followup_keeps_the_session_and_model_text_is_escaped(scripted_service) -> None:
    svc = scripted_service(script="<b>ZeRO</b> partitions optimizer states [1].")
    try:
        h = ChatHandlers(svc)
        *_, first = h.respond("What is DeepSpeed ZeRO?", [], "", "en")
        history, _, _, sid, _, _ = first
        steps = run(h, "And its stage 3?", history, sid, "en")
        assert steps[-1][3] == sid and len(steps[-1][0]) == 4
        streamed = [s[0][-1]["content"] for s in steps if "ZeRO" in s[0][-1]["content"]]
        assert streamed and all("<b>" not in c and "&lt;b&gt;" in c for c in streamed)
        assert [m["role"] for m in svc.get_session(sid)["messages"]] == ["user", "assistant"] * 2
    finally:
        svc.close()


def test_a_refusal_shows_no_sources(service) -> None:
    *_, last = ChatHandlers(service).respond("Write a poem about the sea.", [], "", "en")
    history, sources, status, *_ = last
    assert "No relevant sources found." in sources and status.startswith("Done")
    assert history[-1]["content"] and "fa-cite" not in history[-1]["content"]


def test_bad_input_loading_and_empty_questions(service, scripted_service) -> None:
    h = ChatHandlers(service)
    (only,) = h.respond("   ", [], "s", "zh")
    assert only[0] == [] and all(is_skip(v) for v in (only[1], only[2], only[4], only[5]))
    *_, last = h.respond("长" * 2001, [], "", "zh")
    assert last[0][-1]["content"] == "⚠ 输入过长（最多 2000 个字符）。" and last[2].startswith("出错了：")
    *_, last = h.respond("long " * 500, [], "", "en")
    assert last[2] == "Error: The question is too long (max 2000 characters)."
    loading = scripted_service(load=False)
    try:
        (only,) = ChatHandlers(loading).respond("什么是 ZeRO？", [], "", "zh")
        assert only[0][-1]["content"] == only[2] == "助手正在加载模型，请稍后重试。"
    finally:
        loading.close()
