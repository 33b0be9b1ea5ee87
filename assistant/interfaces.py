"""The narrow interfaces the Advisor and the evaluator need from the service, as Protocols.

They depend on these, not on AssistantService: what they may call is written down here, a test can hand
them any object that has these methods, and the service's internals (its retriever, snapshot, locks) stay
its own. AssistantService satisfies both.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from .embed import Embedder
from .filters import Filters
from .llm.base import ChatModel
from .types import Answer, Chunk, Hit


class Searcher(Protocol):
    """What the Advisor uses: hybrid search, and which index generation answered (its cache key)."""

    def search(self, query: str, k: int = 5, filters: Filters | Mapping[str, Any] | None = None) -> list[Hit]: ...

    def index_generation(self) -> str:
        """A string naming the live index generation, different for every build and every index directory."""
        ...


class Answerer(Searcher, Protocol):
    """What the evaluator uses: answers, passages, the Advisor, and the models it judges with."""

    settings: Any

    @property
    def embedder(self) -> Embedder: ...

    @property
    def llm(self) -> ChatModel: ...

    def ask(self, question: str, session_id: str | None = None, filters: Filters | Mapping[str, Any] | None = None) -> Answer: ...

    def passage(self, chunk_id: str) -> Chunk | None: ...

    def answer_hits(self, question: str, k: int = 5) -> list[Hit]: ...

    def advise(self, scenario: Any, among: Sequence[str] = ()) -> Any: ...
