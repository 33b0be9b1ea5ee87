"""The HTTP API in process: the real app (ui.server.create_app) around the real service (real index of corpus/,
real embedder, sessions in SQLite, the generation queue, the citation check) whose chat model is the plumbing
engine ScriptedChatModel, under Starlette's TestClient. Every route, SSE event order and framing, the OpenAI
client and LangChain's ChatOpenAI, 4xx bodies with reasons in zh/en, sessions + feedback surviving a restart,
a full queue. Answer *behaviour* with a real model is tested in test_answer.py; the real server in test_serve.py."""
from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from httpkit import error_of, sse_events

from ui.server import create_app

OUT_OF_SCOPE_ZH = "今天北京的天气怎么样？"  # refused right after retrieval: no generation
OUT_OF_SCOPE_EN = "What is a good recipe for banana bread?"
IN_SCOPE_ZH = "DeepSpeed 的 ZeRO 是什么？"
IN_SCOPE_EN = "What does DeepSpeed ZeRO partition across GPUs?"


@pytest.fixture(scope="module")
def service(scripted_service):
    svc = scripted_service()
    yield svc
    svc.close()


@pytest.fixture(scope="module")
def http(service) -> Iterator[TestClient]:
    # no `with`: the app's lifespan would close the module's service after the first client
    yield TestClient(create_app(service, with_ui=False, load=False), base_url="http://127.0.0.1")


def stream_events(http: TestClient, path: str, body: dict) -> list[tuple[str, object]]:
    with http.stream("POST", path, json=body) as r:
        assert r.status_code == 200, r.read()
        assert r.headers["content-type"].startswith("text/event-stream")
        return list(sse_events(r.iter_lines()))


# ---- health, docs, metrics ------------------------------------------------------------------------
def test_health_ready_and_docs(http: TestClient) -> None:
    assert http.get("/healthz").json() == {"status": "ok"}
    assert http.get("/readyz").json() == {"status": "ready"}
    assert "swagger" in http.get("/docs").text.lower()
    spec = http.get("/openapi.json").json()
    for path in ("/api/ask", "/api/search", "/api/passages/{chunk_id}", "/api/sessions/{session_id}",
                 "/api/feedback", "/api/advise", "/v1/chat/completions", "/v1/models", "/healthz", "/readyz",
                 "/metrics"):
        assert path in spec["paths"], path
    assert spec["components"]["schemas"]["AskRequest"]["examples"][0]["question"]


def test_not_ready_is_a_503_in_the_users_language(scripted_service) -> None:
    svc = scripted_service(load=False)
    try:
        http = TestClient(create_app(svc, with_ui=False, load=False), base_url="http://127.0.0.1")
        r = http.get("/readyz", headers={"accept-language": "zh-CN"})
        assert r.status_code == 503 and r.json()["status"] == "loading" and r.json()["error"]["message"] == "模型加载中…"
        # the readiness gate runs before the body is read: its language comes from Accept-Language
        r = http.post("/api/ask", json={"question": IN_SCOPE_ZH}, headers={"accept-language": "zh"})
        assert r.status_code == 503 and error_of(r) == {"code": "not_ready", "message": "助手正在加载模型，请稍后重试。"}
        r = http.post("/api/search", json={"query": "ZeRO"})
        assert r.status_code == 503 and "still loading" in error_of(r)["message"]
        assert http.get("/healthz").status_code == 200
        svc.load()
        assert http.get("/readyz").status_code == 200
        assert http.post("/api/search", json={"query": "ZeRO"}).status_code == 200
    finally:
        svc.close()


def test_metrics_after_requests(http: TestClient) -> None:
    http.post("/api/search", json={"query": "混合精度", "k": 2})
    http.post("/api/ask", json={"question": OUT_OF_SCOPE_ZH})
    assert [k for k, _ in stream_events(http, "/api/ask", {"question": OUT_OF_SCOPE_EN, "stream": True})] == [
        "sources", "token", "citations", "done"]  # a refusal: one token
    text = http.get("/metrics").text
    ttft = [line for line in text.splitlines() if line.startswith("assistant_time_to_first_token_seconds_count")]
    assert ttft and float(ttft[0].split()[-1]) >= 2
    assert 'assistant_http_requests_total{method="POST",route="/api/search",status="200"}' in text
    assert 'route="/api/ask"' in text
    for name in ("assistant_http_request_seconds_bucket", "assistant_time_to_first_token_seconds_bucket",
                 "assistant_time_to_sources_seconds_count", "assistant_generation_queue_wait_seconds_total"):
        assert name in text, name
    assert "assistant_generation_queue_waiting 0.0" in text


# ---- search and passages --------------------------------------------------------------------------
def test_search_ranks_passages_and_passage_route(http: TestClient) -> None:
    r = http.post("/api/search", json={"query": "ZeRO optimizer state partitioning", "k": 4})
    assert r.status_code == 200, r.text
    res = r.json()["results"]
    assert [x["rank"] for x in res] == [1, 2, 3, 4]
    assert [x["score"] for x in res] == sorted((x["score"] for x in res), reverse=True)
    assert any("deepspeed" in x["source"].lower() for x in res)
    top = res[0]
    body = http.get(f"/api/passages/{top['chunk_id']}").json()
    assert body["id"] == top["chunk_id"] and body["text"] == top["text"]
    assert body["heading_path"] == top["heading_path"] and body["lines"] == top["lines"]
    assert body["lines"][0] <= body["lines"][1] and body["source"] and body["title"]


def test_passages_say_where_they_come_from(http: TestClient) -> None:
    """Every result has url and licence; the article's passages its publisher and date (issue 19 item 2)."""
    res = http.post("/api/search", json={"query": "文章认为训练支持的核心三要素是什么", "k": 8}).json()["results"]
    assert all({"url", "licence", "publisher", "date"} <= set(x) for x in res)
    art = next(x for x in res if "/article/" in x["path"])
    assert art["publisher"] == "AI门户网" and art["date"] == "2026-03-27" and art["licence"].startswith("quoted")
    note = next(x for x in res if "/notes/" in x["path"])
    assert note["licence"] == "CC-BY-4.0"
    assert http.get(f"/api/passages/{art['chunk_id']}").json()["publisher"] == "AI门户网"


def test_search_filters(http: TestClient) -> None:
    r = http.post("/api/search", json={"query": "mixed precision", "k": 5, "filters": {"language": "zh"}})
    assert r.status_code == 200
    assert {x["language"] for x in r.json()["results"]} == {"zh"}
    r = http.post("/api/search", json={"query": "x", "filters": {"framework": ["NoSuchFramework"]}})
    assert r.status_code == 422 and error_of(r)["code"] == "bad_filter"


# ---- errors ---------------------------------------------------------------------------------------
def test_malformed_bodies_get_reasons(http: TestClient) -> None:
    r = http.post("/api/ask", content=b"{not json", headers={"content-type": "application/json"})
    assert r.status_code == 400 and error_of(r) == {"code": "bad_json", "message": "The request body is not valid JSON."}
    r = http.post("/api/ask", content=b"{not json", headers={"content-type": "application/json",
                                                             "accept-language": "zh"})
    assert error_of(r)["message"] == "请求体不是有效的 JSON。"
    r = http.post("/api/ask", json={"session_id": "s1"})
    assert r.status_code == 422 and "question" in error_of(r)["message"]
    r = http.post("/api/ask", json={"question": "   "})
    assert r.status_code == 422 and error_of(r)["code"] == "empty_input"
    r = http.post("/api/ask", json={"question": "长" * 2001})
    err = error_of(r)
    assert r.status_code == 413 and err["code"] == "input_too_long" and "输入过长" in err["message"]
    r = http.post("/api/ask", json={"question": "long " * 500, "stream": True})  # 4xx before the stream starts
    assert r.status_code == 413 and "too long" in error_of(r)["message"]
    r = http.post("/api/ask", json={"question": "x" * 70_000})
    assert r.status_code == 413 and error_of(r)["code"] == "body_too_large"
    chunked = (part for part in (b'{"question": "', b"x" * 40_000, b"y" * 40_000, b'"}'))  # no Content-Length
    r = http.post("/api/ask", content=chunked, headers={"content-type": "application/json", "accept-language": "zh"})
    assert r.status_code == 413 and error_of(r) == {"code": "body_too_large", "message": "请求体过大（最多 64000 字节）。"}
    r = http.post("/api/search", json={"query": "ZeRO", "k": 0})
    assert r.status_code == 422 and "k" in error_of(r)["message"]
    r = http.post("/api/search", json={"query": "ZeRO", "k": 51})
    assert r.status_code == 422
    r = http.post("/api/feedback", json={"session_id": "a", "message_id": "b", "rating": "meh"})
    assert r.status_code == 422 and "rating" in error_of(r)["message"]
    r = http.post("/api/feedback", json={"session_id": "0" * 32, "message_id": "1" * 32, "rating": "up"},
                  headers={"accept-language": "zh-CN,zh;q=0.9"})
    assert r.status_code == 404 and error_of(r)["message"] == "该会话中没有这条消息。"
    r = http.post("/api/feedback", json={"session_id": "0" * 32, "message_id": "1" * 32, "rating": "up"})
    assert r.status_code == 404 and error_of(r)["message"] == "No such message in this session."
    r = http.post("/v1/chat/completions", json={"model": "fast", "messages": []})
    assert r.status_code == 422 and "messages" in error_of(r)["message"]
    r = http.post("/v1/chat/completions", json={"messages": [{"role": "system", "content": "hi"}]})
    assert r.status_code == 422 and error_of(r)["code"] == "no_user_message"


def test_advise_route_ranks_and_cites(http: TestClient) -> None:
    r = http.post("/api/advise", json={"text": "我们需要国产化，硬件是昇腾 NPU，做中文 NLP", "lang": "zh"})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["ranking"][0]["name"] == "PaddlePaddle"
    numbers = {c["n"] for c in body["citations"]}
    for row in body["table"]["rows"]:
        for cell in row["cells"].values():
            assert cell["citations"] and set(cell["citations"]) <= numbers
    bad = http.post("/api/advise", json={})
    assert bad.status_code == 422 and error_of(bad)["code"] == "empty_scenario"
    assert http.post("/api/advise", json={"hardware": "quantum"}).status_code == 422


def test_unknown_ids_are_404(http: TestClient) -> None:
    for r in (http.get("/api/sessions/no-such-session"), http.delete("/api/sessions/no-such-session"),
              http.get("/api/passages/no-such-chunk"), http.get("/api/no-such-route"), http.get("/v1/nothing")):
        assert r.status_code == 404 and error_of(r)["code"] == "not_found"
    assert error_of(http.get("/api/sessions/nope", headers={"accept-language": "zh"}))["message"].startswith("未找到该会话")


# ---- answers --------------------------------------------------------------------------------------
def test_ask_json_cited_answer_sessions_and_feedback(http: TestClient, service) -> None:
    r = http.post("/api/ask", json={"question": IN_SCOPE_ZH})
    assert r.status_code == 200, r.text
    ans = r.json()
    assert set(ans) == {"answer", "citations", "refused", "language", "session_id", "message_id", "timings", "usage",
                        "queue"}  # a generated answer also says how long it waited for the model
    assert ans["queue"]["wait_ms"] >= 0 and ans["queue"]["ticket"] >= 0
    assert ans["refused"] is False and ans["language"] == "zh"
    cited = {c["n"] for c in ans["citations"]}
    assert cited and cited <= {1, 2} and all(f"[{n}]" in ans["answer"] for n in cited)  # the checker kept them
    assert all(c["chunk_id"] and c["source"] and c["lines"] and c["support"] > 0 for c in ans["citations"])
    assert ans["usage"]["completion_tokens"] > 0 and ans["usage"]["prompt_tokens"] > 0
    assert {"retrieval_ms", "ttft_ms", "total_ms"} <= set(ans["timings"])
    assert service.llm.calls[-1][-1]["content"].count("[1] ")  # the model saw the numbered sources
    sid, mid = ans["session_id"], ans["message_id"]
    r = http.post("/api/ask", json={"question": OUT_OF_SCOPE_EN, "session_id": sid})
    assert set(r.json()) == set(ans) - {"queue"}  # a refusal never queued
    assert r.json()["session_id"] == sid and r.json()["language"] == "en" and r.json()["refused"] is True
    assert http.post("/api/feedback", json={"session_id": sid, "message_id": mid, "rating": "down",
                                            "comment": "not about frameworks"}).json() == {"ok": True}
    sess = http.get(f"/api/sessions/{sid}").json()
    assert [m["role"] for m in sess["messages"]] == ["user", "assistant", "user", "assistant"]
    assert sess["messages"][1]["id"] == mid and sess["messages"][0]["content"] == IN_SCOPE_ZH
    assert sess["feedback"][0]["rating"] == "down" and sess["feedback"][0]["message_id"] == mid
    assert http.delete(f"/api/sessions/{sid}").json() == {"deleted": sid}
    assert http.get(f"/api/sessions/{sid}").status_code == 404


def test_ask_stream_event_order_and_framing(http: TestClient) -> None:
    with http.stream("POST", "/api/ask", json={"question": IN_SCOPE_EN, "stream": True}) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        lines = list(r.iter_lines())
    events = list(sse_events(lines))
    assert sum(1 for line in lines if line.startswith("event:")) == len(events)  # each event: one event: line
    kinds = [k for k, _ in events]
    data = {k: v for k, v in reversed(events)}  # the first payload of each kind
    assert kinds[0] == "sources" and kinds[-3:] == ["status", "citations", "done"] and set(kinds[1:-3]) == {"token"}
    assert data["status"] == {"step": "checking_citations"}  # the model is done; the citation check runs
    sources = data["sources"]
    assert isinstance(sources, list) and [s["n"] for s in sources] == list(range(1, len(sources) + 1))
    assert all(s["chunk_id"] and s["text"] and s["lines"] for s in sources)
    text = "".join(v["text"] for k, v in events if k == "token")  # type: ignore[index]
    done = events[-1][1]
    assert isinstance(done, dict) and done["language"] == "en" and done["session_id"] and done["message_id"]
    assert {"retrieval_ms", "ttft_ms", "total_ms"} <= set(done["timings"])
    assert done["citations"] == events[-2][1] and done["citations"]
    assert {c["n"] for c in done["citations"]} <= {s["n"] for s in sources}
    assert "[1]" in text and done["answer"]  # the raw stream, then the checked answer
    assert http.get(f"/api/sessions/{done['session_id']}").json()["messages"][-1]["id"] == done["message_id"]


def test_the_openai_stream_has_no_status_event(http: TestClient) -> None:
    """The OpenAI-compatible stream stays OpenAI's: only chat.completion.chunk objects and [DONE], whatever
    status events the service yields."""
    body = {"messages": [{"role": "user", "content": IN_SCOPE_EN}], "stream": True}
    with http.stream("POST", "/v1/chat/completions", json=body) as r:
        assert r.status_code == 200
        lines = [line for line in r.iter_lines() if line]
    assert all(line.startswith("data: ") for line in lines) and lines[-1] == "data: [DONE]"
    chunks = [json.loads(line[6:]) for line in lines[:-1]]
    assert {c["object"] for c in chunks} == {"chat.completion.chunk"}
    assert all(set(c["choices"][0]["delta"]) <= {"role", "content"} for c in chunks)
    assert "checking_citations" not in "".join(lines) and chunks[-1]["choices"][0]["finish_reason"] == "stop"


def test_search_and_health_answer_while_a_stream_generates(scripted_service) -> None:
    """The model is busy (its script blocks mid-answer): search and health must still answer meanwhile."""
    generating, release = threading.Event(), threading.Event()

    def slow(messages):
        generating.set()
        assert release.wait(60)
        return "ZeRO partitions optimizer states [1]."

    svc = scripted_service(script=slow)
    try:
        http = TestClient(create_app(svc, with_ui=False, load=False), base_url="http://127.0.0.1")
        kinds: list[str] = []
        reader = threading.Thread(target=lambda: kinds.extend(
            k for k, _ in stream_events(http, "/api/ask", {"question": IN_SCOPE_ZH, "stream": True})))
        reader.start()
        assert generating.wait(60)
        t0 = time.perf_counter()
        s = http.post("/api/search", json={"query": "张量并行", "k": 3})
        assert s.status_code == 200 and len(s.json()["results"]) == 3 and http.get("/healthz").status_code == 200
        assert time.perf_counter() - t0 < 30
        assert not kinds  # the answer is still waiting for its model
        release.set()
        reader.join(60)
        assert kinds[0] == "sources" and kinds[-2:] == ["citations", "done"]
    finally:
        release.set()
        svc.close()


def test_queue_full_is_a_readable_503_before_anything_starts(scripted_service) -> None:
    svc = scripted_service(max_queue=0)  # no place in line: every question is refused on arrival
    try:
        http = TestClient(create_app(svc, with_ui=False, load=False), base_url="http://127.0.0.1")
        r = http.post("/api/ask", json={"question": IN_SCOPE_ZH})
        assert r.status_code == 503 and error_of(r) == {"code": "queue_full", "message": "助手正忙（排队已满），请稍后重试。"}
        assert r.headers["retry-after"] == "5"
        r = http.post("/api/ask", json={"question": IN_SCOPE_EN, "stream": True})  # a stream never starts with 200
        assert r.status_code == 503 and r.headers["retry-after"] == "5" and error_of(r) == {
            "code": "queue_full", "message": "The assistant is busy (queue full); please retry in a moment."}
        assert http.post("/api/search", json={"query": "ZeRO"}).status_code == 200  # search needs no queue
    finally:
        svc.close()


def test_sessions_and_feedback_survive_a_restart(scripted_service, tmp_path) -> None:
    first = scripted_service(state_dir=tmp_path)
    with TestClient(create_app(first, with_ui=False, load=False), base_url="http://127.0.0.1") as http:  # the lifespan closes the service
        ans = http.post("/api/ask", json={"question": IN_SCOPE_ZH}).json()
        sid, mid = ans["session_id"], ans["message_id"]
        assert http.post("/api/feedback", json={"session_id": sid, "message_id": mid, "rating": "up"}).status_code == 200
    second = scripted_service(state_dir=tmp_path, load=False)
    try:
        sess = TestClient(create_app(second, with_ui=False, load=False), base_url="http://127.0.0.1").get(f"/api/sessions/{sid}").json()
    finally:
        second.close()
    assert [m["id"] for m in sess["messages"]][-1] == mid
    assert sess["messages"][-1]["citations"] == ans["citations"]
    assert sess["feedback"] == [{**sess["feedback"][0], "message_id": mid, "rating": "up"}]


# ---- OpenAI-compatible ----------------------------------------------------------------------------
def test_openai_client_models_and_refusal_stream(http: TestClient) -> None:
    from openai import OpenAI

    client = OpenAI(base_url="http://127.0.0.1/v1", api_key="local-no-key", http_client=http)
    assert [m.id for m in client.models.list().data] == ["scripted"]
    chunks = list(client.chat.completions.create(model="scripted", stream=True, messages=[
        {"role": "system", "content": "ignored"}, {"role": "user", "content": OUT_OF_SCOPE_EN}]))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert "documents" in text.lower() or "sorry" in text.lower(), text
    last = chunks[-1]
    assert last.choices[0].finish_reason == "stop"
    assert last.model_extra["citations"] == [] and last.model_extra["refused"] is True
    assert last.model_extra["session_id"]


def test_openai_client_cited_answer_footnotes_and_session(http: TestClient) -> None:
    from openai import OpenAI

    client = OpenAI(base_url="http://127.0.0.1/v1", api_key="local-no-key", http_client=http)
    resp = client.chat.completions.create(model="scripted", messages=[{"role": "user", "content": IN_SCOPE_EN}])
    content = resp.choices[0].message.content or ""
    extra = resp.model_extra
    sid = extra["session_id"]  # issued by the server; sent back to continue the conversation
    assert len(sid) == 32 and resp.usage is not None and resp.usage.completion_tokens > 0
    assert extra["citations"] and extra["refused"] is False
    for c in extra["citations"]:  # every structured citation is also a footnote in the text
        assert f"[{c['n']}] {c['title']} - {c['source']}:{c['lines'][0]}-{c['lines'][1]}" in content
    chunks = list(client.chat.completions.create(model="scripted", stream=True, messages=[
        {"role": "user", "content": IN_SCOPE_EN}], extra_body={"session_id": sid}))
    streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert chunks[-1].model_extra["citations"] == extra["citations"]
    assert all(f"[{c['n']}] {c['title']}" in streamed for c in extra["citations"])
    msgs = http.get(f"/api/sessions/{sid}").json()["messages"]
    assert [m["role"] for m in msgs] == ["user", "assistant"] * 2


def test_langchain_chat_openai_round_trip(http: TestClient) -> None:
    from langchain_openai import ChatOpenAI

    llm = ChatOpenAI(base_url="http://127.0.0.1/v1", api_key="any-string", model="scripted", max_retries=0,
                     http_client=http)
    msg = llm.invoke("飞桨适合什么场景？")
    assert isinstance(msg.content, str) and "[1]" in msg.content
    pieces = [c.content for c in llm.stream(OUT_OF_SCOPE_ZH)]
    assert len(pieces) > 1 and "".join(str(p) for p in pieces).strip()


def test_http_errors_reach_the_openai_client_as_its_own_errors(http: TestClient) -> None:
    import openai

    client = openai.OpenAI(base_url="http://127.0.0.1/v1", api_key="x", http_client=http, max_retries=0)
    with pytest.raises(openai.UnprocessableEntityError) as err:
        client.chat.completions.create(model="scripted", messages=[{"role": "system", "content": "only rules"}])
    assert err.value.body == {"code": "no_user_message", "message": "messages must contain a user message."}
