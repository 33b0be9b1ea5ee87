"""Request and response bodies of the HTTP API (pydantic). Validation of shape and bounds lives here;
the question's length limit (settings.max_question_chars) is enforced by the service, which answers 413
in the user's language. Whole-body size is capped by ui.server's body-limit middleware. Every request body
replaces lone surrogates (a JSON "\\ud800" escape) with U+FFFD before validation: nothing after it (the
embedder, SQLite, the JSON response that echoes a query) can encode them."""
from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from assistant.filters import Filters
from assistant.sessions import ID_PATTERN
from assistant.text import valid_strings


class RequestBody(BaseModel):
    """A request body: its strings are valid Unicode (lone surrogates become U+FFFD)."""

    @model_validator(mode="before")
    @classmethod
    def _valid_unicode(cls, data: Any) -> Any:
        return valid_strings(data)


SessionId = Field(default=None, pattern=ID_PATTERN, description="The session_id of a previous answer (32 hex "
                  "digits, issued by the server to this key); omit to start a new session.")


class FiltersBody(RequestBody):
    """Restrict retrieval (the wire shape of assistant.filters.Filters). Unknown framework names are a 422."""

    model_config = ConfigDict(extra="forbid")
    framework: list[str] | None = Field(default=None, max_length=10, examples=[["PyTorch", "DeepSpeed"]])
    language: Literal["zh", "en"] | None = None
    source: str | None = Field(default=None, max_length=300, description="substring of the source path")

    def to_filters(self) -> Filters:
        return Filters.parse(self.model_dump(exclude_none=True))


class AskRequest(RequestBody):
    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [
        {"question": "PyTorch 和 TensorFlow 哪个更适合做研究？", "stream": False},
        {"question": "What does DeepSpeed ZeRO partition?", "filters": {"framework": ["DeepSpeed"]}, "stream": True},
    ]})
    question: str = Field(description="The question (Chinese or English); max settings.max_question_chars characters.")
    session_id: str | None = SessionId
    filters: FiltersBody | None = None
    stream: bool = Field(default=False, description="Server-Sent Events: sources, token..., citations, done")


class SearchRequest(RequestBody):
    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [
        {"query": "混合精度训练", "k": 5}, {"query": "pipeline parallelism", "k": 3, "filters": {"language": "en"}},
    ]})
    query: str = Field(description="Search text; max settings.max_question_chars characters.")
    k: int = Field(default=5, ge=1, le=50)
    filters: FiltersBody | None = None


class FeedbackRequest(RequestBody):
    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [
        {"session_id": "3f2a9c0d1e2b4a5c6d7e8f9012345678", "message_id": "9b8c7d6e5f4a3b2c1d0e9f8a7b6c5d4e",
         "rating": "up", "comment": "clear"},
    ]})
    session_id: str = Field(pattern=ID_PATTERN, description="The answer's session_id")
    message_id: str = Field(pattern=ID_PATTERN, description="The answer's message_id")
    rating: Literal["up", "down"]
    comment: str = Field(default="", max_length=2000)


class SearchResult(BaseModel):
    rank: int
    chunk_id: str
    score: float
    dense: float
    keyword: float
    source: str
    path: str
    title: str
    heading_path: list[str]
    lines: list[int]
    language: str
    frameworks: list[str]
    text: str


class SearchResponse(BaseModel):
    query: str
    k: int
    results: list[SearchResult]


class Passage(BaseModel):
    id: str
    text: str
    source: str
    url: str
    title: str
    heading_path: list[str]
    language: str
    frameworks: list[str]
    lines: list[int]


class ErrorBody(BaseModel):
    code: str
    message: str
    request_id: str | None = None  # internal, model and start-up errors: the id the server log names


class ErrorResponse(BaseModel):
    error: ErrorBody


# ---- OpenAI-compatible ------------------------------------------------------------------------
class ChatMessage(RequestBody):
    model_config = ConfigDict(extra="allow")
    role: Literal["system", "user", "assistant", "tool", "developer"]
    content: str | list[dict[str, Any]] | None = None

    def text(self) -> str:
        if isinstance(self.content, list):  # content parts: keep the text ones
            return "".join(str(p.get("text", "")) for p in self.content if p.get("type") == "text")
        return self.content or ""


class ChatCompletionRequest(RequestBody):
    """The OpenAI body; sampling fields are accepted and ignored (the server's settings decide)."""

    model_config = ConfigDict(extra="allow", json_schema_extra={"examples": [
        {"model": "fast", "messages": [{"role": "user", "content": "飞桨适合什么场景？"}]},
        {"model": "fast", "stream": True, "session_id": "3f2a9c0d1e2b4a5c6d7e8f9012345678",
         "messages": [{"role": "user", "content": "Which framework suits a small research team?"}]},
    ]})
    model: str = Field(default="", max_length=200)
    messages: list[ChatMessage] = Field(min_length=1, max_length=100)
    stream: bool = False
    session_id: str | None = Field(default=None, pattern=ID_PATTERN, description="Extension: the session_id of a "
                                   "previous completion (returned on it), to continue that conversation; omit to "
                                   "start a new one")
    user: str | None = Field(default=None, max_length=128, description="Accepted and ignored (not a session id)")


class AdviseRequest(RequestBody):
    """A team's situation for the Advisor: any of the fields, and/or a free description in `text`."""

    model_config = {"json_schema_extra": {"examples": [
        {"text": "5人初创团队，熟悉 PyTorch，只有几张 GPU，想微调 7B 模型"},
        {"known_frameworks": ["TensorFlow"], "stage": "production", "hardware": "gpu_cluster", "lang": "en"}]}}

    known_frameworks: list[str] = Field(default_factory=list, max_length=10)
    stage: Literal["research", "prototype", "production"] | None = None
    hardware: Literal["cpu", "few_gpus", "gpu_cluster", "tpu", "npu"] | None = None
    model_scale: str | None = Field(default=None, max_length=20)
    data_scale: str | None = Field(default=None, max_length=20)
    domain: Literal["chinese_nlp", "cv", "scientific", "rl", "llm_pretrain", "llm_finetune", "general"] | None = None
    goals: list[str] = Field(default_factory=list, max_length=10)
    text: str = Field(default="", description="A free description of the situation (Chinese or English); max "
                      "settings.max_advice_chars characters (longer: 413)")
    lang: Literal["zh", "en"] | None = None
