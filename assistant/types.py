"""Domain types shared by every layer: documents, chunks, hits, citations, answers.

Owns the one way a citation is made (`Citation.from_chunk`) and numbered (`Numbering`): the Advisor's passages,
the selection answer's sources and every answer's [n] go through them. These are the project's own types. Library types (Chroma results, llama.cpp
responses, pydantic request bodies) are converted to these at the edges.
"""
from __future__ import annotations

import re
from collections.abc import Hashable, Iterator
from dataclasses import asdict, dataclass, field
from typing import Any, Generic, Literal, TypeVar, get_args

UPLOADS_FOLDER = "uploads"  # an uploaded document's source is uploads/<document id>/<file name> (assistant/documents.py)
_UPLOAD_SOURCE = re.compile(r"^uploads/[0-9a-f]{32}/")
SNIPPET_MAX = 400  # characters of a passage a citation shows at most
SourceKind = Literal["upload", "corpus"]


def source_kind(source: str) -> SourceKind:
    """The collection a source belongs to: "upload" (a document a user added) or "corpus" (everything indexed
    from folders: the article, the notes, the official documentation)."""
    return "upload" if _UPLOAD_SOURCE.match(source) else "corpus"


@dataclass(frozen=True)
class Section:
    """A run of text under one heading path, with its 1-based inclusive line range in the source."""

    heading_path: tuple[str, ...]
    text: str
    line_start: int
    line_end: int


@dataclass
class Document:
    """A loaded source document, split into sections by its own structure."""

    source: str  # path (relative to the docs root when possible) or URL
    title: str
    language: str  # "zh" | "en"
    sections: list[Section]
    frameworks: tuple[str, ...] = ()
    meta: dict[str, Any] = field(default_factory=dict)  # url, licence, date, path


@dataclass(frozen=True)
class Chunk:
    """The unit that is embedded, indexed, retrieved and cited."""

    id: str
    text: str
    source: str
    title: str
    heading_path: tuple[str, ...]
    language: str
    frameworks: tuple[str, ...]
    lines: tuple[int, int]
    url: str = ""  # a link a user can open: the upstream page at its pinned commit (#L lines), or front matter url
    licence: str = ""
    publisher: str = ""  # who published a quoted text (the article's front matter `source`)
    date: str = ""  # when it was published

    @property
    def is_article(self) -> bool:
        """Whether the chunk comes from the reference article (corpus/article/), not a note or a framework page."""
        return "/article/" in self.source

    @property
    def headings(self) -> str:
        """The page title and the section headings the passage sits under: what it is about, shown with its
        citation."""
        return " ".join(dict.fromkeys([self.title, *self.heading_path]))

    @property
    def kind(self) -> SourceKind:
        return source_kind(self.source)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["heading_path"] = list(self.heading_path)
        d["frameworks"] = list(self.frameworks)
        d["lines"] = list(self.lines)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Chunk:
        return cls(
            id=d["id"],
            text=d["text"],
            source=d["source"],
            title=d.get("title", ""),
            heading_path=tuple(d.get("heading_path", ())),
            language=d.get("language", "en"),
            frameworks=tuple(d.get("frameworks", ())),
            lines=(int(d["lines"][0]), int(d["lines"][1])),
            url=d.get("url", ""),
            licence=d.get("licence", ""),
            publisher=d.get("publisher", ""),
            date=d.get("date", ""),
        )


@dataclass
class Hit:
    """A retrieved chunk with its fused score (higher is better) and the parts it came from."""

    chunk: Chunk
    score: float
    dense: float = 0.0  # cosine similarity of the query and the chunk
    keyword: float = 0.0  # BM25 score (unnormalised)

    def to_dict(self) -> dict[str, Any]:
        c = self.chunk
        return {
            "chunk_id": c.id,
            "score": round(self.score, 6),
            "dense": round(self.dense, 6),
            "keyword": round(self.keyword, 6),
            "source": c.url or c.source,
            "path": c.source,
            "title": c.title,
            "heading_path": list(c.heading_path),
            "lines": list(c.lines),
            "language": c.language,
            "frameworks": list(c.frameworks),
            "text": c.text,
            "url": c.url,
            "licence": c.licence,
            "publisher": c.publisher,
            "date": c.date,
        }


@dataclass
class Citation:
    """One [n] of an answer or of the Advisor's result, resolved to the passage it points at and checked against it."""

    n: int
    chunk_id: str
    title: str
    heading_path: list[str]
    source: str  # the passage's Chunk.source: its path (relative to the docs root when possible) or URL
    lines: list[int]
    snippet: str
    support: float
    supported: bool = True
    url: str = ""  # where the passage comes from (Chunk.url), its licence, publisher and date
    licence: str = ""
    publisher: str = ""
    date: str = ""

    @classmethod
    def from_chunk(cls, n: int, chunk: Chunk, snippet: str, support: float) -> Citation:
        """The citation [n] of a passage: the chunk's identity and provenance, the words shown (`snippet`, cut by
        the caller to at most SNIPPET_MAX characters) and how well they support what cites them."""
        return cls(n=n, chunk_id=chunk.id, title=chunk.title, heading_path=list(chunk.heading_path),
                   source=chunk.source, lines=list(chunk.lines), snippet=snippet, support=round(float(support), 4),
                   supported=True, url=chunk.url, licence=chunk.licence, publisher=chunk.publisher, date=chunk.date)

    def to_dict(self, link: bool = False) -> dict[str, Any]:
        """The JSON of an answer's citation; with `link`, as Hit.to_dict writes a passage (the Advisor's JSON):
        `source` is where a reader opens it (its url, else its source) and `path` its source."""
        d = asdict(self)
        if link:
            d["source"] = self.url or self.source
            d["path"] = self.source
        return d


K = TypeVar("K", bound=Hashable)


class Numbering(Generic[K]):
    """Numbers 1..N in order of first use, one number per key (a passage, a citation's earlier number)."""

    def __init__(self) -> None:
        self._numbers: dict[K, int] = {}

    def number(self, key: K) -> int:
        """The key's number; the next one at its first use."""
        return self._numbers.setdefault(key, len(self._numbers) + 1)

    def __contains__(self, key: object) -> bool:
        return key in self._numbers

    def __getitem__(self, key: K) -> int:
        return self._numbers[key]

    def __iter__(self) -> Iterator[K]:
        return iter(self._numbers)

    def __len__(self) -> int:
        return len(self._numbers)


@dataclass(frozen=True)
class AnswerTrace:
    """What each step of one answer handed to the next, for the evaluator's fact-loss table
    (assistant/evaluate/factloss.py): references to values the pipeline computed anyway, so recording it costs
    nothing. Not part of the API contract and never serialised by the adapters."""

    retrieved: list[Hit]  # every passage the retriever returned, before the evidence selection, and the pinned ones
    evidence: list[str]  # the evidence text of each source the model was shown (empty when refused)
    draft: str  # the model's text before the citation check ("" when refused before generation)
    final: str  # the answer's text after the check (a quote or a refusal included)
    refused_before_generation: bool = False  # policy.decide refused on the retrieved passages


@dataclass
class Answer:
    """What every adapter returns for one question."""

    answer: str
    citations: list[Citation]
    refused: bool
    language: str
    session_id: str
    message_id: str = ""
    question: str = ""
    standalone_question: str = ""
    timings: dict[str, float] = field(default_factory=dict)  # retrieval_ms, ttft_ms, total_ms
    # place in the generation queue (ticket number, in arrival order) and the wait for the model
    queue: dict[str, float] = field(default_factory=dict)
    usage: dict[str, int] = field(default_factory=dict)  # prompt_tokens, completion_tokens
    sources: list[Hit] = field(default_factory=list)
    # how the citation check went (factual/supported sentence counts, dropped numbers, the raw model text);
    # for the evaluator and debugging, not part of the API contract
    diagnostics: dict[str, Any] = field(default_factory=dict)
    # the Advisor's full result (Advice.to_dict()) when the question asked which framework to choose, else None
    advice: dict[str, Any] | None = None
    stopped: bool = False  # the user stopped it: the text written so far (assistant/stopping.py)
    alternatives: int = 0  # versions of this turn kept, once regenerated (assistant/conversations.py)
    trace: AnswerTrace | None = None  # for the evaluator (see AnswerTrace); None when the answerer kept none

    def to_dict(self, with_sources: bool = False) -> dict[str, Any]:
        d: dict[str, Any] = {
            "answer": self.answer,
            "citations": [c.to_dict() for c in self.citations],
            "refused": self.refused,
            "language": self.language,
            "session_id": self.session_id,
            "message_id": self.message_id,
            "timings": self.timings,
            "usage": self.usage,
        }
        if self.queue:
            d["queue"] = self.queue
        if self.advice is not None:
            d["advice"] = self.advice
        if self.stopped:
            d["stopped"] = True
        if self.alternatives:
            d["alternatives"] = self.alternatives
        if with_sources:
            d["sources"] = [h.to_dict() for h in self.sources]
        return d


EventKind = Literal["sources", "token", "status", "citations", "done", "error"]
EVENT_KINDS: tuple[EventKind, ...] = get_args(EventKind)
# what a "status" event says the answer is doing now (its data): the model is done, the citation check runs
StatusStep = Literal["checking_citations"]
CHECKING_CITATIONS: StatusStep = "checking_citations"


@dataclass
class Event:
    """One step of a streamed answer. The service yields, in this order: "sources" (list[Hit], once retrieval is
    done), "token" (str, zero or more), "status" (a StatusStep: "checking_citations" once the model has finished,
    before the check; not for a refusal, which runs no check), "citations" (list[Citation]), "done" (the Answer).
    It raises UserError or ModelError instead of yielding a failure; "error" ({code, message} in the client's
    language) is made only by the adapters (ui/streaming.py) when the service raised after a stream had started.
    Consumers that only show text (the OpenAI route, the CLI) skip "status"."""

    kind: EventKind
    data: Any
