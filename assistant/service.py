"""AssistantService: the one object behind the CLI, the HTTP API, the Gradio UI and the evaluator.

It owns the loaded index (reloaded when a build replaces it), the embedder, the chat model, the
session store, the generation queue and the input checks, and sequences one answer:
question -> (follow-up rewrite) -> (translation, when on) -> retrieve -> refuse, or evidence -> prompt ->
queue turn -> generate -> check citations -> remember the turn. What each step computes lives in
assistant/answer/pipeline.py; events are assistant.types.Event.
"""
from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Generator, Iterator, Mapping
from pathlib import Path
from typing import Any

from .answer import pipeline
from .answer.policy import decide, rewrite_followup, strip_injection
from .answer.prompt import Source, build_messages
from .embed import Embedder, create_embedder
from .errors import UserError
from .filters import Filters
from .genqueue import GenerationQueue, Ticket
from .index.snapshot import IndexSnapshot, current_meta, require_generation
from .lang import detect_language
from .llm.base import ChatModel
from .retrieval import RetrievalParams, Retriever
from .sessions import SessionStorage, open_store
from .settings import Settings, load_settings
from .text import valid_unicode
from .translate import QueryTranslator, create_translator
from .types import Answer, AnswerTrace, Chunk, Event, Hit

log = logging.getLogger(__name__)


class AssistantService:
    def __init__(self, settings: Settings | None = None, *, chat_model: ChatModel | None = None,
                 embedder: Embedder | None = None) -> None:
        self.settings = settings or load_settings()
        self._embedder = embedder
        self._llm = chat_model
        self._retriever: Retriever | None = None
        self._gen_name: str | None = None
        self._lock = threading.RLock()  # the retriever and its index generation
        self._llm_lock = threading.Lock()  # the model: loading it must not block searches
        self._translator: QueryTranslator | None = None
        self._translator_lock = threading.Lock()
        self.sessions: SessionStorage = open_store(self.settings)  # SQLite, or PostgreSQL for a database_url
        self.queue = GenerationQueue(self.settings.max_queue, self.settings.queue_timeout_s,
                                     self.settings.retry_after_s)
        self.params = RetrievalParams(dense_weight=self.settings.dense_weight)
        self.pipeline_config = pipeline.PipelineConfig.from_settings(self.settings)
        self._loaded = False  # set once load() has finished warming the model

    # ---- loading ------------------------------------------------------------------------------
    @property
    def embedder(self) -> Embedder:
        if self._embedder is None:
            snap_embedder = self._index_embedder_name()
            self._embedder = create_embedder(snap_embedder or self.settings.embedder, self.settings.threads)
        return self._embedder

    def _index_embedder_name(self) -> str | None:
        meta = current_meta(Path(self.settings.index_dir))
        return meta.embedder if meta is not None else None

    @property
    def retriever(self) -> Retriever:
        """The retriever over the live index generation; reopened when a build has replaced it."""
        with self._lock:
            gen = require_generation(Path(self.settings.index_dir))
            if self._retriever is None or gen.name != self._gen_name:
                old = self._retriever
                self._retriever = Retriever(IndexSnapshot(gen), self.embedder, self.params)
                self._gen_name = gen.name
                if old is not None:
                    old.snap.close()
            return self._retriever

    @property
    def llm(self) -> ChatModel:
        with self._llm_lock:
            if self._llm is None:
                from .llm.factory import create_chat_model

                self._llm = create_chat_model(self.settings)
            return self._llm

    @property
    def translator(self) -> QueryTranslator | None:
        """The question translator when settings.translate_queries is on, else None. It has its own model
        instance (settings.translate_model, or the remote engine): one llama.cpp context serves one thread."""
        if not self.settings.translate_queries:
            return None
        with self._translator_lock:
            if self._translator is None:
                self._translator = create_translator(self.settings)
            return self._translator

    def translate(self, question: str) -> str | None:
        """The question in the other language when translation is on and succeeds, else None."""
        tr = self.translator
        return tr.translate(question) if tr is not None else None

    def load(self, warm: bool = True) -> None:
        """Load index, embedder and model now (the server calls this at start-up).

        The model (memory-mapped weights, then its warmed system prompt, restored from disk when it was
        kept there) loads on a second thread while the index opens: llama.cpp releases the GIL, so the two
        overlap on two cores instead of adding up.
        """
        failed: list[BaseException] = []

        started = time.perf_counter()

        def load_model() -> None:
            try:
                llm = self.llm
                self.translate("ZeRO 分布式训练")  # loads and warms the translating model, when translation is on
                loaded = time.perf_counter()
                if warm:
                    from .answer.prompt import SYSTEM_PROMPT

                    llm.warmup(SYSTEM_PROMPT)
                log.info("model loaded in %.1f s, warmed in %.1f s (%s)", loaded - started,
                         time.perf_counter() - loaded, getattr(llm, "warmed_from", "") or "no cache")
            except BaseException as exc:  # re-raised on the caller's thread below
                failed.append(exc)

        model_thread = threading.Thread(target=load_model, name="assistant-load-model", daemon=True)
        model_thread.start()
        try:
            # one search loads jieba's dictionary and the embedder's graph, which otherwise cost the first
            # user ~2.5 s before the sources appear
            self.retriever.search("ZeRO 分布式训练 warm-up", k=1)
            log.info("index and embedder loaded in %.1f s", time.perf_counter() - started)
        finally:
            model_thread.join()
        if failed:
            raise failed[0]
        self._loaded = True

    def index_generation(self) -> str:
        """The live generation's directory (absolute): names one build of one index."""
        return str(self.retriever.snap.gen.resolve())

    def ready(self) -> bool:
        """True once load() finished: index open, model loaded and warmed."""
        return self._loaded

    def stats(self) -> dict[str, Any]:
        snap = self.retriever.snap
        langs: dict[str, int] = {}
        fws: dict[str, int] = {}
        for c in snap.chunks:
            langs[c.language] = langs.get(c.language, 0) + 1
            for f in c.frameworks:
                fws[f] = fws.get(f, 0) + 1
        return {"generation": snap.gen.name, "documents": len({c.source for c in snap.chunks}),
                "chunks": len(snap.chunks), "languages": langs, "frameworks": dict(sorted(fws.items())),
                "embedder": snap.embedder_name, "skipped": [list(s) for s in snap.meta.skipped],
                "chunk_tokens": snap.meta.chunk_tokens}

    # ---- retrieval ----------------------------------------------------------------------------
    def search(self, query: str, k: int = 5, filters: Filters | Mapping[str, Any] | None = None) -> list[Hit]:
        query = self._check_text(query, "query")
        if not 1 <= k <= 50:
            raise UserError("bad_k", "k must be between 1 and 50.", "k 必须在 1 到 50 之间。")
        return self.retriever.search(query, k=k, filters=Filters.parse(filters), translation=self.translate(query))

    def passage(self, chunk_id: str) -> Chunk | None:
        return self.retriever.snap.by_id.get(chunk_id)

    # ---- answers ------------------------------------------------------------------------------
    def ask(self, question: str, session_id: str | None = None, filters: Filters | Mapping[str, Any] | None = None,
            ticket: Ticket | None = None, *, owner: str | None = None) -> Answer:
        answer: Answer | None = None
        for ev in self.ask_stream(question, session_id, filters, ticket, owner=owner):
            if ev.kind == "done":
                answer = ev.data
        assert answer is not None
        return answer

    def ask_stream(self, question: str, session_id: str | None = None,
                   filters: Filters | Mapping[str, Any] | None = None, ticket: Ticket | None = None, *,
                   owner: str | None = None) -> Iterator[Event]:
        """Events: sources, token..., citations, done (see docs/architecture.md).

        `session_id`: None starts a new session owned by `owner`; otherwise it must be one the store issued to
        `owner` (assistant/sessions.py), else a 404 UserError before anything runs. `owner` is the caller's key
        (its owner id) or None for the keyless local user: the HTTP, UI and CLI adapters all pass it.

        `ticket`: a place in the generation queue taken when the request arrived (the HTTP routes take it on
        the event loop, in arrival order); without one, the place is taken now. It is given back when the
        answer needs no model or the stream ends early.
        """
        t0 = time.perf_counter()
        try:
            question = self._check_text(question, "question")
            sid = self.sessions.ensure(session_id, owner)
            ticket = ticket or self.queue.reserve()
            yield from self._answer_events(question, sid, filters, ticket, t0)
        finally:
            if ticket is not None:
                self.queue.cancel(ticket)  # no-op once the turn was used

    def _answer_events(self, question: str, sid: str, filters: Filters | Mapping[str, Any] | None,
                       ticket: Ticket, t0: float) -> Iterator[Event]:
        lang = detect_language(question)
        history = self.sessions.history(sid, self.settings.history_token_budget)
        standalone = rewrite_followup(strip_injection(question) or question, history)
        t_translate = time.perf_counter()
        translation = self.translate(standalone)
        translate_ms = (time.perf_counter() - t_translate) * 1000
        hits = self.retriever.search(standalone, k=self.settings.top_k, filters=Filters.parse(filters),
                                     translation=translation)
        retrieval_ms = (time.perf_counter() - t0) * 1000  # includes the translation
        decision = decide(standalone, hits)
        sources = [] if decision.refuse else self.evidence(standalone, hits)
        yield Event("sources", [s.hit for s in sources])
        answer = Answer(answer="", citations=[], refused=decision.refuse, language=lang, session_id=sid,
                        question=question, standalone_question=standalone, sources=[s.hit for s in sources])
        draft = ""  # the model's text before the check
        if decision.refuse:
            self.queue.cancel(ticket)
            result = pipeline.refused(decision.reason, lang)
            yield Event("token", result.text)
            ttft_ms = retrieval_ms
        else:
            messages = build_messages(standalone, sources, lang)
            with self.queue.turn(ticket) as waited:
                answer.queue = {"ticket": ticket.number, "wait_ms": round(waited * 1000, 1)}
                gen = yield from _token_events(pipeline.generate(self.llm, messages, self.pipeline_config, t0))
            draft = gen.text
            result = pipeline.check(draft, standalone, sources, self.pipeline_config, self.embedder, lang)
            answer.usage = {"prompt_tokens": gen.prompt_tokens, "completion_tokens": gen.completion_tokens}
            ttft_ms = (gen.ttft_s or 0.0) * 1000
        answer.answer, answer.citations, answer.refused = result.text, result.citations, result.refused
        answer.diagnostics = result.diagnostics
        answer.trace = AnswerTrace(retrieved=hits, evidence=[s.text for s in sources],
                                   draft=draft, final=result.text,
                                   refused_before_generation=decision.refuse)
        answer.timings = {"retrieval_ms": round(retrieval_ms, 1), "ttft_ms": round(ttft_ms, 1),
                          "total_ms": round((time.perf_counter() - t0) * 1000, 1)}
        if self.settings.translate_queries:
            answer.timings["translate_ms"] = round(translate_ms, 1)
            answer.diagnostics["translation"] = translation
        self._remember(answer, decision.reason)
        yield Event("citations", answer.citations)
        yield Event("done", answer)

    def evidence(self, question: str, hits: list[Hit], count_tokens: Callable[[str], int] | None = None) -> list[Source]:
        """The evidence an answer's prompt carries for these hits (the settings' budget and floor); benchmarks
        that run their own model pass its `count_tokens` so the service's model is not loaded."""
        return pipeline.evidence(question, hits, self.pipeline_config, count_tokens or self.llm.count_tokens,
                                 self.embedder)

    def prompt_messages(self, question: str, count_tokens: Callable[[str], int] | None = None) -> list[dict[str, str]]:
        """The messages the product sends the model for a standalone question, for benchmarks to replay."""
        hits = self.retriever.search(question, k=self.settings.top_k, translation=self.translate(question))
        return build_messages(question, self.evidence(question, hits, count_tokens), detect_language(question))

    def _remember(self, answer: Answer, reason: str) -> None:
        answer.message_id = self.sessions.add_turn(
            answer.session_id, answer.question, answer.answer,
            {"citations": [c.to_dict() for c in answer.citations], "refused": answer.refused, "reason": reason,
             "standalone_question": answer.standalone_question})

    # ---- sessions and feedback ----------------------------------------------------------------
    # `owner`: the caller's key (owner id), None for the keyless local user; another owner's session is None/404
    def get_session(self, session_id: str, *, owner: str | None = None) -> dict[str, Any] | None:
        return self.sessions.get(session_id, owner)

    def delete_session(self, session_id: str, *, owner: str | None = None) -> bool:
        return self.sessions.delete(session_id, owner)

    def feedback(self, session_id: str, message_id: str, rating: str, comment: str = "", *,
                 owner: str | None = None) -> None:
        if rating not in ("up", "down"):
            raise UserError("bad_rating", "rating must be 'up' or 'down'.", "rating 只能是 up 或 down。", 422)
        if len(comment) > 2000:
            raise UserError("too_long", "The comment is too long (max 2000 characters).", "评论过长（最多 2000 字）。", 413)
        if not self.sessions.has_message(session_id, message_id, owner):
            raise UserError("not_found", "No such message in this session.", "该会话中没有这条消息。", 404)
        self.sessions.add_feedback(session_id, message_id, rating, comment)

    # ---- advisor ------------------------------------------------------------------------------
    def advise(self, scenario: Any) -> Any:
        """The Advisor's answer for a scenario (fields, free text or both); a free text longer than
        settings.max_advice_chars is a 413 in the text's language."""
        from .advisor import advise

        text = scenario if isinstance(scenario, str) else (
            scenario.get("text") if isinstance(scenario, Mapping) else getattr(scenario, "text", ""))
        n = self.settings.max_advice_chars
        if isinstance(text, str) and len(text) > n:
            raise UserError("input_too_long", f"The description is too long (max {n} characters).",
                            f"描述过长（最多 {n} 个字符）。", 413)
        return advise(self, scenario)

    # ---- helpers ------------------------------------------------------------------------------
    def _check_text(self, text: Any, what: str) -> str:
        if not isinstance(text, str) or not text.strip():
            raise UserError("empty_input", f"The {what} is empty.", "问题不能为空。" if what == "question" else "查询不能为空。", 422)
        if len(text) > self.settings.max_question_chars:
            n = self.settings.max_question_chars
            raise UserError("input_too_long", f"The {what} is too long (max {n} characters).",
                            f"输入过长（最多 {n} 个字符）。", 413)
        return valid_unicode(text.strip())

    def close(self) -> None:
        if self._llm is not None:
            self._llm.close()
        if self._translator is not None:
            self._translator.close()
        if self._retriever is not None:
            self._retriever.snap.close()
        self.sessions.close()


def _token_events(pieces: Generator[str, None, pipeline.Generation]) -> Generator[Event, None, pipeline.Generation]:
    """The model's pieces as "token" events; returns the Generation. Closing it closes the model's stream."""
    try:
        while True:
            try:
                piece = next(pieces)
            except StopIteration as done:
                return done.value
            yield Event("token", piece)
    finally:
        pieces.close()
