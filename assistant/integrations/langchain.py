"""The assistant as LangChain parts (extra `[langchain]`): a retriever, a runnable and an `advise` tool.

Each wraps an `AssistantService` (the same object the CLI, the API and the UI call) and converts its types to
LangChain's at this edge; none of them adds behaviour of its own. Given no service, each opens the configured one
(`load_settings()`: `ASSISTANT_*` environment variables, `assistant.toml`) on first use. One service can be
shared: `svc = AssistantService(); AssistantRetriever(service=svc); AssistantRunnable(svc); advise_tool(svc)`.

- `AssistantRetriever` (a `BaseRetriever`): `invoke(query, k=?, filters=?)` -> `Document`s, one per passage:
  `page_content` is the passage text, `id` its chunk id, `metadata` the API's hit fields without the text
  (`chunk_id`, `score` (fused), `dense`, `keyword`, `source` (URL, else path), `path`, `title`, `heading_path`,
  `lines` [start, end], `language`, `frameworks`). Filters have the API's shape:
  `{"framework": [...], "language": "zh"|"en", "source": "substring"}`.
- `AssistantRunnable` (a `Runnable`): input a question (str, a prompt value or messages: the last human message)
  or `{"question", "session_id"?, "filters"?}`; `invoke` -> an `AIMessage` whose content is the checked answer
  and whose `response_metadata` is the API's answer JSON (`answer`, `citations`, `refused`, `language`,
  `session_id`, `message_id`, `timings`, `usage`, `queue`), with `usage_metadata` when the model ran.
  `stream` -> `AIMessageChunk`s of the model's tokens, then one empty-content chunk carrying that metadata (so
  the chunks add up to a message with citations); `astream` yields the same chunks. The streamed tokens are
  the model's raw text: the checked `response_metadata["answer"]` may differ (unsupported sentences removed,
  near copies quoted), and the citations refer to it, as in docs/architecture.md.
- `advise_tool(service)` -> the `advise` tool: a team's situation in free text (Chinese or English) -> the
  Advisor's ranked, cited recommendation as text (the content the agent reads) and as the Advice JSON (the
  artifact of a `ToolMessage` when called with a tool call). Bad input comes back as the tool's error text in
  the situation's language.

Errors meant for users (`assistant.errors.UserError`: empty question, bad filter, no index) propagate from the
retriever and the runnable with their message; `err.message("zh")` gives the Chinese one.
"""
from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any, Literal

from langchain_core.documents import Document
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage, HumanMessage
from langchain_core.prompt_values import PromptValue
from langchain_core.retrievers import BaseRetriever
from langchain_core.runnables import Runnable, RunnableConfig
from langchain_core.runnables.config import run_in_executor
from langchain_core.tools import StructuredTool, ToolException
from pydantic import Field, PrivateAttr

from ..errors import UserError
from ..lang import detect_language
from ..service import AssistantService
from ..types import Answer, Hit

__all__ = ["AssistantRetriever", "AssistantRunnable", "advise_tool", "hit_document"]


class _ServiceRef:
    """The given service, or the configured one (environment, assistant.toml) opened on first use."""

    def __init__(self, service: AssistantService | None) -> None:
        self._service = service

    def get(self) -> AssistantService:
        if self._service is None:
            self._service = AssistantService()
        return self._service


def hit_document(hit: Hit) -> Document:
    """A retrieved passage as a LangChain Document (metadata: the API's hit fields without the text)."""
    meta = hit.to_dict()
    text = meta.pop("text")
    return Document(page_content=text, metadata=meta, id=hit.chunk.id)


class AssistantRetriever(BaseRetriever):
    """The assistant's hybrid search (dense + keyword, bilingual) as a LangChain retriever."""

    service: AssistantService | None = Field(default=None, exclude=True)
    """The service to search; None opens the configured one on first use."""
    k: int = 5
    """How many passages to return (1-50); `invoke(query, k=3)` overrides it for one call."""
    filters: dict[str, Any] | None = None
    """`{"framework": [...], "language": "zh"|"en", "source": "substring"}`; `invoke(query, filters=...)` overrides it."""

    _ref: _ServiceRef = PrivateAttr()

    def model_post_init(self, context: Any, /) -> None:
        self._ref = _ServiceRef(self.service)

    def _get_relevant_documents(self, query: str, *, run_manager: Any, k: int | None = None,
                                filters: dict[str, Any] | None = None, **_: Any) -> list[Document]:
        hits = self._ref.get().search(query, k=self.k if k is None else k,
                                      filters=self.filters if filters is None else filters)
        return [hit_document(h) for h in hits]


class AssistantRunnable(Runnable[Any, AIMessage]):
    """Questions in, checked and cited answers out (`AssistantService.ask` / `ask_stream`)."""

    name = "AssistantRunnable"

    def __init__(self, service: AssistantService | None = None, filters: dict[str, Any] | None = None) -> None:
        """`filters`: applied to every question that does not bring its own."""
        self._ref = _ServiceRef(service)
        self.filters = filters

    @property
    def service(self) -> AssistantService:
        return self._ref.get()

    def invoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> AIMessage:
        return self._call_with_config(self._ask, input, config, **kwargs)

    def stream(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any | None) -> Iterator[AIMessage]:
        yield from self._transform_stream_with_config(iter([input]), self._ask_chunks, config, **kwargs)

    async def astream(self, input: Any, config: RunnableConfig | None = None,
                      **kwargs: Any | None) -> AsyncIterator[AIMessage]:
        """The chunks of `stream`, each produced on a worker thread: generation never blocks the event loop."""
        chunks = self.stream(input, config, **kwargs)
        while (chunk := await run_in_executor(config, next, chunks, None)) is not None:
            yield chunk

    # ---- internals ------------------------------------------------------------------------------
    def _request(self, value: Any) -> tuple[str, str | None, dict[str, Any] | None]:
        """(question, session_id, filters) from any of the accepted inputs."""
        if isinstance(value, dict):
            if "question" not in value:
                raise UserError("bad_input", "The input needs a 'question'.", "输入中需要 question 字段。", 422)
            return value["question"], value.get("session_id"), value.get("filters", self.filters)
        if isinstance(value, PromptValue):
            value = value.to_messages()
        if isinstance(value, BaseMessage):
            value = [value]
        if isinstance(value, list) and value and all(isinstance(m, BaseMessage) for m in value):
            human = [m for m in value if isinstance(m, HumanMessage)] or value
            return human[-1].text, None, self.filters
        return value, None, self.filters  # a str, or anything else for the service to reject in the user's words

    def _ask(self, value: Any) -> AIMessage:
        question, session_id, filters = self._request(value)
        answer = self.service.ask(question, session_id=session_id, filters=filters)
        return AIMessage(content=answer.answer, **_answer_fields(answer))

    def _ask_chunks(self, inputs: Iterator[Any]) -> Iterator[AIMessageChunk]:
        *_, value = inputs  # a stream of one input (stream() wraps it); the last one is the question
        question, session_id, filters = self._request(value)
        for ev in self.service.ask_stream(question, session_id=session_id, filters=filters):
            if ev.kind == "token":
                yield AIMessageChunk(content=ev.data)
            elif ev.kind == "done":
                yield AIMessageChunk(content="", chunk_position="last", **_answer_fields(ev.data))


def _answer_fields(answer: Answer) -> dict[str, Any]:
    """An answer's response_metadata (the API's JSON) and usage_metadata, for an AIMessage or its last chunk."""
    fields: dict[str, Any] = {"response_metadata": answer.to_dict()}
    if answer.usage:
        inp, out = answer.usage.get("prompt_tokens", 0), answer.usage.get("completion_tokens", 0)
        fields["usage_metadata"] = {"input_tokens": inp, "output_tokens": out, "total_tokens": inp + out}
    return fields


def advise_tool(service: AssistantService | None = None) -> StructuredTool:
    """The `advise` tool over `service` (None: the configured service, opened on the first call)."""
    from ..advisor.cli import render_text

    ref = _ServiceRef(service)

    def advise(situation: str, lang: Literal["zh", "en"] | None = None) -> tuple[str, dict[str, Any]]:
        situation = situation.strip()  # blank is no situation, also with a language given
        try:
            advice = ref.get().advise({"text": situation, "lang": lang} if lang else situation).to_dict()
        except UserError as err:
            raise ToolException(err.message(lang or detect_language(situation or ""))) from err
        return render_text(advice), advice

    return StructuredTool.from_function(
        advise, name="advise", response_format="content_and_artifact", handle_tool_error=True,
        description=(
            "Recommend an AI training framework for a team. Input: the team's situation in free text, Chinese or "
            "English (frameworks it knows, project stage, hardware, model size, goals such as localisation or "
            "mobile deployment). Output: a ranked recommendation with reasons, a comparison table and a trial "
            "plan, every claim citing a numbered source passage. `lang` forces the output language."))
