"""The LangChain edge (assistant/integrations/langchain.py) over the real corpus index: LangChain's own standard
retriever tests (langchain-tests), what the Documents carry and how filters narrow them, the runnable's invoke,
stream and LCEL composition (ScriptedChatModel for the plumbing; the real 0.5B model for one cited answer), the
`advise` tool, and that the core never imports LangChain."""
from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from langchain_core.documents import Document
from langchain_core.messages import AIMessage, AIMessageChunk, ToolMessage
from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.runnables import RunnableLambda
from langchain_tests.integration_tests import RetrieversIntegrationTests

from assistant.errors import UserError
from assistant.integrations.langchain import AssistantRetriever, AssistantRunnable, advise_tool
from assistant.llm.scripted import ScriptedChatModel
from assistant.service import AssistantService

REPO = Path(__file__).resolve().parents[1]
_SOURCE = re.compile(r"^\[1\] (.+?[.。!?！？])", re.MULTILINE)


def _quote_first_source(messages: list[dict[str, str]]) -> str:
    """Answers with the first sentence of source [1], cited: a supported citation without a model."""
    m = _SOURCE.search(messages[-1]["content"])
    return f"{m.group(1)}[1]" if m else "No sources."


@pytest.fixture(scope="module")
def scripted(fast_settings) -> AssistantService:
    """The real service (index, embedder, citation check, sessions) with a scripted model: plumbing only."""
    # the script quotes the user turn's first source: the retrieval-only prompt, without the pinned prefix
    svc = AssistantService(fast_settings.model_copy(update={"pinned_context": False}),
                           chat_model=ScriptedChatModel(_quote_first_source))
    yield svc
    svc.close()


# ---- LangChain's standard retriever tests ----------------------------------------------------------
class TestAssistantRetrieverStandard(RetrieversIntegrationTests):
    @pytest.fixture(autouse=True)
    def _service(self, scripted: AssistantService) -> None:
        self.service = scripted  # read by retriever_constructor_params, which the suite calls itself

    @property
    def retriever_constructor(self) -> type[AssistantRetriever]:
        return AssistantRetriever

    @property
    def retriever_constructor_params(self) -> dict:
        return {"service": self.service}

    @property
    def retriever_query_example(self) -> str:
        return "What does DeepSpeed ZeRO partition?"


# ---- the retriever's documents -------------------------------------------------------------------
def test_documents_carry_the_passage_and_its_place(scripted: AssistantService) -> None:
    query = "张量并行是什么"
    docs = AssistantRetriever(service=scripted, k=4).invoke(query)
    hits = scripted.search(query, k=4)
    assert [d.id for d in docs] == [h.chunk.id for h in hits] and len(docs) == 4
    for d, h in zip(docs, hits, strict=True):
        assert isinstance(d, Document) and d.page_content == h.chunk.text
        m = d.metadata
        assert m["chunk_id"] == h.chunk.id and m["path"] == h.chunk.source and m["source"]
        assert m["heading_path"] == list(h.chunk.heading_path) and m["heading_path"]
        start, end = m["lines"]
        assert 1 <= start <= end and (start, end) == h.chunk.lines
        assert m["language"] in ("zh", "en") and m["frameworks"] == list(h.chunk.frameworks)
        assert m["score"] == pytest.approx(h.score, abs=1e-6) and 0 < m["dense"] <= 1 and m["keyword"] >= 0
        assert "text" not in m
    assert [d.metadata["score"] for d in docs] == sorted((d.metadata["score"] for d in docs), reverse=True)


def test_filters_narrow_the_documents(scripted: AssistantService) -> None:
    r = AssistantRetriever(service=scripted, k=5, filters={"language": "en"})
    assert {d.metadata["language"] for d in r.invoke("分布式训练")} == {"en"}
    by_call = r.invoke("分布式训练", filters={"framework": ["deepspeed"], "language": "zh"})  # aliases resolve
    assert by_call and all("DeepSpeed" in d.metadata["frameworks"] and d.metadata["language"] == "zh" for d in by_call)
    assert all("article" in d.metadata["path"] for d in r.invoke("framework", filters={"source": "article"}))
    with pytest.raises(UserError) as err:
        r.invoke("分布式训练", filters={"framework": ["NoSuchFramework"]})
    assert err.value.code == "bad_filter" and "NoSuchFramework" in err.value.message("zh")
    with pytest.raises(UserError):
        r.invoke("   ")


async def test_retriever_async_and_batch(scripted: AssistantService) -> None:
    r = AssistantRetriever(service=scripted, k=2)
    docs = await r.ainvoke("pipeline parallelism")
    assert [d.id for d in docs] == [d.id for d in r.invoke("pipeline parallelism")]
    assert [len(b) for b in r.batch(["混合精度训练", "JAX pmap"])] == [2, 2]


def test_no_arguments_open_the_configured_index(fast_settings, monkeypatch: pytest.MonkeyPatch,
                                                tmp_path: Path) -> None:
    monkeypatch.setenv("ASSISTANT_INDEX_DIR", str(fast_settings.index_dir))
    monkeypatch.setenv("ASSISTANT_STATE_DIR", str(tmp_path))
    monkeypatch.chdir(tmp_path)  # no assistant.toml here
    docs = AssistantRetriever().invoke("What is ZeRO?")
    assert len(docs) == 5 and all(d.metadata["chunk_id"] for d in docs)
    monkeypatch.setenv("ASSISTANT_INDEX_DIR", str(tmp_path / "missing"))
    with pytest.raises(UserError):  # the "build the index first" message, not a stack trace from Chroma
        AssistantRetriever().invoke("What is ZeRO?")


def test_retriever_in_a_chain(scripted: AssistantService) -> None:
    retriever = AssistantRetriever(service=scripted, k=3)
    chain = retriever | RunnableLambda(lambda docs: "\n".join(f"[{d.metadata['chunk_id']}]" for d in docs))
    assert chain.invoke("DeepSpeed ZeRO").count("[") == 3


# ---- the runnable ------------------------------------------------------------------------------------
def test_invoke_returns_the_checked_answer_with_citations(scripted: AssistantService) -> None:
    msg = AssistantRunnable(scripted).invoke("What does DeepSpeed ZeRO partition?")
    assert isinstance(msg, AIMessage) and msg.content.endswith("[1]")
    meta = msg.response_metadata
    assert meta["answer"] == msg.content and not meta["refused"] and meta["language"] == "en"
    assert meta["citations"] and meta["citations"][0]["n"] == 1 and meta["citations"][0]["supported"]
    assert scripted.passage(meta["citations"][0]["chunk_id"]) is not None
    assert msg.usage_metadata and msg.usage_metadata["input_tokens"] > 0
    assert scripted.get_session(meta["session_id"]) is not None


def test_invoke_with_a_dict_keeps_the_session_and_the_filters(scripted: AssistantService) -> None:
    run = AssistantRunnable(scripted)
    first = run.invoke({"question": "PyTorch 的 FSDP 是什么？", "filters": {"language": "zh"}})
    sid = first.response_metadata["session_id"]
    assert all(c["chunk_id"] and scripted.passage(c["chunk_id"]).language == "zh"
               for c in first.response_metadata["citations"])
    second = run.invoke({"question": "它支持 CPU offload 吗？", "session_id": sid})
    assert second.response_metadata["session_id"] == sid
    assert len(scripted.get_session(sid)["messages"]) == 4
    with pytest.raises(UserError) as err:
        run.invoke({"query": "missing the question"})
    assert err.value.code == "bad_input"
    with pytest.raises(UserError) as err:
        run.invoke("")
    assert err.value.code == "empty_input"


def test_out_of_domain_is_refused_without_citations(scripted: AssistantService) -> None:
    msg = AssistantRunnable(scripted).invoke("今天北京天气怎么样？")
    assert msg.response_metadata["refused"] and not msg.response_metadata["citations"]
    assert "usage_metadata" not in msg.model_fields_set or not msg.usage_metadata


def test_stream_gives_tokens_then_the_citations(scripted: AssistantService) -> None:
    chunks = list(AssistantRunnable(scripted).stream("What does DeepSpeed ZeRO partition?"))
    assert len(chunks) > 3 and all(isinstance(c, AIMessageChunk) for c in chunks)
    *tokens, last = chunks
    assert all(t.content and not t.response_metadata.get("citations") for t in tokens)
    assert last.content == "" and last.response_metadata["citations"]
    whole = sum(chunks[1:], chunks[0])
    assert whole.content == last.response_metadata["answer"]  # the scripted text passes the check unchanged
    assert whole.response_metadata["citations"] == last.response_metadata["citations"]


def test_runnable_in_lcel_chains(scripted: AssistantService) -> None:
    run = AssistantRunnable(scripted)
    prompt = ChatPromptTemplate.from_messages([("human", "{topic} 是什么？")])
    text = (prompt | run | StrOutputParser()).invoke({"topic": "张量并行"})
    assert isinstance(text, str) and text.endswith("[1]")
    to_request = RunnableLambda(lambda q: {"question": q, "filters": {"framework": ["JAX"]}})
    streamed = list((to_request | run).stream("How does pmap work?"))
    assert streamed[-1].response_metadata["citations"]
    assert all("JAX" in scripted.passage(c["chunk_id"]).frameworks for c in streamed[-1].response_metadata["citations"])
    assert (to_request | run | StrOutputParser()).invoke("How does pmap work?").endswith("[1]")


async def test_runnable_async(scripted: AssistantService) -> None:
    run = AssistantRunnable(scripted)
    msg = await run.ainvoke("What is Megatron-LM?")
    assert msg.response_metadata["citations"]
    chunks = [c async for c in (RunnableLambda(lambda q: {"question": q}) | run).astream("What is Megatron-LM?")]
    assert len(chunks) > 3 and all(c.content for c in chunks[:-1])
    assert chunks[-1].response_metadata["citations"] == msg.response_metadata["citations"]


def test_real_model_answer_carries_a_citation(service: AssistantService) -> None:
    msg = AssistantRunnable(service).invoke("PyTorch 的 FSDP 是什么？")
    meta = msg.response_metadata
    assert not meta["refused"], msg.content
    assert meta["citations"] and re.search(r"\[\d+\]", msg.content), msg.content
    assert all(service.passage(c["chunk_id"]) is not None for c in meta["citations"])


# ---- the advise tool ---------------------------------------------------------------------------------
def test_advise_tool_ranks_and_cites(scripted: AssistantService) -> None:
    tool = advise_tool(scripted)
    situation = "我们是5人初创团队，熟悉 PyTorch，要在昇腾 NPU 上预训练千亿参数的中文大模型，必须国产化。"
    assert tool.name == "advise" and "situation" in tool.args
    direct = scripted.advise(situation).to_dict()
    text = tool.invoke({"situation": situation})
    assert text.startswith(direct["summary"]) and f"1. {direct['ranking'][0]['name']}" in text and "[1]" in text
    msg = tool.invoke({"type": "tool_call", "id": "call-1", "name": "advise",
                       "args": {"situation": situation, "lang": "zh"}})  # zh: the facts resolved above serve
    assert isinstance(msg, ToolMessage) and msg.content == text and msg.artifact["language"] == "zh"
    assert msg.artifact["ranking"][0]["name"] == direct["ranking"][0]["name"]
    assert all(r["citations"] for r in msg.artifact["ranking"])


def test_advise_tool_reports_bad_input_in_the_users_language(scripted: AssistantService) -> None:
    tool = advise_tool(scripted)
    assert tool.invoke({"situation": "  ", "lang": "zh"}) == "请描述你的场景（字段或自由文本）。"
    assert tool.invoke({"situation": ""}).startswith("Describe the scenario")


# ---- the edge stays at the edge ----------------------------------------------------------------------
def test_the_core_never_imports_langchain() -> None:
    for path in (REPO / "assistant").rglob("*.py"):
        if "integrations" in path.parts:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            assert not any(n.startswith("langchain") or "integrations" in n for n in names), path
