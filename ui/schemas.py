"""Request and response bodies of the HTTP API (pydantic). Validation of shape and bounds lives here;
the question's length limit (settings.max_question_chars) is enforced by the service, which answers 413
in the user's language. Whole-body size is capped by ui.server's body-limit middleware. Every request body
replaces lone surrogates (a JSON "\\ud800" escape) with U+FFFD before validation: nothing after it (the
embedder, SQLite, the JSON response that echoes a query) can encode them."""
from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, model_validator

from assistant.filters import Filters
from assistant.sessions import ID_PATTERN
from assistant.text import valid_strings
from assistant.types import Citation


class RequestBody(BaseModel):
    """A request body: its strings are valid Unicode (lone surrogates become U+FFFD)."""

    @model_validator(mode="before")
    @classmethod
    def _valid_unicode(cls, data: Any) -> Any:
        return valid_strings(data)


# documented, not enforced by pydantic: the service refuses a blank text with its own 422 in the user's language
NOT_BLANK: dict[str, Any] = {"minLength": 1, "pattern": r"\S"}
SessionId = Field(default=None, pattern=ID_PATTERN, description="The session_id of a previous answer (32 hex "
                  "digits, issued by the server to this key); omit to start a new session.")


class FiltersBody(RequestBody):
    """Restrict retrieval (the wire shape of assistant.filters.Filters). Unknown framework names are a 422."""

    model_config = ConfigDict(extra="forbid")
    framework: list[str] | None = Field(default=None, max_length=10, examples=[["PyTorch", "DeepSpeed"]])
    language: Literal["zh", "en"] | None = None
    source: str | None = Field(default=None, max_length=300, description="substring of the source path")
    kind: Literal["upload", "corpus"] | None = Field(default=None, description="'upload': only the uploaded "
                                                     "documents; 'corpus': leave them out")

    def to_filters(self) -> Filters:
        return Filters.parse(self.model_dump(exclude_none=True))


class AskRequest(RequestBody):
    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [
        {"question": "PyTorch 和 TensorFlow 哪个更适合做研究？", "stream": False},
        {"question": "What does DeepSpeed ZeRO partition?", "filters": {"framework": ["DeepSpeed"]}, "stream": True},
    ]})
    question: str = Field(description="The question (Chinese or English); not blank (else 422), max "
                          "settings.max_question_chars characters (else 413).", json_schema_extra=NOT_BLANK)
    session_id: str | None = SessionId
    filters: FiltersBody | None = None
    stream: StrictBool = Field(default=False, description="Server-Sent Events: sources, token..., citations, done")


class SearchRequest(RequestBody):
    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [
        {"query": "混合精度训练", "k": 5}, {"query": "pipeline parallelism", "k": 3, "filters": {"language": "en"}},
    ]})
    query: str = Field(description="Search text; not blank (else 422), max settings.max_question_chars "
                       "characters (else 413).", json_schema_extra=NOT_BLANK)
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


class Explanation(BaseModel):
    """score = dense_weight * dense + (1 - dense_weight) * keyword_saturated + adjustment, where
    keyword_saturated = keyword / (keyword + bm25_saturation) and adjustment is the framework/article boost."""

    matched_terms: list[str]
    dense_weight: float
    keyword_saturated: float
    adjustment: float
    cross_language: bool


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
    url: str = Field(default="", description="The passage upstream (the page at its pinned commit, with a line "
                     "anchor) or the document's own address; '' when it has none")
    licence: str = ""
    publisher: str = Field(default="", description="Who published a quoted text (the article)")
    date: str = Field(default="", description="When it was published")


    explain: Explanation | None = Field(default=None, description="With ?explain=true: why it ranks here")


class SearchResponse(BaseModel):
    query: str
    k: int
    results: list[SearchResult]
    terms: list[str] | None = Field(default=None, description="With ?explain=true: the terms the keyword side "
                                    "searched (the query's tokens and their cross-language expansions)")


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
    licence: str = ""
    publisher: str = ""
    date: str = ""


class ErrorBody(BaseModel):
    code: str
    message: str
    request_id: str | None = None  # internal, model and start-up errors: the id the server log names


class ErrorResponse(BaseModel):
    error: ErrorBody


def error_responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI `responses` entries for these refusal statuses, all in the ErrorResponse shape."""
    return {s: {"model": ErrorResponse, "description": ERROR_DESCRIPTIONS[s]} for s in statuses}


ERROR_DESCRIPTIONS = {
    400: "The body is not valid JSON (or not UTF-8)",
    401: "An API key is required (keys configured) and none or a wrong one was sent",
    404: "Unknown session, message or passage (or another key's)",
    409: "A conflict: a duplicate or one upload too many, a document still being added, a build running, or a session with no answer yet to regenerate or switch",
    413: "Body, question, description or upload too long",
    415: "A file type that cannot be uploaded",
    422: "Invalid request",
    429: "Rate limit (Retry-After says when to retry)",
    503: "Model loading, queue full, queue wait timed out or too many streams (Retry-After)",
}
# the refusals every question and session route can give
COMMON_ERRORS = error_responses(400, 401, 413, 422, 429, 503)


def sse_response(model: type[BaseModel], what: str, events: list[str], json_data: bool = True
                 ) -> dict[int | str, dict[str, Any]]:
    """The 200 of a route that answers JSON (`model`), or with stream=true Server-Sent Events, each one of
    `events` whose data is JSON (`json_data`) or any text (the OpenAI stream's closing `[DONE]`)."""
    data: dict[str, Any] = {"type": "string", **({"contentMediaType": "application/json"} if json_data else {})}
    event = {"type": "object", "required": ["event", "data"],
             "properties": {"event": {"enum": events}, "data": data}}
    return {200: {"model": model, "description": f"{what} (JSON), or with stream=true a text/event-stream of "
                  f"events ({', '.join(events)}); this schema describes each event",
                  "content": {"text/event-stream": {"schema": event}}}}


class AnswerResponse(BaseModel):
    """A cited answer (assistant.types.Answer.to_dict)."""

    answer: str
    citations: list[Citation]
    refused: bool
    language: Literal["zh", "en"]
    session_id: str
    message_id: str
    timings: dict[str, float]
    usage: dict[str, int]
    queue: dict[str, float] | None = None
    stopped: bool = Field(default=False, description="The user stopped it: the text written so far, each [n] kept "
                          "only where the citation check supports it (present only when true)")
    alternatives: int = Field(default=0, description="Versions of this turn kept, once regenerated or edited")
    advice: dict[str, Any] | None = Field(None, description="the Advisor's full result (as `advise --json`) when the "
                                          "question asked which framework to choose")


class EmbedderStatusBody(BaseModel):
    """The index's embedder against the settings' (assistant/index/identity.py), when they differ."""

    status: Literal["ok", "other_embedder", "other_version", "incompatible"]
    index_embedder: str
    index_version: str | None = None
    settings_embedder: str
    loaded_version: str | None = None
    message_en: str = ""
    message_zh: str = ""


class ReadyStatus(BaseModel):
    status: Literal["ready", "loading", "failed", "unavailable"]
    error: ErrorBody | None = None
    embedder: EmbedderStatusBody | None = None


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
    messages: list[ChatMessage] = Field(min_length=1, max_length=100, description="The last user message is the "
                                        "question: there must be one, not blank (else 422)", json_schema_extra={
                                            "contains": {"type": "object", "required": ["role", "content"],
                                                         "properties": {"role": {"const": "user"},
                                                                        "content": {"type": "string", **NOT_BLANK}}}})
    stream: StrictBool = False
    session_id: str | None = Field(default=None, pattern=ID_PATTERN, description="Extension: the session_id of a "
                                   "previous completion (returned on it), to continue that conversation; omit to "
                                   "start a new one")
    user: str | None = Field(default=None, max_length=128, description="Accepted and ignored (not a session id)")


class AdviseRequest(RequestBody):
    """A team's situation for the Advisor: any of the fields, and/or a free description in `text`."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [
        {"text": "5人初创团队，熟悉 PyTorch，只有几张 GPU，想微调 7B 模型"},
        {"known_frameworks": ["TensorFlow"], "stage": "production", "hardware": "gpu_cluster", "lang": "en"}]})

    known_frameworks: list[Annotated[str, Field(max_length=40)]] = Field(
        default_factory=list, max_length=10, description="Framework names or aliases (PyTorch, 飞桨, ...); an "
        "unknown one is a 422")
    stage: Literal["research", "prototype", "production"] | None = None
    hardware: Literal["cpu", "few_gpus", "gpu_cluster", "tpu", "npu"] | None = None
    model_scale: str | None = Field(default=None, max_length=20, description="Parameters, e.g. 7B, 300M, 千亿; "
                                    "one that cannot be read is a 422")
    data_scale: str | None = Field(default=None, max_length=20)
    domain: Literal["chinese_nlp", "cv", "scientific", "rl", "llm_pretrain", "llm_finetune", "general"] | None = None
    goals: list[Annotated[str, Field(max_length=40)]] = Field(default_factory=list, max_length=10)
    text: str = Field(default="", description="A free description of the situation (Chinese or English); max "
                      "settings.max_advice_chars characters (longer: 413)")
    lang: Literal["zh", "en"] | None = None


class CompletionMessage(BaseModel):
    role: Literal["assistant"]
    content: str


class CompletionChoice(BaseModel):
    index: int
    finish_reason: Literal["stop"]
    message: CompletionMessage


class CompletionUsage(BaseModel):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


class ChatCompletion(BaseModel):
    """The OpenAI chat.completion object, with the answer's citations and session ids as extensions."""

    id: str
    object: Literal["chat.completion"]
    created: int
    model: str
    usage: CompletionUsage
    choices: list[CompletionChoice]
    citations: list[Citation]
    session_id: str
    message_id: str
    refused: bool
    timings: dict[str, float]
