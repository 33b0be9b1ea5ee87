"""AssistantService: the one object behind the CLI, the HTTP API, the Gradio UI and the evaluator.

It owns the loaded index (reloaded when a build replaces it), the embedder, the chat model, the
session store, the generation queue and the input checks, and sequences one answer:
question -> (follow-up rewrite) -> (translation, when on) -> retrieve -> refuse, or evidence -> prompt ->
queue turn -> generate -> (a "status" event) check citations -> remember the turn. What each step computes lives in
assistant/answer/pipeline.py; events are assistant.types.Event.
"""
from __future__ import annotations

import dataclasses
import hashlib
import logging
import threading
import time
from collections.abc import Callable, Generator, Iterator, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from . import conversations, stopping
from .advisor.intent import is_selection_question
from .answer import pinned as pinning
from .answer import pipeline, selection
from .answer.citations import CitationChecker
from .answer.policy import decide, rewrite_followup, strip_injection
from .answer.prompt import SYSTEM_PROMPT, Source, build_messages
from .documents import DocumentLibrary, Job
from .embed import Embedder, embedder_for
from .errors import UserError
from .filters import Filters
from .genqueue import Cancelled, GenerationQueue, Ticket
from .index.identity import EmbedderStatus, compare
from .index.location import IndexLocation, open_index
from .lang import detect_language
from .llm.base import ChatModel
from .retrieval import RetrievalParams, Retriever
from .sessions import SessionStorage, open_store, unknown_session
from .settings import Settings, load_settings
from .text import valid_unicode
from .translate import QueryTranslator, create_translator
from .types import CHECKING_CITATIONS, UPLOADS_FOLDER, Answer, AnswerTrace, Chunk, Event, Hit, source_kind

log = logging.getLogger(__name__)


class AssistantService:
    def __init__(self, settings: Settings | None = None, *, chat_model: ChatModel | None = None,
                 embedder: Embedder | None = None) -> None:
        self.settings = settings or load_settings()
        self._embedder = embedder
        self._llm = chat_model
        self._retriever: Retriever | None = None
        self._gen_name: str | None = None
        self._index: IndexLocation | None = None  # the index directory or Chroma server (opened on first use)
        self.embedder_status: EmbedderStatus | None = None  # the live generation's embedder against the settings
        self._lock = threading.RLock()  # the retriever and its index generation
        self._llm_lock = threading.Lock()  # the model: loading it must not block searches
        self._translator: QueryTranslator | None = None
        self._translator_lock = threading.Lock()
        self.sessions: SessionStorage = open_store(self.settings)  # SQLite, or PostgreSQL for a database_url
        self.queue = GenerationQueue(self.settings.max_queue, self.settings.queue_timeout_s,
                                     self.settings.retry_after_s)
        self.active = stopping.ActiveAnswers()  # answers being written, by session: what `cancel` stops
        self.params = RetrievalParams(dense_weight=self.settings.dense_weight)
        self.pipeline_config = pipeline.PipelineConfig.from_settings(self.settings)
        self._pinned: tuple[tuple[Any, ...], pinning.PinnedContext] | None = None  # (its key, the pinned context)
        self._loaded = False  # set once load() has finished warming the model
        self._closed = False  # set by close(): a warm-up still running then fails quietly
        self.documents = DocumentLibrary(self.settings, lambda: self.embedder, self._reopen)

    # ---- loading ------------------------------------------------------------------------------
    @property
    def embedder(self) -> Embedder:
        if self._embedder is None:
            meta = self.index.current_meta()
            self._embedder = embedder_for(self.settings, meta.embedder if meta else None, meta.dim if meta else None)
        return self._embedder

    @property
    def index(self) -> IndexLocation:
        """Where the index lives: settings.index_dir, or the Chroma server of settings.chroma_url."""
        if self._index is None:
            self._index = open_index(self.settings)
        return self._index

    @property
    def retriever(self) -> Retriever:
        """The retriever over the live index generation; reopened when a build has replaced it (in this process,
        another one, or another replica of a Chroma-server index). A generation whose embedder this process
        cannot reproduce is refused (assistant/index/identity.py)."""
        with self._lock:
            gen = self.index.require()
            if self._retriever is None or gen != self._gen_name:
                old = self._retriever
                snap = self.index.snapshot(gen)
                status = compare(snap.meta, self.settings.embedder, self._embedder_for(snap.embedder_name, snap.meta.dim))
                if status.status != "ok":
                    log.warning("index %s: %s", gen, status.en)
                if status.refuse:
                    snap.close()
                    raise status.error()
                self.embedder_status = status
                self._retriever = Retriever(snap, self.embedder, self.params)
                self._gen_name = gen
                if old is not None:
                    old.snap.close()
            return self._retriever

    def _embedder_for(self, name: str, dim: int | None = None) -> Embedder:
        """The embedder a generation needs: the loaded one when it has that name, else the one it names."""
        if self._embedder is None or self._embedder.name != name:
            self._embedder = embedder_for(self.settings, name, dim)
        return self._embedder

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
        index_open = threading.Event()

        started = time.perf_counter()

        def load_model() -> None:
            try:
                llm = self.llm
                self.translate("ZeRO 分布式训练")  # loads and warms the translating model, when translation is on
                loaded = time.perf_counter()
                if warm:
                    index_open.wait()  # the pinned prefix is made of the index's passages
                    llm.warmup(self.system_prompt())
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
            index_open.set()
            model_thread.join()
        if failed:
            raise failed[0]
        self._loaded = True

    def warm_advisor(self) -> None:
        """Resolve the Advisor's rubric facts for this index generation now (5-10 s, once per generation), so the
        first selection question does not wait for it; the server runs this in the background after load()."""
        from .advisor import load_rubric
        from .advisor.rubric import resolve_facts

        try:
            for lang in ("zh", "en"):
                resolve_facts(self, load_rubric(), lang)
        except Exception:  # a warm-up only: the first selection question resolves (and reports) it again
            if not self._closed:  # else the server stopped under it, which is no failure
                log.warning("Advisor warm-up failed", exc_info=True)

    def index_generation(self) -> str:
        """Names one build of one index: the live generation's directory (absolute), or on a Chroma server
        <url>/<prefix>/<generation>."""
        snap = self.retriever.snap
        return snap.location

    def ready(self) -> bool:
        """True once load() finished: index open, model loaded and warmed."""
        return self._loaded

    def ping(self) -> None:
        """Raise a UserError when a part the answers need cannot answer now: the sessions database, a Chroma server,
        the live generation (maybe a new one) with its embedder, a remote generation or embedding server (for
        /readyz; local engines have nothing to ask)."""
        self.sessions.ping()
        self.index.ping()
        self.retriever  # noqa: B018 (opens a new live generation, and refuses an embedder it cannot reproduce)
        if self._llm is not None:
            self._llm.ping()
        if self._embedder is not None:
            self._embedder.ping()

    def stats(self) -> dict[str, Any]:
        snap = self.retriever.snap
        langs: dict[str, int] = {}
        fws: dict[str, int] = {}
        for c in snap.chunks:
            langs[c.language] = langs.get(c.language, 0) + 1
            for f in c.frameworks:
                fws[f] = fws.get(f, 0) + 1
        return {"generation": snap.name, "documents": len({c.source for c in snap.chunks}),
                "chunks": len(snap.chunks), "languages": langs, "frameworks": dict(sorted(fws.items())),
                "embedder": snap.embedder_name, "skipped": [list(s) for s in snap.meta.skipped],
                "chunk_tokens": snap.meta.chunk_tokens}

    # ---- retrieval ----------------------------------------------------------------------------
    def search(self, query: str, k: int = 5, filters: Filters | Mapping[str, Any] | None = None) -> list[Hit]:
        query = self._check_text(query, "query")
        if not 1 <= k <= 50:
            raise UserError("bad_k", "k must be between 1 and 50.", "k 必须在 1 到 50 之间。")
        return self.retriever.search(query, k=k, filters=Filters.parse(filters), translation=self.translate(query))

    def search_explained(self, query: str, k: int = 5, filters: Filters | Mapping[str, Any] | None = None
                         ) -> tuple[list[Hit], dict[str, Any]]:
        """The hits of `search` and why they rank so (Retriever.explain: terms matched, weights)."""
        query = self._check_text(query, "query")
        if not 1 <= k <= 50:
            raise UserError("bad_k", "k must be between 1 and 50.", "k 必须在 1 到 50 之间。")
        retriever, translation = self.retriever, self.translate(query)
        hits = retriever.search(query, k=k, filters=Filters.parse(filters), translation=translation)
        return hits, retriever.explain(query, hits, translation)

    def passage(self, chunk_id: str) -> Chunk | None:
        return self.retriever.snap.by_id.get(chunk_id)

    # ---- answers ------------------------------------------------------------------------------
    def ask(self, question: str, session_id: str | None = None, filters: Filters | Mapping[str, Any] | None = None,
            ticket: Ticket | None = None, *, owner: str | None = None) -> Answer:
        return _final(self.ask_stream(question, session_id, filters, ticket, owner=owner))

    def ask_stream(self, question: str, session_id: str | None = None,
                   filters: Filters | Mapping[str, Any] | None = None, ticket: Ticket | None = None, *,
                   owner: str | None = None, client: str | None = None,
                   _replace: dict[str, Any] | None = None) -> Iterator[Event]:
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
        t0 = time.perf_counter()
        try:
            question = self._check_text(question, "question")
            sid = self.sessions.ensure(session_id, owner, client)
            ticket = ticket or self.queue.reserve()
            with self.active.track(sid, ticket, self.queue) as handle:
                yield from self._answer_events(question, sid, filters, ticket, t0, handle, _replace)
        finally:
            if ticket is not None:
                self.queue.cancel(ticket)  # no-op once the turn was used

    def _answer_events(self, question: str, sid: str, filters: Filters | Mapping[str, Any] | None,
                       ticket: Ticket, t0: float, handle: stopping.StopHandle,
                       replace: dict[str, Any] | None) -> Iterator[Event]:
        lang = detect_language(question)
        history = self.sessions.history(sid, self.settings.history_token_budget)
        if replace is not None:  # a new version of the last turn: the conversation before it
            history = history[:-2]
        config = self.pipeline_config
        if replace is not None:
            config = dataclasses.replace(config, temperature=conversations.regen_temperature(
                config.temperature, len(conversations.versions(replace))))
        standalone = rewrite_followup(strip_injection(question) or question, history)
        t_translate = time.perf_counter()
        translation = self.translate(standalone)
        translate_ms = (time.perf_counter() - t_translate) * 1000
        retriever = self.retriever  # one index generation for the whole answer
        hits = retriever.search(standalone, k=self.settings.top_k, filters=Filters.parse(filters),
                                     translation=translation)
        retrieval_ms = (time.perf_counter() - t0) * 1000  # includes the translation
        pinned = self.pinned_context(retriever.snap)
        near = retriever.similarities(standalone, pinned.chunks, translation)  # each pinned passage's closeness
        decision = decide(standalone, hits, known=retriever.knows, choosing=is_selection_question(standalone),
                          pinned_dense=max(near, default=0.0))
        user_turns = [m["content"] for m in history if m["role"] == "user"]
        if not decision.refuse and selection.is_selection(standalone, user_turns, lang, asked=question):
            plan = self._selection_plan(question, standalone, user_turns, lang)
            if plan is not None:
                yield from self._selection_events(plan, question, standalone, user_turns, sid, ticket, t0, retrieval_ms,
                                                  handle, replace, config)
                return
        pinned = pinning.NONE if decision.refuse else pinned
        sources = [] if decision.refuse else self.evidence(standalone, hits, pinned=pinned)
        focus = pipeline.focus(near, self.settings.pinned_focus, sources)
        shown = pipeline.pinned_shown(hits, pinned, focus) + sources  # the pinned passages ranked or named, the rest
        yield Event("sources", [s.hit for s in shown])
        answer = Answer(answer="", citations=[], refused=decision.refuse, language=lang, session_id=sid,
                        question=question, standalone_question=standalone, sources=[s.hit for s in shown])
        checked_sources = pinned.numbered() + sources  # what a citation may open
        draft = ""  # the model's text before the check
        left = False  # the consumer closed the stream at the "status" event: the answer is checked and kept all the same
        if decision.refuse:
            self.queue.cancel(ticket)
            result = pipeline.refused(decision, lang)
            yield Event("token", result.text)
            ttft_ms = retrieval_ms
        else:
            def keep_written(written: str) -> None:  # the consumer left mid-answer: keep it, as a stop would
                if written:
                    kept = stopping.check_stopped(written, checked_sources, config, self.embedder)
                    answer.answer, answer.citations, answer.diagnostics = kept.text, kept.citations, kept.diagnostics
                    self._remember(answer, decision.reason, replace)

            messages = build_messages(standalone, sources, lang, system=pinned.system, focus=focus)
            gen = yield from self._generate(messages, config, ticket, handle, t0, answer, keep_written)
            draft = gen.text
            try:
                yield Event("status", CHECKING_CITATIONS)
            except GeneratorExit:
                left = True
            result = (stopping.check_stopped(gen.text, checked_sources, config, self.embedder) if answer.stopped else
                      pipeline.check(gen.text, standalone, sources, config, self.embedder, lang,
                                     user_text="\n".join([*user_turns, question]), pinned=pinned, shown=shown))
            answer.usage = {"prompt_tokens": gen.prompt_tokens, "completion_tokens": gen.completion_tokens}
            ttft_ms = (gen.ttft_s or 0.0) * 1000
        answer.answer, answer.citations, answer.refused = result.text, result.citations, result.refused
        answer.diagnostics = result.diagnostics
        listed = {h.chunk.id for h in answer.sources}  # a cited pinned passage joins the sources the answer lists
        answer.sources += [s.hit for s in checked_sources if s.hit.chunk.id not in listed
                           and s.hit.chunk.id in {c.chunk_id for c in answer.citations}]
        answer.trace = AnswerTrace(retrieved=hits, evidence=[s.text for s in checked_sources],
                                   draft=draft, final=result.text,
                                   refused_before_generation=decision.refuse)
        answer.timings = {"retrieval_ms": round(retrieval_ms, 1), "ttft_ms": round(ttft_ms, 1),
                          "total_ms": round((time.perf_counter() - t0) * 1000, 1)}
        if self.settings.translate_queries:
            answer.timings["translate_ms"] = round(translate_ms, 1)
            answer.diagnostics["translation"] = translation
        self._remember(answer, decision.reason, replace)
        if left:
            return
        yield Event("citations", answer.citations)
        yield Event("done", answer)

    def _generate(self, messages: list[dict[str, str]], config: pipeline.PipelineConfig, ticket: Ticket,
                  handle: stopping.StopHandle, t0: float, answer: Answer, keep_written: Callable[[str], None],
                  lead: str = "") -> Generator[Event, None, pipeline.Generation]:
        """The model's turn in the queue, streamed as "token" events (after `lead`, once the turn starts) and
        stoppable: a stop before the turn gives an empty Generation, a stop during it what was written (either way
        `answer.stopped`); a consumer that closes the stream gets `keep_written(what was written)` called, with
        `answer.stopped` set, before the close goes on (the model's stream is closed with it)."""
        written: list[str] = []
        try:
            with self.queue.turn(ticket) as waited:
                answer.queue = {"ticket": ticket.number, "wait_ms": round(waited * 1000, 1)}
                if lead:
                    yield Event("token", lead)
                gen = yield from stopping.stoppable_tokens(pipeline.generate(self.llm, messages, config, t0),
                                                           handle.event, written, t0)
        except Cancelled:
            if not handle.asked:
                raise
            gen = pipeline.Generation("", None, 0, 0)  # stopped before its turn: nothing was written
        except GeneratorExit:
            answer.stopped = True
            keep_written("".join(written))
            raise
        answer.stopped = handle.asked
        return gen

    def _selection_plan(self, question: str, standalone: str, user_turns: list[str],
                        lang: str) -> selection.SelectionPlan | None:
        """The Advisor's ranking for the situation of the conversation so far, as a selection answer's parts; None
        when the Advisor cannot rank (the fact path answers then)."""
        from .advisor import situation_from_turns

        sc = situation_from_turns([*user_turns, question])
        sc.lang = lang
        try:
            advice = self.advise(sc)
        except (UserError, ValueError, KeyError, IndexError) as exc:  # e.g. no rubric fact resolves in this index
            log.warning("selection question answered on the fact path: the Advisor failed (%s)", exc)
            return None
        plan = selection.plan(advice, self.passage, lang, restrict=selection.compared_candidates(standalone))
        return plan if plan.sources else None

    def _selection_events(self, plan: selection.SelectionPlan, question: str, standalone: str, user_turns: list[str],
                          sid: str, ticket: Ticket, t0: float, retrieval_ms: float, handle: stopping.StopHandle,
                          replace: dict[str, Any] | None, config: pipeline.PipelineConfig) -> Iterator[Event]:
        """A selection answer: the situation and the recommendation stream at once (they come from the Advisor),
        then the model phrases the deciding reasons from the ranking's cited facts, checked like every answer."""
        lang = plan.lang
        answer = Answer(answer="", citations=[], refused=False, language=lang, session_id=sid, question=question,
                        standalone_question=standalone, sources=[s.hit for s in plan.sources], advice=plan.advice)
        yield Event("sources", answer.sources)
        yield Event("token", plan.situation + "\n\n" + plan.lead)
        ttft_ms = (time.perf_counter() - t0) * 1000
        raw = ""
        model_ttft_ms = 0.0
        # no passage quotes here: a model reason that adds to its fact is shown as the Advisor's fact
        # (selection.faithful_reasons), which is the quote's job on the fact path, and a quote there is the passage
        # sentence nearest the claim with its neighbour, often about something else
        checker = CitationChecker(self.embedder, config.support_threshold, quote_threshold=None)
        user_text = "\n".join([*user_turns, question])
        if plan.reasons:
            def keep_written(written: str) -> None:  # the consumer left: keep the recommendation and what was written
                kept = selection.finish(plan, written, checker, user_text, stopped=True)
                answer.answer, answer.citations, answer.sources = kept.text, kept.citations, kept.sources
                answer.diagnostics = kept.diagnostics
                self._remember(answer, "selection", replace)

            gen = yield from self._generate(selection.messages(plan, standalone), config, ticket, handle, t0, answer,
                                            keep_written, lead=" ")
            raw = gen.text
            answer.usage = {"prompt_tokens": gen.prompt_tokens, "completion_tokens": gen.completion_tokens}
            model_ttft_ms = (gen.ttft_s or 0.0) * 1000
        else:
            self.queue.cancel(ticket)
        left = False  # as in _answer_events: a consumer gone at "status" still gets its answer kept
        try:
            yield Event("status", CHECKING_CITATIONS)
        except GeneratorExit:
            left = True
        result = selection.finish(plan, raw, checker, user_text, stopped=answer.stopped)
        answer.answer, answer.citations, answer.sources = result.text, result.citations, result.sources
        answer.diagnostics = result.diagnostics
        # for the fact-loss table: the Advisor's cited passages are what was "retrieved" and shown (as its facts)
        answer.trace = AnswerTrace(retrieved=[s.hit for s in plan.sources], evidence=[s.text for s in plan.sources],
                                   draft=plan.lead + " " + raw, final=result.text)
        answer.timings = {"retrieval_ms": round(retrieval_ms, 1), "ttft_ms": round(ttft_ms, 1),
                          "model_ttft_ms": round(model_ttft_ms, 1), "total_ms": round((time.perf_counter() - t0) * 1000, 1)}
        self._remember(answer, "selection", replace)
        if left:
            return
        yield Event("citations", answer.citations)
        yield Event("done", answer)

    # ---- the pinned context ---------------------------------------------------------------------
    def pinned_context(self, snap: Any = None) -> pinning.PinnedContext:
        """The documents always in the model's context (answer/pinned.py): the user's pins, by default the reference
        article, made of the live index's passages; built once per (index generation, pins). Pins that no longer
        fit the budget (it was lowered) are left out from the last one, with a log line."""
        if not self.settings.pinned_context:
            return pinning.NONE
        snap = snap or self.retriever.snap  # the answer passes the generation it retrieved from
        chosen = pinning.load_pins(self.settings.state_dir)
        chunks = snap.chunks
        if chosen is None:
            chosen = pinning.default_pins(chunks)
        key = (snap.location, tuple(chosen), self.settings.pinned_token_budget)
        cached = self._pinned
        if cached is not None and cached[0] == key:
            return cached[1]
        while True:
            try:
                ctx = pinning.build(chunks, chosen, self.llm.count_tokens, self.settings.pinned_token_budget)
                break
            except UserError:
                log.warning("pinned documents over the budget of %d tokens: %s left out",
                            self.settings.pinned_token_budget, chosen[-1])
                chosen = chosen[:-1]
        self._pinned = (key, ctx)
        return ctx

    def system_prompt(self) -> str:
        """The system message every fact answer starts with: the pinned context, or the plain rules without one."""
        return self.pinned_context().system or SYSTEM_PROMPT

    def pinned_documents(self) -> dict[str, Any]:
        """What is pinned: the sources, their passages and tokens, the budget."""
        ctx = self.pinned_context()
        return {"enabled": self.settings.pinned_context, "sources": list(ctx.sources), "passages": ctx.k,
                "tokens": ctx.tokens, "budget": self.settings.pinned_token_budget}

    def _document_source(self, ref: str) -> str:
        """A document's source path from its id, source or name (as list_documents gives them)."""
        for d in self.list_documents():
            if ref in (d["id"], d["source"], d["name"]):
                return str(d["source"])
        raise UserError("unknown_document", f"No document {ref!r} in the index.", f"索引中没有文档 {ref!r}。", 404)

    def set_pins(self, refs: list[str]) -> dict[str, Any]:
        """Pin exactly these documents (ids, sources or names; [] pins none). A 404 for an unknown document, a 409
        when they do not fit the budget together; nothing changes then. The new prefix is computed in the
        background (the first answer after it waits for it otherwise)."""
        if not self.settings.pinned_context:
            raise UserError("pinning_off", "Pinned context is off (setting pinned_context).",
                            "置顶上下文已关闭（设置项 pinned_context）。", 409)
        sources = list(dict.fromkeys(self._document_source(r) for r in refs))
        pinning.build(self.retriever.snap.chunks, sources, self.llm.count_tokens, self.settings.pinned_token_budget)
        pinning.save_pins(self.settings.state_dir, sources)
        self._pinned = None
        if self._loaded:
            threading.Thread(target=self._rewarm, name="assistant-rewarm", daemon=True).start()
        return self.pinned_documents()

    def pin(self, ref: str) -> dict[str, Any]:
        return self.set_pins([*self.pinned_context().sources, ref])

    def unpin(self, ref: str) -> dict[str, Any]:
        source = self._document_source(ref)
        return self.set_pins([s for s in self.pinned_context().sources if s != source])

    def _rewarm(self) -> None:
        try:
            self.llm.warmup(self.system_prompt())
        except Exception:  # a warm-up only: the next answer prefills the prefix itself
            if not self._closed:
                log.warning("could not compute the new pinned prefix ahead of time", exc_info=True)

    def evidence(self, question: str, hits: list[Hit], count_tokens: Callable[[str], int] | None = None,
                 pinned: pinning.PinnedContext = pinning.NONE) -> list[Source]:
        """The evidence an answer's prompt carries for these hits (the settings' budget and floor), after the pinned
        context when one is given; benchmarks that run their own model pass its `count_tokens` so the service's
        model is not loaded."""
        return pipeline.evidence(question, hits, self.pipeline_config, count_tokens or self.llm.count_tokens,
                                 self.embedder, pinned)

    def prompt_messages(self, question: str, count_tokens: Callable[[str], int] | None = None,
                        pinned: pinning.PinnedContext | None = None) -> list[dict[str, str]]:
        """The messages the product sends the model for a standalone question, for benchmarks to replay (the live
        pinned context unless one is given; pinning.NONE replays the prompt without it)."""
        pinned = self.pinned_context() if pinned is None else pinned
        translation = self.translate(question)
        hits = self.retriever.search(question, k=self.settings.top_k, translation=translation)
        near = self.retriever.similarities(question, pinned.chunks, translation)
        sources = self.evidence(question, hits, count_tokens, pinned)
        focus = pipeline.focus(near, self.settings.pinned_focus, sources)
        return build_messages(question, sources, detect_language(question), system=pinned.system, focus=focus)

    def _remember(self, answer: Answer, reason: str, replace: dict[str, Any] | None = None) -> None:
        extra: dict[str, Any] = {"citations": [c.to_dict() for c in answer.citations], "refused": answer.refused, "reason": reason,
                 "standalone_question": answer.standalone_question, "stopped": answer.stopped}
        if replace is None:
            answer.message_id = self.sessions.add_turn(answer.session_id, answer.question, answer.answer, extra)
            return
        versioned = conversations.with_new_version(replace, answer.question, answer.answer, extra)
        self.sessions.replace_turn(answer.session_id, replace["answer_id"], answer.question, answer.answer, versioned)
        answer.message_id = replace["answer_id"]
        answer.alternatives = len(versioned["alternatives"])

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
            self._check_text(text, "query")  # the same 413 as a search
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
        try:
            if not self.sessions.exists(session_id, owner, client):
                raise unknown_session()
            last = self.sessions.last_turn(session_id)
            if last is None:
                raise conversations.nothing_to_regenerate()
        except BaseException:
            if ticket is not None:
                self.queue.cancel(ticket)
            raise
        yield from self.ask_stream(last["question"] if question is None else question, session_id, None, ticket,
                                   owner=owner, _replace=last)

    def regenerate(self, session_id: str, question: str | None = None, ticket: Ticket | None = None, *,
                   owner: str | None = None, client: str | None = None) -> Answer:
        return _final(self.regenerate_stream(session_id, question, ticket, owner=owner, client=client))

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
        pins = set(self._pinned[1].sources if self._pinned is not None else
                   pinning.load_pins(self.settings.state_dir) or pinning.default_pins(snap.chunks)
                   if self.settings.pinned_context else ())
        counts: dict[str, int] = {}
        for c in snap.chunks:
            counts[c.source] = counts.get(c.source, 0) + 1
        out: list[dict[str, Any]] = []
        if kind != "corpus":
            for d, status in [*((d, "indexed") for d in self.documents.registry().values()),
                              *((d, "adding") for d in self.documents.pending())]:
                src = f"{UPLOADS_FOLDER}/{d['id']}/{d['name']}"
                out.append({"id": d["id"], "name": d["name"], "kind": "upload", "source": src, "pinned": src in pins,
                            "chunks": counts.get(src, 0), "added": _iso(d["added"]), "size": d["size"],
                            "status": status})
        if kind != "upload":
            file_of = {src: path for path, src in snap.meta.file_sources.items()}
            for src, n in sorted(counts.items()):
                if source_kind(src) == "corpus":
                    f = Path(file_of.get(src, ""))
                    size = f.stat().st_size if file_of.get(src) and f.is_file() else None
                    out.append({"id": hashlib.sha256(src.encode()).hexdigest()[:16], "name": src, "kind": "corpus",
                                "source": src, "pinned": src in pins, "chunks": n, "added": _iso(snap.meta.created), "size": size,
                                "status": "indexed"})
        return out

    def _reopen(self) -> None:
        """After a build went live: open the new generation now, so the next search does not wait for it."""
        _ = self.retriever

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
        self._closed = True
        if self._llm is not None:
            self._llm.close()
        if self._translator is not None:
            self._translator.close()
        if self._retriever is not None:
            self._retriever.snap.close()
        self.sessions.close()


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).isoformat(timespec="seconds")


def _final(events: Iterator[Event]) -> Answer:
    """The answer of a stream of answer events (its "done")."""
    answer: Answer | None = None
    for ev in events:
        if ev.kind == "done":
            answer = ev.data
    assert answer is not None
    return answer
