"""AssistantService: the one object behind the CLI, the HTTP API, the Gradio UI, MCP, LangChain and the evaluator; a
facade over the parts that do the work.

    engines (runtime.py)        index, retriever, embedder, chat model, translator; loading them
    answerer (answering/)       one question to one answer's events: ask, regenerate, edit
    queue, active               admission to the model (admit/withdraw) and stopping (cancel)
    sessions (sessions/)        conversations, versions, feedback
    documents (documents.py)    uploads, re-indexing, the document list
    pins (answering/pins.py)    the documents always in the model's context
    advise (advisor/)           the ranked, cited recommendation for a situation

The adapters call only this class; the input checks (`check_text`) are here.
"""
from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from . import conversations, stopping
from .advisor import advise, load_rubric
from .advisor.rubric import resolve_facts
from .answer import pinned as pinning
from .answer import pipeline
from .answer.prompt import Source
from .answering import Answerer, final
from .answering.pins import Pins
from .answering.twin import Twins
from .documents import DocumentLibrary, Job
from .embed import Embedder
from .errors import UserError
from .filters import Filters
from .genqueue import GenerationQueue, Ticket
from .index.identity import EmbedderStatus
from .index.location import IndexLocation
from .kinds import KindClassifier, classifier_for
from .lang import detect_language
from .llm.base import ChatModel, Message
from .retrieval import Retriever
from .runtime import Engines
from .sessions import SessionStorage, open_store, unknown_session
from .settings import Settings, load_settings
from .text import valid_unicode
from .types import Answer, Chunk, Event, Hit

log = logging.getLogger(__name__)


class AssistantService:
    def __init__(self, settings: Settings | None = None, *, chat_model: ChatModel | None = None,
                 embedder: Embedder | None = None) -> None:
        self.settings = settings or load_settings()
        self.engines = Engines(self.settings, chat_model, embedder)  # index, retriever, embedder, model, translator
        self.sessions: SessionStorage = open_store(self.settings)  # SQLite, or PostgreSQL for a database_url
        self.queue = GenerationQueue(self.settings.max_queue, self.settings.queue_timeout_s,
                                     self.settings.retry_after_s)
        self.active = stopping.ActiveAnswers()  # answers being written, by session: what `cancel` stops
        self.pipeline_config = pipeline.PipelineConfig.from_settings(self.settings)
        self._loaded = False  # set once load() has finished warming the model
        self._closed = False  # set by close(): a warm-up still running then fails quietly
        self.documents = DocumentLibrary(self.settings, lambda: self.embedder, self._reopen)
        count_tokens = self.engines.count_tokens  # without loading the model where the engine allows it
        twins = (Twins(self.settings.cache_dir, lambda: self.llm, self.engines.vocabulary,
                       lambda: self.settings.pinned_token_budget)
                 if self.settings.backend != "scripted" else None)  # the plumbing engine translates nothing
        self.pins = Pins(self.settings, lambda: self.retriever.snap, count_tokens, self.list_documents,
                         self._pins_changed, twins)
        self.answerer: Answerer = Answerer(self)  # every answer's one way through (assistant/answering/)

    # ---- the engines (assistant/runtime.py) -----------------------------------------------------------
    @property
    def embedder(self) -> Embedder:
        return self.engines.embedder

    @property
    def index(self) -> IndexLocation:
        """Where the index lives: settings.index_dir, or the Chroma server of settings.chroma_url."""
        return self.engines.index

    @property
    def retriever(self) -> Retriever:
        """The retriever over the live index generation (reopened when a build has replaced it)."""
        return self.engines.retriever

    @property
    def llm(self) -> ChatModel:
        return self.engines.llm

    @property
    def embedder_status(self) -> EmbedderStatus | None:
        return self.engines.embedder_status

    def translate(self, question: str) -> str | None:
        """The question in the other language when translation is on and succeeds, else None."""
        return self.engines.translate(question)

    def warm(self, system: str) -> None:
        """Make `system` the model's cached prefix unless it already is (runtime.Engines.warm)."""
        self.engines.warm(system)

    def load(self, warm: bool = True) -> None:
        """Load index, embedder and model now (the server calls this at start-up); the router's classifier too."""
        self.engines.load(warm, self.system_prompt, self.kind_classifier)
        self._loaded = True

    def warm_pinned(self) -> None:
        """Make every prefix a fact answer may start with cached: the pinned documents' twin for the other question
        language (answering/twin.py: translated once; minutes on a first start, during which a question in that
        language reads the documents as they are, under a second on later ones), then the documents' own, so it is
        the one in the KV cache. The server runs this in the background after load() and after the pins change."""
        try:
            for system in self.pins.prefixes():
                self.engines.warm(system)
        except Exception:  # a warm-up only: the next answer builds what it needs itself
            if not self._closed:
                log.warning("could not compute the pinned prefixes ahead of time", exc_info=True)

    def warm_advisor(self) -> None:
        """Resolve the Advisor's rubric facts for this index generation now (5-10 s, once per generation), so the
        first selection question does not wait for it; the server runs this in the background after load()."""
        try:
            for lang in ("zh", "en"):
                resolve_facts(self, load_rubric(), lang)
        except Exception:  # a warm-up only: the first selection question resolves (and reports) it again
            if not self._closed:  # else the server stopped under it, which is no failure
                log.warning("Advisor warm-up failed", exc_info=True)

    def index_generation(self) -> str:
        """Names one build of one index (the live generation's directory, or <url>/<prefix>/<generation>)."""
        return self.engines.index_generation()

    def ready(self) -> bool:
        """True once load() finished: index open, model loaded and warmed."""
        return self._loaded

    def ping(self) -> None:
        """Raise a UserError when a part the answers need cannot answer now (for /readyz): the sessions database and
        the engines."""
        self.sessions.ping()
        self.engines.ping()

    def stats(self) -> dict[str, Any]:
        return self.engines.stats()

    # ---- admission: a place in the generation queue, taken when a request arrives -------------------------
    def admit(self) -> Ticket:
        """A place in the generation queue, in arrival order (a 503 UserError when it is full); pass it to ask_stream
        or regenerate_stream, which give it back when the answer needs no model or ends early."""
        return self.queue.reserve()

    def withdraw(self, ticket: Ticket) -> None:
        """Give an admitted place back (the client left); a no-op once its turn has begun."""
        self.queue.cancel(ticket)

    def queue_position(self, ticket: Ticket) -> int:
        """How many requests are ahead of this place."""
        return self.queue.position(ticket)

    def queue_stats(self) -> dict[str, float]:
        """The generation queue now: waiting, total_wait_s, served."""
        q = self.queue
        return {"waiting": q.waiting, "total_wait_s": q.total_wait_s, "served": q.served}

    def answering(self, session_id: str) -> bool:
        """True while an answer of the session is being written or stopped (a new question in it waits for it)."""
        return self.active.running(session_id)

    # ---- retrieval ----------------------------------------------------------------------------
    def search(self, query: str, k: int = 5, filters: Filters | Mapping[str, Any] | None = None) -> list[Hit]:
        query = self.check_text(query, "query")
        if not 1 <= k <= 50:
            raise UserError("bad_k", "k must be between 1 and 50.", "k 必须在 1 到 50 之间。")
        return self.retriever.search(query, k=k, filters=Filters.parse(filters), translation=self.translate(query))

    def search_explained(self, query: str, k: int = 5, filters: Filters | Mapping[str, Any] | None = None
                         ) -> tuple[list[Hit], dict[str, Any]]:
        """The hits of `search` and why they rank so (Retriever.explain: terms matched, weights)."""
        query = self.check_text(query, "query")
        if not 1 <= k <= 50:
            raise UserError("bad_k", "k must be between 1 and 50.", "k 必须在 1 到 50 之间。")
        retriever, translation = self.retriever, self.translate(query)
        hits = retriever.search(query, k=k, filters=Filters.parse(filters), translation=translation)
        return hits, retriever.explain(query, hits, translation)

    def answer_hits(self, question: str, k: int = 5) -> list[Hit]:
        """The passages an answer to this (standalone) question retrieves, as it ranks them (`Answerer.retrieve`:
        the pinned passages also read through their twin in the question's language): the evaluator's hit@k."""
        question = self.check_text(question, "question")
        return self.answerer.retrieve(question, detect_language(question), k=k).hits

    def kind_classifier(self) -> KindClassifier | None:
        """The router's classifier for the live embedder (trained at first use, cached in the state folder)."""
        try:
            return classifier_for(self.embedder, self.settings.state_dir / "route")
        except Exception as exc:  # an embedder that cannot load: the router decides by wording
            log.warning("no route classifier (%s)", exc)
            return None

    def passage(self, chunk_id: str) -> Chunk | None:
        return self.retriever.snap.by_id.get(chunk_id)

    # ---- answers ------------------------------------------------------------------------------
    def ask(self, question: str, session_id: str | None = None, filters: Filters | Mapping[str, Any] | None = None,
            ticket: Ticket | None = None, *, owner: str | None = None) -> Answer:
        return final(self.ask_stream(question, session_id, filters, ticket, owner=owner))

    def ask_stream(self, question: str, session_id: str | None = None,
                   filters: Filters | Mapping[str, Any] | None = None, ticket: Ticket | None = None, *,
                   owner: str | None = None, client: str | None = None) -> Iterator[Event]:
        """Events: sources, token..., status (checking_citations), citations, done (see docs/architecture.md).

        `session_id`: None starts a new session owned by `owner`; otherwise it must be one the store issued to
        `owner` (assistant/sessions.py), else a 404 UserError before anything runs. `owner` is the caller's key
        (its owner id) or None for the keyless local user: the HTTP, UI and CLI adapters all pass it.

        `ticket`: a place in the generation queue taken when the request arrived (the HTTP routes take it on
        the event loop, in arrival order); without one, the place is taken now. It is given back when the
        answer needs no model or the stream ends early.

        `client`: the browser (or API client) whose history list shows a new session. `cancel(session_id)`
        stops the answer (assistant/stopping.py): "done" then carries what was written, `stopped` set; a
        consumer that closes this generator mid-answer stops it too, and what was written is stored.
        """
        return self.answerer.answer_stream(question, session_id, filters, ticket, owner=owner, client=client)

    # ---- the pinned context (assistant/answering/pins.py) --------------------------------------------
    def pinned_context(self, snap: Any = None, lang: str = "", build: bool = True) -> pinning.PinnedContext:
        """The documents always in the model's context, made of `snap`'s passages (default the live generation), as
        a question in `lang` reads them (their twin in that language when they are in the other; `build=False`:
        only one already translated)."""
        return self.pins.context(snap, lang, build)

    def system_prompt(self) -> str:
        return self.pins.system_prompt()

    def pinned_documents(self) -> dict[str, Any]:
        return self.pins.info()

    def set_pins(self, refs: list[str]) -> dict[str, Any]:
        """Pin exactly these documents; the new prefix is computed in the background (the first answer after it
        waits for it otherwise)."""
        return self.pins.set(refs)

    def pin(self, ref: str) -> dict[str, Any]:
        return self.pins.pin(ref)

    def unpin(self, ref: str) -> dict[str, Any]:
        return self.pins.unpin(ref)

    def _pins_changed(self) -> None:
        if self._loaded:
            threading.Thread(target=self.warm_pinned, name="assistant-rewarm", daemon=True).start()

    def evidence(self, question: str, hits: list[Hit], count_tokens: Callable[[str], int] | None = None,
                 pinned: pinning.PinnedContext = pinning.NONE, several: bool = False,
                 article: bool = False, retriever: Retriever | None = None) -> list[Source]:
        """The evidence an answer's prompt carries for these hits (the settings' budget and floor, with their section
        neighbours in the generation `retriever` searched, the live one by default), after the pinned context when
        one is given; benchmarks that run their own model pass its `count_tokens` so the service's model is not
        loaded. `several`, `article`: the question's Route says them."""
        return pipeline.evidence(question, hits, self.pipeline_config, count_tokens or self.llm.count_tokens,
                                 self.embedder, pinned, several, article, (retriever or self.retriever).around)

    def prompt_messages(self, question: str, count_tokens: Callable[[str], int] | None = None) -> list[Message]:
        """The messages the product sends the model for a question, for benchmarks to replay (answering.Answerer)."""
        return self.answerer.prompt_messages(question, count_tokens)

    # ---- sessions and feedback ----------------------------------------------------------------
    # `owner`: the caller's key (owner id), None for the keyless local user; another owner's session is None/404.
    # `client`: the caller's browser id (the UI's, or an API client's `?client=`); a session listed for another
    # client is None/404 too. None names no client (the CLI, an API client that lists all its key's sessions).
    def _visible(self, session_id: str, owner: str | None, client: str | None) -> bool:
        return client is None or self.sessions.exists(session_id, owner, client)

    def get_session(self, session_id: str, *, owner: str | None = None,
                    client: str | None = None) -> dict[str, Any] | None:
        return self.sessions.get(session_id, owner) if self._visible(session_id, owner, client) else None

    def delete_session(self, session_id: str, *, owner: str | None = None, client: str | None = None) -> bool:
        return self._visible(session_id, owner, client) and self.sessions.delete(session_id, owner)

    def new_session(self, *, owner: str | None = None, client: str | None = None) -> str:
        """An empty session (listed once it has a turn): its id lets a client cancel its first answer."""
        return self.sessions.ensure(None, owner, client)

    def list_sessions(self, text: str = "", limit: int = 50, *, owner: str | None = None,
                      client: str | None = None) -> list[dict[str, Any]]:
        """The history list: the owner's (and `client`'s) conversations, newest first, `text` searched."""
        if len(text) > self.settings.max_question_chars:
            self.check_text(text, "query")  # the same 413 as a search
        return self.sessions.list_sessions(owner, client, text, limit)

    def rename_session(self, session_id: str, title: str, *, owner: str | None = None,
                       client: str | None = None) -> None:
        if not isinstance(title, str) or not title.strip():
            raise UserError("empty_title", "The title is empty.", "标题不能为空。", 422)
        if not (self._visible(session_id, owner, client) and self.sessions.rename(session_id, title, owner)):
            raise unknown_session()

    def cancel(self, session_id: str, *, owner: str | None = None, client: str | None = None) -> bool:
        """Stop the session's answer in progress (see ask_stream); False when none is being written."""
        if not self.sessions.exists(session_id, owner, client):
            raise unknown_session()
        return self.active.stop(session_id)

    def regenerate_stream(self, session_id: str, question: str | None = None, ticket: Ticket | None = None, *,
                          owner: str | None = None, client: str | None = None) -> Iterator[Event]:
        """Answer the session's last question again (at a higher temperature), or `question` in its place
        (the last question edited): the events of ask_stream; the turn keeps its id and its earlier versions
        (assistant/conversations.py)."""
        return self.answerer.answer_stream(question, session_id, None, ticket, owner=owner, client=client, regenerate=True)

    def regenerate(self, session_id: str, question: str | None = None, ticket: Ticket | None = None, *,
                   owner: str | None = None, client: str | None = None) -> Answer:
        return final(self.regenerate_stream(session_id, question, ticket, owner=owner, client=client))

    def choose_version(self, session_id: str, index: int, *, owner: str | None = None,
                       client: str | None = None) -> dict[str, Any]:
        """Show an earlier (or later) version of the last answer again."""
        return conversations.choose(self.sessions, session_id, index, owner, client)

    def feedback(self, session_id: str, message_id: str, rating: str, comment: str = "", *,
                 owner: str | None = None) -> None:
        if rating not in ("up", "down"):
            raise UserError("bad_rating", "rating must be 'up' or 'down'.", "rating 只能是 up 或 down。", 422)
        if len(comment) > 2000:
            raise UserError("too_long", "The comment is too long (max 2000 characters).", "评论过长（最多 2000 字）。", 413)
        if not self.sessions.has_message(session_id, message_id, owner):
            raise UserError("not_found", "No such message in this session.", "该会话中没有这条消息。", 404)
        self.sessions.add_feedback(session_id, message_id, rating, comment)

    # ---- uploaded documents (assistant/documents.py) ---------------------------------------------
    def add_document(self, filename: str, data: bytes, *, owner: str | None = None) -> dict[str, str]:
        """Check an upload (a 4xx UserError for what is refused) and queue its indexing: {document_id, job_id}."""
        self.index.require()
        doc_id, job = self.documents.add(filename, data, owner)
        return {"document_id": doc_id, "job_id": job.id}

    def document_job(self, job_id: str) -> Job:
        job = self.documents.job(job_id)
        if job is None:
            raise UserError("not_found", "Unknown job.", "未找到该任务。", 404)
        return job

    def delete_document(self, document_id: str) -> dict[str, Any]:
        job = self.documents.delete(document_id)
        return {"deleted": document_id, "job_id": job.id, "seconds": round(job.seconds, 3)}

    def reindex(self) -> Job:
        self.index.require()
        return self.documents.reindex()

    def list_documents(self, kind: str | None = None) -> list[dict[str, Any]]:
        """Every document: the uploads (with those still being added) and the indexed corpus files; each with
        id, name, kind (upload|corpus), chunks in the live index, added (ISO time), size (bytes), status."""
        if kind not in (None, "upload", "corpus"):
            raise UserError("bad_kind", "kind must be 'upload' or 'corpus'.", "kind 只能是 upload 或 corpus。", 422)
        snap = self.retriever.snap
        return self.documents.listing(snap, self.pins.sources(snap), kind)

    def _reopen(self) -> None:
        """After a build went live: open the new generation now, so the next search does not wait for it."""
        _ = self.retriever

    # ---- advisor ------------------------------------------------------------------------------
    def advise(self, scenario: Any, among: Sequence[str] = ()) -> Any:
        """The Advisor's answer for a scenario (fields, free text or both), among the candidates a question weighs
        (`among`, see advisor.advise); a free text longer than settings.max_advice_chars is a 413 in the text's
        language."""
        text = scenario if isinstance(scenario, str) else (
            scenario.get("text") if isinstance(scenario, Mapping) else getattr(scenario, "text", ""))
        n = self.settings.max_advice_chars
        if isinstance(text, str) and len(text) > n:
            raise UserError("input_too_long", f"The description is too long (max {n} characters).",
                            f"描述过长（最多 {n} 个字符）。", 413)
        return advise(self, scenario, among)

    # ---- helpers ------------------------------------------------------------------------------
    def check_text(self, text: Any, what: str) -> str:
        if not isinstance(text, str) or not text.strip():
            raise UserError("empty_input", f"The {what} is empty.", "问题不能为空。" if what == "question" else "查询不能为空。", 422)
        if len(text) > self.settings.max_question_chars:
            n = self.settings.max_question_chars
            raise UserError("input_too_long", f"The {what} is too long (max {n} characters).",
                            f"输入过长（最多 {n} 个字符）。", 413)
        return valid_unicode(text.strip())

    def close(self) -> None:
        self._closed = True
        self.engines.close()
        self.sessions.close()

