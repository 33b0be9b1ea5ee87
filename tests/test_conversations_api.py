"""Conversations over real HTTP (a real uvicorn server in a thread on a free loopback port, httpx as the client)
around the real service (real index of corpus/, embedder, SQLite sessions, queue, citation check): stop an
answer (the cancel route, a client that closes its stream, an answer still waiting for the model), regenerate
and edit the last turn and switch between its versions, the history list (newest first, per client, search,
rename, delete, surviving a restart), export as Markdown with footnotes and as JSON, copy one answer.
The plumbing runs on ScriptedChatModel slowed to a word every 40 ms (a real implementation of the engine
interface); stopping the real engine is tested with the `fast` 0.5B model at the end."""
from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from httpkit import ThreadServer, error_of, sse_events

from assistant.llm.scripted import ScriptedChatModel, quote_sources
from ui.server import create_app

QUESTION = "DeepSpeed 的 ZeRO 是什么？"
CLIENT = "browser-test-0001"


class SlowModel(ScriptedChatModel):
    """ScriptedChatModel that takes `delay` seconds per word and counts the words it computed."""

    def __init__(self, script: Any = None, delay: float = 0.04) -> None:
        super().__init__(script)
        self.delay = delay
        self.words = 0

    def stream(self, messages, **kwargs):  # type: ignore[no-untyped-def, override]
        for piece in super().stream(messages, **kwargs):
            time.sleep(self.delay)
            self.words += 1
            yield piece


def long_answer(messages: list[dict[str, str]]) -> str:
    """The scripted answer (sources quoted with [n]) repeated: long enough to stop half-way."""
    return " ".join([quote_sources(messages)] * 6)


class Live:
    def __init__(self, svc: Any, model: SlowModel, url: str) -> None:
        self.svc, self.model, self.url = svc, model, url
        self.http = httpx.Client(base_url=url, timeout=60)


def serve(svc: Any) -> ThreadServer:
    return ThreadServer(create_app(svc, with_ui=False, load=False)).start()


@pytest.fixture(scope="module")
def state(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("conv-state")


@pytest.fixture(scope="module")
def live(scripted_service, state: Path) -> Iterator[Live]:
    model = SlowModel(long_answer)
    svc = scripted_service(state_dir=state, rate_limit_per_minute=0)
    svc.engines._llm = model
    server = serve(svc)
    yield Live(svc, model, server.url)
    server.stop()
    svc.close()


def new_session(live: Live, client: str = CLIENT) -> str:
    r = live.http.post("/api/sessions", json={"client": client})
    assert r.status_code == 200, r.text
    return r.json()["session_id"]


def wait_until(cond: Any, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


# ---- stop ---------------------------------------------------------------------------------------------------------
def test_cancel_stops_the_stream_and_keeps_what_was_written(live: Live) -> None:
    sid = new_session(live)
    events: list[tuple[str, Any]] = []
    tokens = ""
    with live.http.stream("POST", "/api/ask", json={"question": QUESTION, "session_id": sid, "stream": True}) as r:
        assert r.status_code == 200
        for ev in sse_events(r.iter_lines()):
            events.append(ev)
            if ev[0] == "token":
                tokens += ev[1]["text"]
                if len([e for e in events if e[0] == "token"]) == 5:
                    c = live.http.post(f"/api/sessions/{sid}/cancel")
                    assert c.json() == {"session_id": sid, "cancelled": True}
    kinds = [k for k, _ in events]
    assert kinds[0] == "sources" and kinds[-2:] == ["citations", "done"]
    done = events[-1][1]
    assert done["stopped"] is True and done["session_id"] == sid
    assert 0 < len(done["answer"]) < len(tokens) + 40  # what was written, not the whole answer
    assert "来源" not in done["answer"] and not done["refused"]  # never a quote of the evidence or a refusal
    cited = {int(n) for n in re.findall(r"\[(\d+)\]", done["answer"])}
    assert cited == {c["n"] for c in done["citations"]} and all(c["supported"] for c in done["citations"])
    stored = live.http.get(f"/api/sessions/{sid}").json()["messages"][-1]
    assert stored["stopped"] is True and stored["content"] == done["answer"]
    assert live.http.post(f"/api/sessions/{sid}/cancel").json()["cancelled"] is False  # nothing running now
    assert error_of(live.http.post("/api/sessions/" + "0" * 32 + "/cancel"))["code"] == "not_found"


def test_a_client_that_closes_its_stream_stops_generation_and_the_text_is_kept(live: Live) -> None:
    sid = new_session(live)
    before = live.model.words
    got = 0
    with live.http.stream("POST", "/api/ask", json={"question": QUESTION, "session_id": sid, "stream": True}) as r:
        for kind, _ in sse_events(r.iter_lines()):
            got += kind == "token"
            if got == 4:
                break  # closes the connection
    wait_until(lambda: not live.svc.active.running(sid))
    computed = live.model.words - before
    time.sleep(0.3)
    assert live.model.words - before == computed  # no more tokens once it stopped
    assert computed < 40, computed  # far from the whole answer (about 150 words)
    msgs = live.http.get(f"/api/sessions/{sid}").json()["messages"]
    assert msgs[-1]["stopped"] is True and msgs[-1]["content"]
    assert live.svc.queue.waiting == 0 and live.svc.queue._serving is None


def test_a_consumer_gone_at_the_status_event_still_gets_its_answer_checked_and_kept(live: Live) -> None:
    """The "status" event (checking citations) comes after the last token: closing the stream there keeps the
    whole answer, checked, not stopped."""
    live.model.delay = 0.0
    try:
        sid = new_session(live)
        events = live.svc.ask_stream(QUESTION, sid)
        kinds = []
        for ev in events:
            kinds.append(ev.kind)
            if ev.kind == "status":
                assert ev.data == "checking_citations"
                events.close()
                break
    finally:
        live.model.delay = 0.04
    assert kinds[0] == "sources" and kinds[-1] == "status" and "token" in kinds
    stored = live.http.get(f"/api/sessions/{sid}").json()["messages"][-1]
    assert stored["content"] and not stored["stopped"] and stored["citations"]
    assert live.svc.queue.waiting == 0 and live.svc.queue._serving is None


def test_cancel_while_waiting_frees_the_queue_place(live: Live) -> None:
    first, second = new_session(live), new_session(live)
    results: dict[str, Any] = {}

    def ask(sid: str) -> None:
        results[sid] = httpx.post(live.url + "/api/ask", json={"question": QUESTION, "session_id": sid}, timeout=60)

    threads = [threading.Thread(target=ask, args=(s,)) for s in (first, second)]
    threads[0].start()
    wait_until(lambda: live.svc.queue._serving is not None)
    threads[1].start()
    wait_until(lambda: live.svc.queue.waiting == 1)
    assert live.http.post(f"/api/sessions/{second}/cancel").json()["cancelled"] is True
    assert live.svc.queue.waiting == 0  # out of the line at once, while the first answer still holds the model
    assert live.svc.queue._serving is not None
    threads[1].join(30)
    body = results[second].json()
    assert results[second].status_code == 200 and body["stopped"] is True and body["answer"] == ""
    live.http.post(f"/api/sessions/{first}/cancel")
    threads[0].join(20)
    assert results[first].json()["stopped"] is True


def test_a_question_sent_while_the_answer_stops_waits_for_it_and_sees_that_turn(live: Live) -> None:
    """The session's questions are answered in order: a follow-up sent right after Stop (the stopped answer is still
    being checked and saved) is answered once the first is stored, and its rewrite sees that turn."""
    sid = new_session(live)
    results: dict[str, Any] = {}
    before = live.model.words

    def first() -> None:
        results["first"] = httpx.post(live.url + "/api/ask", json={"question": QUESTION, "session_id": sid}, timeout=60)

    t = threading.Thread(target=first)
    t.start()
    wait_until(lambda: live.model.words >= before + 5)  # streaming
    assert live.http.post(f"/api/sessions/{sid}/cancel").json()["cancelled"] is True
    live.model.delay = 0.0
    try:
        second = live.svc.ask("它的 stage 3 切分什么？", sid)  # at once, while the first is stopping
    finally:
        live.model.delay = 0.04
    t.join(30)
    assert results["first"].json()["stopped"] is True
    assert not second.stopped and second.answer
    assert "ZeRO" in second.standalone_question or "DeepSpeed" in second.standalone_question  # it saw the first turn
    msgs = live.http.get(f"/api/sessions/{sid}").json()["messages"]
    assert [m["content"] for m in msgs if m["role"] == "user"] == [QUESTION, "它的 stage 3 切分什么？"]
    assert msgs[1]["stopped"] is True and not msgs[3].get("stopped")


# ---- regenerate and edit ------------------------------------------------------------------------------------------
def test_regenerate_and_edit_keep_versions_to_switch_between(live: Live) -> None:
    live.model.delay = 0.0
    try:
        sid = new_session(live)
        first = live.http.post("/api/ask", json={"question": QUESTION, "session_id": sid}).json()
        assert "alternatives" not in first
        temps: list[float] = []
        original = live.model.stream

        def spy(messages, **kw):  # type: ignore[no-untyped-def]
            temps.append(kw["temperature"])
            return original(messages, **kw)

        live.model.stream = spy  # type: ignore[method-assign]
        try:
            again = live.http.post(f"/api/sessions/{sid}/regenerate", json={}).json()
            events = []
            with live.http.stream("POST", f"/api/sessions/{sid}/regenerate",
                                  json={"question": "What does DeepSpeed ZeRO partition?", "stream": True}) as r:
                events = list(sse_events(r.iter_lines()))
        finally:
            del live.model.stream
        assert temps[0] > live.svc.settings.temperature and temps[1] > temps[0]  # a different sampling each time
        assert again["message_id"] == first["message_id"] and again["alternatives"] == 2
        edited = events[-1][1]
        assert events[-1][0] == "done" and edited["alternatives"] == 3 and edited["language"] == "en"
        msgs = live.http.get(f"/api/sessions/{sid}").json()["messages"]
        assert len(msgs) == 2 and msgs[0]["content"] == "What does DeepSpeed ZeRO partition?"
        assert [v["question"] for v in msgs[1]["alternatives"]] == [QUESTION, QUESTION,
                                                                    "What does DeepSpeed ZeRO partition?"]
        back = live.http.post(f"/api/sessions/{sid}/versions/0").json()
        assert back["answer"] == first["answer"] and back["count"] == 3
        msgs = live.http.get(f"/api/sessions/{sid}").json()["messages"]
        assert msgs[0]["content"] == QUESTION and msgs[1]["content"] == first["answer"] and msgs[1]["chosen"] == 0
        assert error_of(live.http.post(f"/api/sessions/{sid}/versions/7"))["code"] == "bad_alternative"
        empty = new_session(live)
        r = live.http.post(f"/api/sessions/{empty}/regenerate", json={})
        assert r.status_code == 409 and error_of(r)["code"] == "no_turn"
        assert live.svc.queue.waiting == 0
    finally:
        live.model.delay = 0.04


# ---- history, export ----------------------------------------------------------------------------------------------
def test_history_list_rename_search_delete_and_export(live: Live, scripted_service, state: Path) -> None:
    live.model.delay = 0.0
    try:
        mine = new_session(live, "browser-history-1")
        live.http.post("/api/ask", json={"question": QUESTION, "session_id": mine})
        live.http.post("/api/ask", json={"question": "ZeRO 的 stage 3 切分什么？", "session_id": mine})
        later = new_session(live, "browser-history-1")
        live.http.post("/api/ask", json={"question": "What is JAX good for?", "session_id": later})
        elsewhere = new_session(live, "browser-history-2")
        live.http.post("/api/ask", json={"question": "飞桨适合什么场景？", "session_id": elsewhere})
    finally:
        live.model.delay = 0.04
    listed = live.http.get("/api/sessions", params={"client": "browser-history-1"}).json()["sessions"]
    assert [s["id"] for s in listed] == [later, mine] and listed[1]["title"] == QUESTION and listed[1]["turns"] == 2
    found = live.http.get("/api/sessions", params={"client": "browser-history-1", "q": "stage 3"}).json()
    assert [s["id"] for s in found["sessions"]] == [mine]
    assert live.http.patch(f"/api/sessions/{mine}", json={"title": "ZeRO 笔记"}).status_code == 200
    assert error_of(live.http.patch(f"/api/sessions/{mine}", json={"title": "  "}))["code"] == "empty_title"
    assert live.http.get(f"/api/sessions/{mine}").json()["title"] == "ZeRO 笔记"

    md = live.http.get(f"/api/sessions/{mine}/export", params={"format": "markdown", "lang": "zh"})
    assert md.status_code == 200 and md.headers["content-type"].startswith("text/markdown")
    assert "attachment" in md.headers["content-disposition"]
    text = md.text
    assert text.startswith("# ZeRO 笔记") and f"**问:** {QUESTION}" in text
    refs = re.findall(r"\[\^(\d+)\](?!:)", text)
    notes = dict(re.findall(r"^\[\^(\d+)\]: (.+)$", text, re.MULTILINE))
    assert refs and set(refs) == set(notes) and sorted(map(int, notes)) == list(range(1, len(notes) + 1))
    session = live.http.get(f"/api/sessions/{mine}").json()
    first_cite = session["messages"][1]["citations"][0]
    assert any(first_cite["source"] in n and f"{first_cite['lines'][0]}–{first_cite['lines'][1]}" in n
               for n in notes.values()), notes
    assert not re.search(r"(?<!\^)\[\d+\]", text.split("---")[0])  # every [n] became a footnote

    js = live.http.get(f"/api/sessions/{mine}/export", params={"format": "json"})
    data = json.loads(js.text)
    assert data["format"].startswith("framework-advisor.conversation") and data["messages"][1]["citations"]

    answer_id = session["messages"][1]["id"]
    one = live.http.get(f"/api/sessions/{mine}/messages/{answer_id}/markdown", params={"lang": "en"}).text
    assert "[^1]" in one and "\n[^1]: " in one and "lines" in one
    assert live.http.get(f"/api/sessions/{mine}/messages/{session['messages'][0]['id']}/markdown").status_code == 404

    # a restart: a new service and server on the same state directory lists the same conversations
    svc2 = scripted_service(state_dir=state)
    server = serve(svc2)
    try:
        again = httpx.get(server.url + "/api/sessions", params={"client": "browser-history-1"}).json()["sessions"]
        assert [s["id"] for s in again] == [later, mine] and again[1]["title"] == "ZeRO 笔记"
    finally:
        server.stop()
        svc2.close()
    assert live.http.delete(f"/api/sessions/{later}").status_code == 200
    assert [s["id"] for s in live.http.get("/api/sessions", params={"client": "browser-history-1"}).json()[
        "sessions"]] == [mine]
    assert live.http.get("/api/sessions", params={"client": "bad id!"}).status_code == 422


def test_a_session_by_id_is_its_browsers_only(live: Live) -> None:
    """Client A's conversation: client B naming itself gets the unknown session's 404 (in its language) on every
    /api/sessions/{id} route, and nothing changes; A (or a caller naming no client) still can."""
    a, b = "browser-owner-a", "browser-owner-b"
    live.model.delay = 0.0
    try:
        sid = new_session(live, a)
        answer = live.http.post("/api/ask", json={"question": QUESTION, "session_id": sid}).json()
    finally:
        live.model.delay = 0.04
    mid = answer["message_id"]
    as_b = {"client": b}
    refused = [live.http.get(f"/api/sessions/{sid}", params=as_b, headers={"accept-language": "zh"}),
               live.http.patch(f"/api/sessions/{sid}", params=as_b, json={"title": "B 的标题"}),
               live.http.get(f"/api/sessions/{sid}/export", params={**as_b, "format": "json"}),
               live.http.get(f"/api/sessions/{sid}/messages/{mid}/markdown", params=as_b),
               live.http.post(f"/api/sessions/{sid}/cancel", params=as_b),
               live.http.post(f"/api/sessions/{sid}/regenerate", params=as_b, json={}),
               live.http.post(f"/api/sessions/{sid}/versions/0", params=as_b),
               live.http.delete(f"/api/sessions/{sid}", params=as_b)]
    unknown = live.http.get("/api/sessions/" + "0" * 32, params=as_b)
    for r in refused[1:]:
        assert r.status_code == 404 and error_of(r) == error_of(unknown), (r.request.url, r.text)
    assert refused[0].status_code == 404 and error_of(refused[0])["code"] == "not_found"
    assert error_of(refused[0])["message"].startswith("未找到该会话") and "浏览器" in error_of(refused[0])["message"]
    assert "another browser" in error_of(refused[1])["message"]
    assert live.svc.queue.waiting == 0  # the refused regenerate gave its queue place back
    mine = live.http.get(f"/api/sessions/{sid}", params={"client": a})
    assert mine.status_code == 200 and mine.json()["title"] == QUESTION  # B's rename did not happen
    assert len(mine.json()["messages"]) == 2  # nor did B's regenerate add a version
    assert live.http.get(f"/api/sessions/{sid}/export", params={"client": a}).status_code == 200
    assert live.http.patch(f"/api/sessions/{sid}", params={"client": a}, json={"title": "A 的"}).status_code == 200
    assert live.http.get("/api/sessions", params=as_b).json()["sessions"] == []
    assert live.http.get(f"/api/sessions/{sid}", params={"client": "bad id!"}).status_code == 422
    assert live.http.delete(f"/api/sessions/{sid}", params={"client": a}).status_code == 200
    assert live.http.get(f"/api/sessions/{sid}").status_code == 404


# ---- the real engine ----------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_stopping_the_real_engine_ends_decoding_at_once(service) -> None:
    """The `fast` 0.5B model: a stop asked after the first tokens ends the stream within a token or two, the
    model is free for the next answer, and the stopped text is stored."""
    server = serve(service)
    url = server.url
    try:
        sid = httpx.post(url + "/api/sessions", json={}).json()["session_id"]
        tokens, stopped_at, last_token = 0, 0.0, 0.0
        with httpx.stream("POST", url + "/api/ask", json={"question": QUESTION, "session_id": sid, "stream": True},
                          timeout=300) as r:
            for kind, data in sse_events(r.iter_lines()):
                if kind == "token":
                    tokens += 1
                    last_token = time.perf_counter()
                    if tokens == 3:
                        asked = time.perf_counter()
                        assert httpx.post(f"{url}/api/sessions/{sid}/cancel").json()["cancelled"]
                        stopped_at = time.perf_counter()
                        print(f"cancel answered in {stopped_at - asked:.2f} s")
                if kind == "done":
                    done = data
        assert done["stopped"] and tokens <= 5, tokens  # type: ignore[index]
        print(f"last token {last_token - stopped_at:.2f} s after the cancel answered; {tokens} tokens")
        assert last_token - stopped_at < 2.0  # the engine computes no token once the cancel has answered
        assert done["usage"]["completion_tokens"] <= 5  # type: ignore[index]
        assert service.queue.waiting == 0 and service.queue._serving is None
        after = httpx.post(url + "/api/ask", json={"question": "What is JAX good for?"}, timeout=300).json()
        assert after["answer"] and not after.get("stopped")
    finally:
        server.stop()
