"""The HTTP API against a real server: `python -m assistant serve` in a subprocess over a real index of corpus/
with the real 0.5B model. Every route, SSE event order, the OpenAI client and LangChain's ChatOpenAI, 4xx
bodies with reasons, and sessions + feedback surviving a restart."""
from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

REPO = Path(__file__).resolve().parents[1]
OUT_OF_SCOPE_ZH = "今天北京的天气怎么样？"  # refused right after retrieval: no generation, quick
OUT_OF_SCOPE_EN = "What is a good recipe for banana bread?"
IN_SCOPE_ZH = "DeepSpeed 的 ZeRO 是什么？"
IN_SCOPE_EN = "What does DeepSpeed ZeRO partition across GPUs?"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServerProcess:
    """`python -m assistant serve` on a free loopback port; start() waits for /readyz."""

    def __init__(self, index_dir: Path, state_dir: Path, log_path: Path, max_answer_tokens: int = 96,
                 **env: str) -> None:
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.log_path = log_path
        self.env = {**os.environ, "ASSISTANT_INDEX_DIR": str(index_dir), "ASSISTANT_STATE_DIR": str(state_dir),
                    "ASSISTANT_MODEL": "fast", "ASSISTANT_MAX_ANSWER_TOKENS": str(max_answer_tokens), **env}
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 300) -> None:
        log = self.log_path.open("ab")
        self.proc = subprocess.Popen([sys.executable, "-m", "assistant", "serve", "--port", str(self.port)],
                                     cwd=REPO, env=self.env, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        healthy = False
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited ({self.proc.returncode}); log: {self.log_path}")
            try:
                healthy = healthy or httpx.get(self.base + "/healthz", timeout=2).status_code == 200
                if httpx.get(self.base + "/readyz", timeout=2).status_code == 200:
                    assert healthy
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.5)
        raise RuntimeError(f"server not ready after {timeout} s; log: {self.log_path}")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None


@pytest.fixture(scope="module")
def server(corpus_index: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    state = tmp_path_factory.mktemp("api-state")
    srv = ServerProcess(corpus_index, state, state / "server.log")
    srv.start()
    yield srv
    srv.stop()


@pytest.fixture()
def http(server: ServerProcess) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.base, timeout=600) as client:
        yield client


def sse_events(response: httpx.Response) -> Iterator[tuple[str, object]]:
    """(event, parsed data) from a text/event-stream response; comments (pings) skipped."""
    event, data = "message", []
    for line in response.iter_lines():
        if line == "":
            if data:
                yield event, json.loads("\n".join(data))
            event, data = "message", []
        elif line.startswith(":"):
            continue
        elif line.startswith("event:"):
            event = line[6:].strip()
        elif line.startswith("data:"):
            data.append(line[5:].lstrip())


def error_of(r: httpx.Response) -> dict[str, str]:
    body = r.json()
    assert set(body) == {"error"}, body
    assert body["error"]["code"] and body["error"]["message"], body
    assert "Traceback" not in r.text
    return body["error"]


# ---- health, docs, metrics ------------------------------------------------------------------------
def test_health_ready_and_docs(http: httpx.Client) -> None:
    assert http.get("/healthz").json() == {"status": "ok"}
    assert http.get("/readyz").status_code == 200
    assert "swagger" in http.get("/docs").text.lower()
    spec = http.get("/openapi.json").json()
    for path in ("/api/ask", "/api/search", "/api/passages/{chunk_id}", "/api/sessions/{session_id}",
                 "/api/feedback", "/v1/chat/completions", "/v1/models", "/healthz", "/readyz", "/metrics"):
        assert path in spec["paths"], path
    assert spec["components"]["schemas"]["AskRequest"]["examples"][0]["question"]
    assert "框架选型助手" in http.get("/").text  # the Gradio UI is on the same port


def test_metrics_after_requests(http: httpx.Client) -> None:
    http.post("/api/search", json={"query": "混合精度", "k": 2})
    http.post("/api/ask", json={"question": OUT_OF_SCOPE_ZH})
    with http.stream("POST", "/api/ask", json={"question": OUT_OF_SCOPE_EN, "stream": True}) as r:
        assert [k for k, _ in sse_events(r)] == ["sources", "token", "citations", "done"]  # refusal: one token
    text = http.get("/metrics").text
    ttft = [line for line in text.splitlines() if line.startswith("assistant_time_to_first_token_seconds_count")]
    assert ttft and float(ttft[0].split()[-1]) >= 2
    assert 'assistant_http_requests_total{method="POST",route="/api/search",status="200"}' in text
    assert 'route="/api/ask"' in text
    assert "assistant_http_request_seconds_bucket" in text
    assert "assistant_time_to_first_token_seconds_bucket" in text
    assert "assistant_time_to_sources_seconds_count" in text
    assert "assistant_generation_queue_waiting 0.0" in text
    assert "assistant_generation_queue_wait_seconds_total" in text


# ---- search and passages --------------------------------------------------------------------------
def test_search_ranks_passages_and_passage_route(http: httpx.Client) -> None:
    r = http.post("/api/search", json={"query": "ZeRO optimizer state partitioning", "k": 4})
    assert r.status_code == 200, r.text
    res = r.json()["results"]
    assert [x["rank"] for x in res] == [1, 2, 3, 4]
    assert [x["score"] for x in res] == sorted((x["score"] for x in res), reverse=True)
    assert any("deepspeed" in x["source"].lower() for x in res)
    top = res[0]
    p = http.get(f"/api/passages/{top['chunk_id']}")
    assert p.status_code == 200
    body = p.json()
    assert body["id"] == top["chunk_id"] and body["text"] == top["text"]
    assert body["heading_path"] == top["heading_path"] and body["lines"] == top["lines"]
    assert body["lines"][0] <= body["lines"][1] and body["source"] and body["title"]


def test_search_filters(http: httpx.Client) -> None:
    r = http.post("/api/search", json={"query": "mixed precision", "k": 5, "filters": {"language": "zh"}})
    assert r.status_code == 200
    assert {x["language"] for x in r.json()["results"]} == {"zh"}
    r = http.post("/api/search", json={"query": "x", "filters": {"framework": ["NoSuchFramework"]}})
    assert r.status_code == 422 and error_of(r)["code"] == "bad_filter"


# ---- errors ---------------------------------------------------------------------------------------
def test_malformed_bodies_get_reasons(http: httpx.Client) -> None:
    r = http.post("/api/ask", content=b"{not json", headers={"content-type": "application/json"})
    assert r.status_code == 400 and error_of(r)["code"] == "bad_json"
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
    r = http.post("/api/ask", content=chunked, headers={"content-type": "application/json"})
    assert r.status_code == 413 and error_of(r)["code"] == "body_too_large"
    r = http.post("/api/search", json={"query": "ZeRO", "k": 0})
    assert r.status_code == 422 and "k" in error_of(r)["message"]
    r = http.post("/api/search", json={"query": "ZeRO", "k": 51})
    assert r.status_code == 422
    r = http.post("/api/feedback", json={"session_id": "a", "message_id": "b", "rating": "meh"})
    assert r.status_code == 422 and "rating" in error_of(r)["message"]
    r = http.post("/api/feedback", json={"session_id": "0" * 32, "message_id": "1" * 32, "rating": "up"},
                  headers={"accept-language": "zh-CN,zh;q=0.9"})
    assert r.status_code == 404 and error_of(r)["message"] == "该会话中没有这条消息。"
    r = http.post("/v1/chat/completions", json={"model": "fast", "messages": []})
    assert r.status_code == 422 and "messages" in error_of(r)["message"]
    r = http.post("/v1/chat/completions", json={"messages": [{"role": "system", "content": "hi"}]})
    assert r.status_code == 422 and error_of(r)["code"] == "no_user_message"


def test_advise_route_ranks_and_cites(http: httpx.Client) -> None:
    r = http.post("/api/advise", json={"text": "我们需要国产化，硬件是昇腾 NPU，做中文 NLP", "lang": "zh"}, timeout=300)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["ranking"][0]["name"] == "PaddlePaddle"
    numbers = {c["n"] for c in body["citations"]}
    for row in body["table"]["rows"]:
        for cell in row["cells"].values():
            assert cell["citations"] and set(cell["citations"]) <= numbers
    bad = http.post("/api/advise", json={})
    assert bad.status_code == 422 and error_of(bad)["code"] == "empty_scenario"
    bad = http.post("/api/advise", json={"hardware": "quantum"})
    assert bad.status_code == 422


def test_unknown_ids_are_404(http: httpx.Client) -> None:
    for r in (http.get("/api/sessions/no-such-session"), http.delete("/api/sessions/no-such-session"),
              http.get("/api/passages/no-such-chunk"), http.get("/api/no-such-route"), http.get("/v1/nothing")):
        assert r.status_code == 404 and error_of(r)["code"] == "not_found"
    r = http.get("/api/sessions/nope", headers={"accept-language": "zh"})
    assert error_of(r)["message"].startswith("未找到该会话")


# ---- answers --------------------------------------------------------------------------------------
def test_ask_json_sessions_and_feedback(http: httpx.Client) -> None:
    r = http.post("/api/ask", json={"question": OUT_OF_SCOPE_ZH})
    assert r.status_code == 200, r.text
    ans = r.json()
    assert set(ans) == {"answer", "citations", "refused", "language", "session_id", "message_id", "timings", "usage"}
    assert ans["refused"] is True and ans["language"] == "zh" and ans["answer"]
    sid, mid = ans["session_id"], ans["message_id"]
    r = http.post("/api/ask", json={"question": OUT_OF_SCOPE_EN, "session_id": sid})
    assert r.json()["session_id"] == sid and r.json()["language"] == "en"
    assert http.post("/api/feedback", json={"session_id": sid, "message_id": mid, "rating": "down",
                                            "comment": "not about frameworks"}).json() == {"ok": True}
    sess = http.get(f"/api/sessions/{sid}").json()
    assert [m["role"] for m in sess["messages"]] == ["user", "assistant", "user", "assistant"]
    assert sess["feedback"][0]["rating"] == "down" and sess["feedback"][0]["message_id"] == mid
    assert http.delete(f"/api/sessions/{sid}").json() == {"deleted": sid}
    assert http.get(f"/api/sessions/{sid}").status_code == 404


@pytest.mark.slow
def test_ask_stream_event_order_and_search_not_blocked(http: httpx.Client) -> None:
    kinds: list[str] = []
    data: dict[str, object] = {}
    with http.stream("POST", "/api/ask", json={"question": IN_SCOPE_ZH, "stream": True}) as r:
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/event-stream")
        for kind, payload in sse_events(r):
            kinds.append(kind)
            data.setdefault(kind, payload)
            data[kind + "_last"] = payload
            if kind == "token" and kinds.count("token") == 1:
                # the model is busy generating this answer: search and health must still answer now
                with httpx.Client(base_url=str(http.base_url), timeout=60) as other:
                    t0 = time.perf_counter()
                    s = other.post("/api/search", json={"query": "张量并行", "k": 3})
                    assert s.status_code == 200 and len(s.json()["results"]) == 3
                    assert other.get("/healthz").status_code == 200
                    data["search_s"] = time.perf_counter() - t0
    assert "error" not in kinds, data.get("error")
    assert kinds[0] == "sources" and kinds[-2:] == ["citations", "done"]
    assert set(kinds[1:-2]) == {"token"} and len(kinds) > 4  # streamed in pieces, before the checks
    sources = data["sources"]
    assert isinstance(sources, list) and [s["n"] for s in sources] == list(range(1, len(sources) + 1))
    assert all(s["chunk_id"] and s["text"] and s["lines"] for s in sources)
    done = data["done"]
    assert isinstance(done, dict) and done["language"] == "zh" and done["session_id"] and done["message_id"]
    assert {"retrieval_ms", "ttft_ms", "total_ms"} <= set(done["timings"])
    cited = data["citations"]
    assert isinstance(cited, list) and cited == done["citations"]
    assert {c["n"] for c in cited} <= {s["n"] for s in sources}
    assert http.get(f"/api/sessions/{done['session_id']}").json()["messages"][-1]["id"] == done["message_id"]


# ---- OpenAI-compatible ----------------------------------------------------------------------------
def test_openai_client_models_and_refusal_stream(server: ServerProcess) -> None:
    from openai import OpenAI

    client = OpenAI(base_url=server.base + "/v1", api_key="local-no-key", timeout=600)
    assert [m.id for m in client.models.list().data] == ["fast"]
    chunks = list(client.chat.completions.create(model="fast", stream=True, messages=[
        {"role": "system", "content": "ignored"}, {"role": "user", "content": OUT_OF_SCOPE_EN}]))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert "documents" in text.lower() or "sorry" in text.lower(), text
    last = chunks[-1]
    assert last.choices[0].finish_reason == "stop"
    assert last.model_extra["citations"] == [] and last.model_extra["refused"] is True
    assert last.model_extra["session_id"]


@pytest.mark.slow
def test_openai_client_non_stream_with_citations(server: ServerProcess) -> None:
    from openai import OpenAI

    client = OpenAI(base_url=server.base + "/v1", api_key="local-no-key", timeout=600)
    resp = client.chat.completions.create(model="fast", messages=[{"role": "user", "content": IN_SCOPE_EN}])
    content = resp.choices[0].message.content or ""
    extra = resp.model_extra
    sid = extra["session_id"]  # issued by the server; a follow-up sends it back as extra_body={"session_id": sid}
    assert re.fullmatch(r"[0-9a-f]{32}", sid) and resp.usage is not None and resp.usage.completion_tokens > 0
    for c in extra["citations"]:  # every structured citation is also a footnote in the text
        assert f"[{c['n']}] {c['title']} - {c['source']}:{c['lines'][0]}-{c['lines'][1]}" in content
    assert content.strip()
    # a follow-up in the same session is stored after the first turn
    with httpx.Client(base_url=server.base) as http:
        msgs = http.get(f"/api/sessions/{sid}").json()["messages"]
    assert [m["role"] for m in msgs] == ["user", "assistant"]


@pytest.mark.slow
def test_langchain_chat_openai_round_trip(server: ServerProcess) -> None:
    from langchain_openai import ChatOpenAI

    llm = ChatOpenAI(base_url=server.base + "/v1", api_key="any-string", model="fast", timeout=600, max_retries=0)
    msg = llm.invoke("飞桨适合什么场景？")
    assert isinstance(msg.content, str) and msg.content.strip()
    pieces = [c.content for c in llm.stream(OUT_OF_SCOPE_ZH)]
    assert "".join(str(p) for p in pieces).strip()


# ---- persistence ----------------------------------------------------------------------------------
@pytest.mark.slow
def test_sessions_and_feedback_survive_restart(server: ServerProcess) -> None:
    with httpx.Client(base_url=server.base, timeout=120) as http:
        ans = http.post("/api/ask", json={"question": OUT_OF_SCOPE_ZH}).json()
        sid, mid = ans["session_id"], ans["message_id"]
        assert http.post("/api/feedback", json={"session_id": sid, "message_id": mid, "rating": "up"}).status_code == 200
    server.stop()
    server.start()
    with httpx.Client(base_url=server.base, timeout=120) as http:
        sess = http.get(f"/api/sessions/{sid}").json()
    assert [m["id"] for m in sess["messages"]][-1] == mid
    assert sess["feedback"] == [{**sess["feedback"][0], "message_id": mid, "rating": "up"}]


@pytest.mark.slow
def test_queue_full_is_a_readable_503_and_an_error_event(corpus_index: Path, tmp_path: Path) -> None:
    srv = ServerProcess(corpus_index, tmp_path, tmp_path / "server.log", ASSISTANT_MAX_QUEUE="0")
    srv.start()
    try:
        with httpx.Client(base_url=srv.base, timeout=120) as http:
            r = http.post("/api/ask", json={"question": IN_SCOPE_ZH})
            assert r.status_code == 503 and error_of(r) == {"code": "queue_full", "message": "助手正忙（排队已满），请稍后重试。"}
            with http.stream("POST", "/api/ask", json={"question": IN_SCOPE_EN, "stream": True}) as s:
                events = list(sse_events(s))
            assert [k for k, _ in events] == ["sources", "error"]
            assert events[1][1] == {"code": "queue_full",
                                    "message": "The assistant is busy (queue full); please retry in a moment."}
            assert http.post("/api/search", json={"query": "ZeRO"}).status_code == 200  # search needs no queue
    finally:
        srv.stop()
