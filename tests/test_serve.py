"""The real thing end to end: `python -m assistant serve` in a subprocess (uvicorn, the Gradio UI mounted, the
model loaded in the background) with the real 0.5B `fast` model over a real index of corpus/, spoken to over
real HTTP on a loopback port. One server for the module: readiness, one cited answer, one streamed answer.
Every other route and error shape is tested in process (test_api.py)."""
from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from httpkit import ServerProcess, sse_events


@pytest.fixture(scope="module")
def server(fast_server: ServerProcess) -> ServerProcess:
    return fast_server


@pytest.fixture()
def http(server: ServerProcess) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.base, timeout=600) as client:
        yield client


def test_ready_with_the_ui_on_the_same_port(http: httpx.Client) -> None:
    assert http.get("/healthz").json() == {"status": "ok"}
    assert http.get("/readyz").json() == {"status": "ready"}
    assert "框架选型助手" in http.get("/").text
    assert [m["id"] for m in http.get("/v1/models").json()["data"]] == ["fast"]


def test_a_cited_answer_from_the_real_model(http: httpx.Client) -> None:
    r = http.post("/api/ask", json={"question": "PyTorch 的 FSDP 是什么？"})
    assert r.status_code == 200, r.text
    ans = r.json()
    assert ans["refused"] is False and ans["language"] == "zh", ans["answer"]
    assert ans["citations"] and ans["usage"]["completion_tokens"] > 0
    for c in ans["citations"]:
        assert f"[{c['n']}]" in ans["answer"]
        assert http.get(f"/api/passages/{c['chunk_id']}").status_code == 200


def test_a_streamed_answer_from_the_real_model(http: httpx.Client) -> None:
    with http.stream("POST", "/api/ask", json={"question": "What does DeepSpeed ZeRO partition across GPUs?",
                                               "stream": True}) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        events = list(sse_events(r.iter_lines()))
    kinds = [k for k, _ in events]
    assert "error" not in kinds, events[-1]
    assert kinds[0] == "sources" and kinds[-3:] == ["status", "citations", "done"]
    assert set(kinds[1:-3]) == {"token"} and len(kinds) > 5  # streamed in pieces, before the checks
    done = events[-1][1]
    assert isinstance(done, dict) and done["language"] == "en" and done["answer"]
    assert {c["n"] for c in done["citations"]} <= {s["n"] for s in events[0][1]}  # type: ignore[union-attr]
