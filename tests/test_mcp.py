"""The MCP server (issue 34): `assistant mcp` over stdio and /mcp of a real `assistant serve`, each driven by the
official SDK's client (mcp.Client): the tools with their schemas, answers whose citations resolve to passages
(tool and passage:// resource), the article and the prompt, bad input as tool errors with a reason (the server
keeps serving), the API keys over HTTP, the rate limit, and a cancelled `ask` giving its queue place back.

The subprocess tests run the packaged 0.5B model ("fast"); the in-process test drives the same server object
through the SDK's in-memory transport with the plumbing model (assistant/llm/scripted.py)."""
from __future__ import annotations

import json
import os
import re
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TextIO

import anyio
import httpx
import httpx2
import pytest
from httpkit import ServerProcess
from mcp import Client, MCPError, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

from ui.mcp_server import ARTICLE_URI, Edge, build_server

REPO = Path(__file__).resolve().parents[1]
KEY = "km-" + "5" * 29
TOOLS = {"search", "ask", "advise", "get_passage", "list_documents"}
QUESTION_ZH = "DeepSpeed ZeRO 的第二阶段切分什么？"
LONG_QUESTION = ("Explain in detail, point by point, how PyTorch, TensorFlow, DeepSpeed and Megatron-LM each support "
                 "distributed training, mixed precision and memory optimisation.")


def text_of(result) -> str:
    return "\n".join(c.text for c in result.content if c.type == "text")


def error_text(result) -> str:
    assert result.is_error, result
    text = text_of(result)
    assert "Traceback" not in text and "File \"" not in text, text
    return text


async def check_tools_listed(client: Client) -> None:
    tools = {t.name: t for t in (await client.list_tools()).tools}
    assert set(tools) == TOOLS
    for t in tools.values():
        assert t.description and t.input_schema["type"] == "object" and t.output_schema, t.name
    assert tools["search"].input_schema["required"] == ["query"]
    assert tools["ask"].input_schema["required"] == ["question"]
    assert tools["search"].annotations.read_only_hint is True
    assert {"answer", "citations", "refused", "session_id"} <= set(tools["ask"].output_schema["properties"])


async def check_citations_resolve(client: Client, out: dict) -> None:
    """Every citation of an answer names a passage that get_passage and passage:// both return, with its text."""
    assert out["citations"], out
    for c in out["citations"]:
        assert c["text"] and c["source"] and len(c["lines"]) == 2 and c["uri"] == f"passage://{c['chunk_id']}"
        assert f"[{c['n']}]" in out["answer"]
        got = await client.call_tool("get_passage", {"chunk_id": c["chunk_id"]})
        assert not got.is_error and got.structured_content["text"] == c["text"]
        assert got.structured_content["lines"] == c["lines"] and got.structured_content["url"] == c["url"]
        res = await client.read_resource(c["uri"])
        assert json.loads(res.contents[0].text)["text"] == c["text"]


# ---- in process: bad input, through the SDK's in-memory transport --------------------------------------------
@pytest.fixture(scope="module")
def plumbing(scripted_service) -> Iterator[object]:
    svc = scripted_service(max_question_chars=300)
    yield svc
    svc.close()


async def test_bad_input_is_a_tool_error_with_a_reason(plumbing) -> None:
    async with Client(build_server(Edge(plumbing))) as client:
        await check_tools_listed(client)
        cases = [
            ("ask", {"question": "   "}, "[empty_input]"),
            ("ask", {"question": "为什么" * 200}, "输入过长"),  # the caller's language: Chinese
            ("ask", {"question": "x" * 400}, "too long"),
            ("ask", {"question": "What is ZeRO?", "session_id": "not-a-session"}, "session_id"),
            ("ask", {"question": "What is ZeRO?", "session_id": "a" * 32}, "[not_found]"),
            ("search", {"query": "ZeRO", "filters": {"framework": ["Caffe"]}}, "[bad_filter]"),
            ("search", {"query": "ZeRO", "filters": {"colour": "red"}}, "colour"),
            ("search", {"query": "ZeRO", "k": 0}, "k"),
            ("search", {}, "query"),
            ("get_passage", {"chunk_id": "0" * 16}, "[not_found]"),
            ("advise", {"situation": ""}, "[empty_scenario]"),
            ("list_documents", {"kind": "secret"}, "kind"),
            ("no_such_tool", {}, "no_such_tool"),
        ]
        for name, args, reason in cases:
            text = error_text(await client.call_tool(name, args))
            assert reason in text, (name, args, text)
        with pytest.raises(MCPError):
            await client.read_resource("passage://" + "0" * 16)
        with pytest.raises(MCPError, match="too long"):
            await client.get_prompt("choose-a-framework", {"language": "en", "situation": "x" * 5000})
        prompt = await client.get_prompt("choose-a-framework", {"situation": "五人团队，熟悉 PyTorch"})
        assert "我的团队熟悉什么" in prompt.messages[0].content.text and "五人团队" in prompt.messages[0].content.text
        ok = await client.call_tool("search", {"query": "ZeRO stage 2", "k": 2})  # still serving
        assert not ok.is_error and len(ok.structured_content["results"]) == 2
        answer = await client.call_tool("ask", {"question": "What does DeepSpeed ZeRO partition?"})
        assert not answer.is_error, text_of(answer)
        await check_citations_resolve(client, answer.structured_content)


def test_the_http_transport_is_behind_the_apps_access(scripted_service) -> None:
    """/mcp of the real app (ui.server.create_app) answers only a right key and an allowed Host, like /api."""
    from fastapi.testclient import TestClient

    from ui.server import create_app

    svc = scripted_service(api_keys=KEY)
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}
    accept = {"Accept": "application/json, text/event-stream"}
    with TestClient(create_app(svc, with_ui=False, load=False), base_url="http://127.0.0.1") as http:
        for auth in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": KEY}):
            r = http.post("/mcp", json=init, headers={**accept, **auth})
            assert r.status_code == 401 and r.json()["error"]["code"] == "unauthorized", r.text
        r = http.post("/mcp", json=init, headers={**accept, "Authorization": f"Bearer {KEY}", "Host": "evil.example"})
        assert r.status_code == 421
        r = http.post("/mcp", content="x" * 100_000, headers={**accept, "Authorization": f"Bearer {KEY}",
                                                               "Content-Type": "application/json"})
        assert r.status_code == 413
        r = http.post("/mcp", json=init, headers={**accept, "Authorization": f"Bearer {KEY}"})
        assert r.status_code == 200 and r.headers.get("mcp-session-id"), r.text
        assert "framework-advisor" in r.text and "/mcp" not in http.get(
            "/openapi.json", headers={"Authorization": f"Bearer {KEY}"}).json()["paths"]


# ---- stdio: `assistant mcp` as a real subprocess with the packaged 0.5B model ------------------------------
@contextmanager
def server_log(path: Path) -> Iterator[TextIO]:
    """Where a stdio server's stderr goes; its end is printed when the test fails, so CI shows it."""
    try:
        with path.open("w") as f:
            yield f
    except BaseException:
        print(f"--- {path}:\n{path.read_text()[-4000:]}")
        raise


def stdio_params(corpus_index: Path, tmp_path: Path, args: list[str], **env: str) -> StdioServerParameters:
    env = {**os.environ, "ASSISTANT_INDEX_DIR": str(corpus_index), "ASSISTANT_STATE_DIR": str(tmp_path / "state"),
           "ASSISTANT_MODEL": "fast", **env}
    return StdioServerParameters(command=sys.executable, args=args, env=env, cwd=str(REPO))


@pytest.mark.slow
async def test_stdio_replies_when_the_model_load_overlaps_the_transports_start(corpus_index: Path,
                                                                                tmp_path: Path) -> None:
    """The transport takes stdin/stdout before the model starts loading: llama.cpp's quiet load points fd 1 at
    /dev/null for a moment, and a transport started in that moment kept /dev/null as its wire, so not even
    `initialize` was answered. tests/quietloadserver.py starts the transport in that moment whenever the load is
    already running; the server must still answer, and `ask` (which waits for the load) too."""
    params = stdio_params(corpus_index, tmp_path, [str(REPO / "tests" / "quietloadserver.py")],
                          ASSISTANT_MAX_ANSWER_TOKENS="24", PYTHONPATH=f"{REPO}:{REPO / 'tests'}")
    with server_log(tmp_path / "stderr.log") as errlog:
        async with Client(stdio_client(params, errlog=errlog), read_timeout_seconds=60) as client:
            await check_tools_listed(client)
            answer = await client.call_tool("ask", {"question": "What does DeepSpeed ZeRO partition?"})
            assert not answer.is_error and answer.structured_content["answer"], text_of(answer)
    text = (tmp_path / "stderr.log").read_text()
    assert text.index("stdio transport up") < text.index("model and index loaded"), text


@pytest.mark.slow
async def test_stdio_server_serves_every_tool(corpus_index: Path, tmp_path: Path) -> None:
    params = stdio_params(corpus_index, tmp_path, ["-m", "assistant", "mcp"], ASSISTANT_MAX_ANSWER_TOKENS="120",
                          ASSISTANT_RATE_LIMIT_PER_MINUTE="12")
    progress: list[tuple[float, str | None]] = []

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append((value, message))

    with server_log(tmp_path / "stderr.log") as errlog:
        async with Client(stdio_client(params, errlog=errlog), read_timeout_seconds=300) as client:
            await check_tools_listed(client)
            found = await client.call_tool("search", {"query": "ZeRO 分区", "k": 3, "filters": {"language": "zh"}})
            hits = found.structured_content["results"]
            assert len(hits) == 3 and all(h["language"] == "zh" for h in hits) and "1." in text_of(found)

            t0 = time.perf_counter()
            answer = await client.call_tool("ask", {"question": QUESTION_ZH}, progress_callback=on_progress)
            ask_s = time.perf_counter() - t0
            out = answer.structured_content
            assert not answer.is_error and out["language"] == "zh" and not out["refused"], text_of(answer)
            assert "来源" in text_of(answer) and out["session_id"] in text_of(answer)
            await check_citations_resolve(client, out)
            values = [p for p, _ in progress]
            assert len(values) >= 2 and values == sorted(set(values))  # increasing, as the protocol wants
            written = [m for _, m in progress if m and "…" not in m]
            assert written, progress  # the text so far, while the model writes

            follow = await client.call_tool("ask", {"question": "那第三阶段呢？", "session_id": out["session_id"]})
            assert not follow.is_error and follow.structured_content["session_id"] == out["session_id"]

            advice = await client.call_tool("advise", {"situation": "5 person startup, knows PyTorch, a few GPUs, "
                                                       "fine-tuning a 7B model"})
            a = advice.structured_content
            assert not advice.is_error and a["language"] == "en" and len(a["ranking"]) >= 3
            assert "PyTorch" in a["ranking"][0]["name"] and a["table"]["rows"] and a["trial_plan"]["steps"]
            assert a["citations"] and "Trial plan" in text_of(advice)

            docs = (await client.call_tool("list_documents", {"kind": "corpus"})).structured_content["documents"]
            assert any("article" in d["source"] for d in docs) and all(d["kind"] == "corpus" for d in docs)

            templates = (await client.list_resource_templates()).resource_templates
            assert [t.uri_template for t in templates] == ["passage://{chunk_id}"]
            article = (await client.read_resource(ARTICLE_URI)).contents[0].text
            assert "框架选型" in article and "我的团队熟悉什么" in article
            prompt = await client.get_prompt("choose-a-framework", {"language": "en"})
            body = prompt.messages[0].content.text
            assert "What does my team already know" in body and "advise" in body

            bad = await client.call_tool("ask", {"question": ""})  # a malformed call, then the server goes on
            assert "[empty_input]" in error_text(bad)
            refused = None
            for _ in range(12):  # 12 a minute: what is left of them, then the refusal
                r = await client.call_tool("search", {"query": "JAX pmap"})
                if r.is_error:
                    refused = error_text(r)
                    break
            assert refused is not None and "[rate_limited]" in refused
    print(f"\nstdio ask (zh, 0.5B, 120 tokens max): {ask_s:.1f} s, {len(progress)} progress notifications")


# ---- streamable HTTP: /mcp of a real `assistant serve` with keys ------------------------------------------
@pytest.fixture(scope="module")
def keyed_server(corpus_index: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    state = tmp_path_factory.mktemp("mcp-serve")
    srv = ServerProcess(corpus_index, state, state / "server.log", ASSISTANT_MODEL="fast", ASSISTANT_API_KEYS=KEY,
                        ASSISTANT_MAX_QUEUE="1", ASSISTANT_MAX_ANSWER_TOKENS="400")
    srv.start()
    yield srv
    srv.stop()


def http_client(server: ServerProcess, key: str | None) -> Client:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    hc = httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30, read=300))
    return Client(streamable_http_client(server.base + "/mcp", http_client=hc))


@pytest.mark.slow
async def test_http_needs_a_key_and_serves_the_tools(keyed_server: ServerProcess) -> None:
    url = keyed_server.base + "/mcp"
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}
    headers = {"Accept": "application/json, text/event-stream"}
    for auth in ({}, {"Authorization": "Bearer wrong-key"}, {"Authorization": KEY}):
        r = httpx.post(url, json=init, headers={**headers, **auth})
        assert r.status_code == 401 and r.json()["error"]["code"] == "unauthorized", r.text
    r = httpx.post(url, json=init, headers={**headers, "Host": "evil.example"})
    assert r.status_code == 421
    for key in (None, "wrong-key"):
        with pytest.raises(Exception):  # noqa: B017 - the SDK reports the 401 its own way; the point is no session
            async with http_client(keyed_server, key) as client:
                await client.list_tools()

    async with http_client(keyed_server, KEY) as client:
        await check_tools_listed(client)
        found = await client.call_tool("search", {"query": "pipeline parallelism", "k": 2})
        assert not found.is_error and len(found.structured_content["results"]) == 2
        answer = await client.call_tool("ask", {"question": "What does DeepSpeed ZeRO partition?"})
        assert not answer.is_error, text_of(answer)
        await check_citations_resolve(client, answer.structured_content)
        bad = await client.call_tool("ask", {"question": "What?", "filters": {"framework": ["Caffe"]}})
        assert "[bad_filter]" in error_text(bad)
        bad = await client.call_tool("get_passage", {"chunk_id": 5})
        assert bad.is_error
        still = await client.call_tool("list_documents", {})
        assert not still.is_error and still.structured_content["documents"]
    # the session belongs to the key: another client with the same key continues it; /api sees it too
    sid = answer.structured_content["session_id"]
    r = httpx.get(keyed_server.base + f"/api/sessions/{sid}", headers={"Authorization": f"Bearer {KEY}"})
    assert r.status_code == 200 and len(r.json()["messages"]) == 2


def queue_waiting(server: ServerProcess) -> float:
    body = httpx.get(server.base + "/metrics", headers={"Authorization": f"Bearer {KEY}"}).text
    return float(re.search(r"^assistant_generation_queue_waiting (\S+)$", body, re.MULTILINE).group(1))


async def wait_until(condition, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        await anyio.sleep(0.1)


@pytest.mark.slow
async def test_cancelling_an_ask_frees_its_queue_place(keyed_server: ServerProcess) -> None:
    """With one place in line (ASSISTANT_MAX_QUEUE=1): A writes, B waits, C is refused (queue full); B cancelled
    frees the place at once; A cancelled stops the model, so a new question is answered."""
    writing = anyio.Event()
    results: dict[str, object] = {}

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        if message and "…" not in message:
            writing.set()

    async def call(name: str, scope: anyio.CancelScope, **kw) -> None:
        with scope:
            async with http_client(keyed_server, KEY) as client:
                results[name] = await client.call_tool("ask", {"question": LONG_QUESTION}, **kw)

    scope_a, scope_b = anyio.CancelScope(), anyio.CancelScope()
    async with anyio.create_task_group() as tg:
        tg.start_soon(lambda: call("A", scope_a, progress_callback=on_progress))
        with anyio.fail_after(120):
            await writing.wait()  # A holds the model and is writing
        tg.start_soon(lambda: call("B", scope_b))
        await wait_until(lambda: queue_waiting(keyed_server) == 1)
        async with http_client(keyed_server, KEY) as client:
            full = await client.call_tool("ask", {"question": "What is JAX?"})
        assert "[queue_full]" in error_text(full)
        t0 = time.perf_counter()
        scope_b.cancel()
        await wait_until(lambda: queue_waiting(keyed_server) == 0, timeout=10)
        freed_s = time.perf_counter() - t0
        assert "B" not in results
        scope_a.cancel()
    t0 = time.perf_counter()
    async with http_client(keyed_server, KEY) as client:
        after = await client.call_tool("search", {"query": "JAX"})
        assert not after.is_error
        answer = await client.call_tool("ask", {"question": "What is JAX?"})
    out = answer.structured_content
    assert not answer.is_error and out["answer"], text_of(answer)
    assert "A" not in results and "B" not in results
    auth = {"Authorization": f"Bearer {KEY}"}
    listed = httpx.get(keyed_server.base + "/api/sessions", params={"q": "point by point"}, headers=auth).json()
    assert len(listed["sessions"]) == 1  # A's, stopped mid-answer; B never reached the model and kept no turn
    a_turn = httpx.get(keyed_server.base + f"/api/sessions/{listed['sessions'][0]['id']}", headers=auth).json()
    assert a_turn["messages"][-1]["role"] == "assistant" and a_turn["messages"][-1]["stopped"] is True
    wait_s = out["queue"]["wait_ms"] / 1000
    assert wait_s < 20, out["queue"]  # A gave the model up at its next token, not after its 400
    print(f"\nqueue place freed {freed_s * 1000:.0f} ms after the cancel; the next answer waited {wait_s:.1f} s for "
          f"the model and took {time.perf_counter() - t0:.1f} s")
