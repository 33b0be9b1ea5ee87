"""Admission control over real HTTP: a real uvicorn server in a thread on a free loopback port, around the real
service (real index of corpus/, real embedder, sessions, queue) whose chat model is a scripted one that blocks on
a threading.Event, so the queue fills deterministically. A full queue is refused on arrival before retrieval
(stream and not, /api and /v1), a wait times out, a client that leaves while waiting costs no model call, the
stream cap; and in process (TestClient): the rate limit per key and per IP, the Advisor's text limit, bounded
metric labels, the Gradio routes' body limit."""
from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient
from httpkit import ThreadServer, error_of, sse_events

from assistant.keys import hash_keys
from assistant.llm.scripted import ScriptedChatModel, quote_sources
from assistant.service import AssistantService
from assistant.settings import load_settings
from ui.auth import Access, KeyRing
from ui.server import create_app

REPO = Path(__file__).resolve().parents[1]
IN_SCOPE_EN = "What does DeepSpeed ZeRO partition across GPUs?"
IN_SCOPE_ZH = "DeepSpeed 的 ZeRO 是什么？"


class GatedModel(ScriptedChatModel):
    """Quotes its sources like the scripted backend, but only once `gate` is set; `busy` is set when a
    generation has started (the model is held)."""

    def __init__(self) -> None:
        super().__init__(quote_sources)
        self.gate = threading.Event()
        self.busy = threading.Event()

    def stream(self, messages: Any, **kw: Any) -> Iterator[str]:
        self.busy.set()
        assert self.gate.wait(30), "gate never opened"
        yield from super().stream(messages, **kw)


class CountingService(AssistantService):
    """The real service, counting how often a request reached retrieval (the retriever is fetched per search)."""

    retrievals = 0

    @property
    def retriever(self) -> Any:
        self.retrievals += 1
        return super().retriever


def make_service(corpus_index: Path, state: Path, model: ScriptedChatModel, **over: Any) -> CountingService:
    settings = load_settings(index_dir=corpus_index, state_dir=state, model="scripted", backend="scripted",
                             docs=[str(REPO / "corpus")], **over)
    svc = CountingService(settings, chat_model=model)
    svc.load(warm=True)
    return svc


@dataclass
class Live:
    svc: CountingService
    model: GatedModel
    app: Any
    url: str


@pytest.fixture(scope="module")
def live(corpus_index: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    model = GatedModel()
    svc = make_service(corpus_index, tmp_path_factory.mktemp("state"), model, rate_limit_per_minute=0)
    app = create_app(svc, with_ui=False, load=False)
    server = ThreadServer(app).start()
    yield Live(svc, model, app, server.url)
    model.gate.set()
    server.stop()
    svc.close()


@pytest.fixture()
def fresh(live: Live) -> Iterator[Live]:
    """Each test starts with the model gate closed and default limits, and leaves the line empty."""
    q, slots = live.svc.queue, live.app.state.stream_slots
    live.model.gate.clear()
    live.model.busy.clear()
    live.model.calls.clear()
    yield live
    live.model.gate.set()
    wait_until(lambda: q.waiting == 0 and q._serving is None and slots.active == 0, 20)
    q.max_waiting, q.timeout_s, slots.limit = 16, None, 8


def wait_until(cond: Any, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.01)


def in_thread(fn: Any) -> tuple[threading.Thread, dict[str, Any]]:
    out: dict[str, Any] = {}

    def run() -> None:
        out["result"] = fn()

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, out


def stream_all(url: str, path: str, body: dict[str, Any]) -> tuple[int, list[tuple[str, object]]]:
    with httpx.stream("POST", url + path, json=body, timeout=60) as r:
        if r.status_code != 200:
            r.read()
            return r.status_code, []
        return r.status_code, list(sse_events(r.iter_lines()))


def hold_the_model(live: Live) -> tuple[threading.Thread, dict[str, Any]]:
    """A streamed question that gets the model and blocks in it until the gate opens."""
    t, out = in_thread(lambda: stream_all(live.url, "/api/ask", {"question": IN_SCOPE_EN, "stream": True}))
    assert live.model.busy.wait(20)
    return t, out


# ---- the generation queue -------------------------------------------------------------------------
def test_a_full_queue_is_refused_on_arrival_before_retrieval(fresh: Live) -> None:
    live = fresh
    live.svc.queue.max_waiting = 1
    holder, held = hold_the_model(live)
    started = live.svc.retrievals
    waiter, waited = in_thread(lambda: httpx.post(live.url + "/api/ask", json={"question": IN_SCOPE_ZH}, timeout=60))
    wait_until(lambda: live.svc.queue.waiting == 1 and live.svc.retrievals == started + 1)  # it retrieved, waits
    before = live.svc.retrievals
    refused = [
        httpx.post(live.url + "/api/ask", json={"question": IN_SCOPE_EN}),
        httpx.post(live.url + "/api/ask", json={"question": IN_SCOPE_EN, "stream": True}),
        httpx.post(live.url + "/v1/chat/completions", json={"messages": [{"role": "user", "content": IN_SCOPE_EN}]}),
        httpx.post(live.url + "/v1/chat/completions", json={"stream": True, "messages": [
            {"role": "user", "content": IN_SCOPE_EN}]}, headers={"accept-language": "zh"}),
    ]
    for r in refused:  # a stream is refused before it starts: a JSON 503, not a 200 with an error event
        assert r.status_code == 503 and r.headers["retry-after"] == "5", r.text
        assert r.headers["content-type"].startswith("application/json")
        assert error_of(r)["code"] == "queue_full"
    assert error_of(refused[0])["message"] == "The assistant is busy (queue full); please retry in a moment."
    assert live.svc.retrievals == before  # none of them reached retrieval
    assert live.svc.queue.waiting == 1
    live.model.gate.set()
    holder.join(30)
    waiter.join(30)
    assert held["result"][0] == 200 and [k for k, _ in held["result"][1]][-1] == "done"
    assert waited["result"].status_code == 200 and waited["result"].json()["citations"]
    assert len(live.model.calls) == 2


def test_a_wait_that_times_out_is_a_503_or_an_error_event(fresh: Live) -> None:
    live = fresh
    live.svc.queue.timeout_s = 0.5
    holder, _ = hold_the_model(live)
    t0 = time.monotonic()
    r = httpx.post(live.url + "/api/ask", json={"question": IN_SCOPE_ZH}, timeout=30)
    assert 0.4 < time.monotonic() - t0 < 10
    assert r.status_code == 503 and r.headers["retry-after"] == "5"
    assert error_of(r) == {"code": "queue_timeout", "message": "助手正忙：0.5 秒内未排到，请稍后重试。"}
    status, events = stream_all(live.url, "/api/ask", {"question": IN_SCOPE_EN, "stream": True})
    assert status == 200 and [k for k, _ in events] == ["sources", "error"]  # the stream had started
    assert events[1][1]["code"] == "queue_timeout"  # type: ignore[index]
    assert live.svc.queue.waiting == 0
    live.model.gate.set()
    holder.join(30)
    assert len(live.model.calls) == 1  # the timed-out ones never reached the model


def test_a_client_that_leaves_while_waiting_frees_its_place_and_costs_no_model_call(fresh: Live) -> None:
    live = fresh
    holder, _ = hold_the_model(live)
    with httpx.stream("POST", live.url + "/api/ask", json={"question": IN_SCOPE_ZH, "stream": True}, timeout=30) as r:
        assert r.status_code == 200
        events = sse_events(r.iter_lines())  # kept: dropping the reader closes the response (a disconnect)
        first = next(events)
        assert first[0] == "sources" and first[1], first  # retrieval done; now waiting for the model
        time.sleep(0.2)
        assert live.svc.queue.waiting == 1
    wait_until(lambda: live.svc.queue.waiting == 0, 5)  # the place is given back at once, the model still held
    assert live.model.gate.is_set() is False
    live.model.gate.set()
    holder.join(30)
    time.sleep(0.3)  # were the waiter still queued, it would reach the model now
    assert len(live.model.calls) == 1
    assert not any(IN_SCOPE_ZH in m["content"] for m in live.model.calls[0])
    # the line moves on
    r2 = httpx.post(live.url + "/api/ask", json={"question": IN_SCOPE_EN}, timeout=30)
    assert r2.status_code == 200 and len(live.model.calls) == 2


def test_a_non_streamed_request_that_leaves_while_waiting_costs_no_model_call(fresh: Live) -> None:
    live = fresh
    holder, _ = hold_the_model(live)
    for path, body in (("/api/ask", {"question": IN_SCOPE_ZH}),
                       ("/v1/chat/completions", {"messages": [{"role": "user", "content": IN_SCOPE_ZH}]})):
        with pytest.raises(httpx.ReadTimeout):  # the client gives up and closes the connection
            httpx.post(live.url + path, json=body, timeout=httpx.Timeout(30, read=1.5))
        wait_until(lambda: live.svc.queue.waiting == 0, 3)  # its place is back while the model is still held
    live.model.gate.set()
    holder.join(30)
    time.sleep(0.3)
    assert len(live.model.calls) == 1


def test_concurrent_streams_are_capped(fresh: Live) -> None:
    live = fresh
    live.app.state.stream_slots.limit = 1
    holder, _ = hold_the_model(live)
    for path, body in (("/api/ask", {"question": IN_SCOPE_EN, "stream": True}),
                       ("/v1/chat/completions", {"stream": True, "messages": [{"role": "user", "content": "ZeRO?"}]})):
        r = httpx.post(live.url + path, json=body, timeout=30)
        assert r.status_code == 503 and r.headers["retry-after"] == "5", r.text
        assert error_of(r)["code"] == "too_many_streams"
    assert live.svc.queue.waiting == 0  # a refused stream took no place in line
    live.model.gate.set()
    holder.join(30)
    wait_until(lambda: live.app.state.stream_slots.active == 0, 5)  # the producer thread ended: slot back
    status, events = stream_all(live.url, "/api/ask", {"question": IN_SCOPE_EN, "stream": True})
    assert status == 200 and events[-1][0] == "done"


# ---- in process: rate limit, Advisor text, metrics, Gradio bodies ---------------------------------
@pytest.fixture(scope="module")
def plain(corpus_index: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[CountingService]:
    svc = make_service(corpus_index, tmp_path_factory.mktemp("state"), ScriptedChatModel(quote_sources),
                       rate_limit_per_minute=2)
    yield svc
    svc.close()


def test_rate_limit_per_client_ip(plain: CountingService) -> None:
    app = create_app(plain, with_ui=False, load=False)
    one = TestClient(app, base_url="http://127.0.0.1", client=("10.0.0.1", 4000))
    two = TestClient(app, base_url="http://127.0.0.1", client=("10.0.0.2", 4000))
    assert one.post("/api/search", json={"query": "ZeRO"}).status_code == 200
    assert one.post("/api/ask", json={"question": IN_SCOPE_EN}).status_code == 200
    for path, body in (("/api/search", {"query": "ZeRO"}), ("/api/ask", {"question": IN_SCOPE_EN}),
                       ("/api/advise", {"text": "5人团队，熟悉 PyTorch"}),
                       ("/v1/chat/completions", {"messages": [{"role": "user", "content": IN_SCOPE_EN}]})):
        r = one.post(path, json=body, headers={"accept-language": "zh"})
        assert r.status_code == 429 and 1 <= int(r.headers["retry-after"]) <= 30, (path, r.text)  # 2 a minute
        assert error_of(r)["code"] == "rate_limited" and "每分钟最多 2 次" in error_of(r)["message"]
    assert one.get("/healthz").status_code == 200  # only the question routes count
    assert two.post("/api/search", json={"query": "ZeRO"}).status_code == 200  # another IP has its own bucket


def test_rate_limit_per_key(plain: CountingService) -> None:
    access = Access(KeyRing(hash_keys("key-alpha-0123456789,key-bravo-0123456789")), ["127.0.0.1"])
    http = TestClient(create_app(plain, with_ui=False, load=False, access=access), base_url="http://127.0.0.1")
    alpha = {"authorization": "Bearer key-alpha-0123456789"}
    bravo = {"authorization": "Bearer key-bravo-0123456789"}
    assert [http.post("/api/search", json={"query": "ZeRO"}, headers=alpha).status_code for _ in range(3)] == [
        200, 200, 429]
    r = http.post("/api/search", json={"query": "ZeRO"}, headers=alpha)
    assert r.status_code == 429 and int(r.headers["retry-after"]) >= 1
    assert "limit 2 a minute" in error_of(r)["message"]
    assert http.post("/api/search", json={"query": "ZeRO"}, headers=bravo).status_code == 200  # same IP, other key


def test_advisor_text_over_its_limit_is_a_413_in_its_language(plain: CountingService) -> None:
    http = TestClient(create_app(plain, with_ui=False, load=False), base_url="http://127.0.0.1",
                      client=("10.0.1.1", 1))
    r = http.post("/api/advise", json={"text": "团队熟悉 PyTorch，" * 300})
    assert r.status_code == 413 and error_of(r) == {"code": "input_too_long", "message": "描述过长（最多 2000 个字符）。"}
    r = http.post("/api/advise", json={"text": "a team that knows PyTorch " * 100})
    assert r.status_code == 413 and error_of(r)["message"] == "The description is too long (max 2000 characters)."
    with pytest.raises(Exception, match="too long"):
        plain.advise("x " * 1001)  # the CLI and the UI's Advisor tab go through the same check


def test_metric_labels_are_bounded(plain: CountingService) -> None:
    http = TestClient(create_app(plain, with_ui=False, load=False), base_url="http://127.0.0.1")
    http.request("BREW", "/api/ask")
    http.get("/api/no-such-route-8f3a")
    http.get("/v1/another-unknown-91c2")
    text = http.get("/metrics").text
    assert "BREW" not in text and 'method="other"' in text
    assert "8f3a" not in text and "91c2" not in text  # the catch-all's template is the label, not the path
    assert 'route="/api/{rest:path}"' in text


def test_gradio_routes_have_their_own_body_limit(corpus_index: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    svc = make_service(corpus_index, tmp_path_factory.mktemp("state"), ScriptedChatModel(quote_sources),
                       max_ui_body_bytes=10_000, max_upload_bytes=10_000)
    try:
        http = TestClient(create_app(svc, with_ui=True, load=False), base_url="http://127.0.0.1")
        big = b'{"data": ["' + b"x" * 20_000 + b'"], "fn_index": 0, "session_hash": "abc"}'
        r = http.post("/gradio_api/queue/join", content=big, headers={"content-type": "application/json"})
        assert r.status_code == 413 and error_of(r)["code"] == "body_too_large", r.text
        # the Gradio upload route (the Documents tab's) has the upload limit, plus a multipart framing's slack
        huge = b"x" * (10_000 + 64_000 + 1_000)
        r = http.post("/gradio_api/upload", content=huge, headers={"content-type": "application/json"})
        assert r.status_code == 413 and error_of(r)["code"] == "upload_too_large", r.text
        chunked = http.post("/gradio_api/queue/join", content=iter([big[:8000], big[8000:]]),
                            headers={"accept-language": "zh"})  # no Content-Length: counted while read
        assert chunked.status_code == 413 and error_of(chunked)["message"] == "请求体过大（最多 10000 字节）。"
        small = http.post("/gradio_api/queue/join", json={"data": [], "fn_index": 0, "session_hash": "abc"})
        assert small.status_code != 413  # under the limit it reaches Gradio
        assert http.post("/api/search", json={"query": "x" * 1000}).status_code == 200  # the API keeps its own
    finally:
        svc.close()
