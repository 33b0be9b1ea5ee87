"""From a question in a session to its answer's events: the one way every question is answered (ask, regenerate,
edit; the CLI, the HTTP API, the OpenAI route, the UI, MCP, LangChain and the evaluator all come through here).

Owns the order of the steps: the input check and the session, the per-session order (a question asked while the
session's answer is still being written or stopped waits for it, so it is never lost and sees that turn), the
follow-up rewrite from the stored turn before, the translation, one retrieval over one index generation, the
question's Route (assistant/route.py: its kind, the refusal decision, the situation, what it compares), and the answer loop (answering/loop.py) that runs the
chosen plan.
"""
from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Protocol

from .. import conversations, stopping
from .. import route as router
from ..answer import pinned as pinning
from ..answer import pipeline, selection
from ..answer.policy import strip_injection
from ..answer.prompt import Source
from ..embed import Embedder
from ..errors import UserError
from ..filters import Filters
from ..genqueue import Ticket
from ..lang import detect_language
from ..llm.base import Message
from ..retrieval import Retriever
from ..sessions import unknown_session
from ..settings import Settings
from ..types import Answer, Chunk, Event, Hit
from .choose import selection_plan
from .fact import fact_plan
from .loop import AnswerLoop, Parts, Plan

log = logging.getLogger(__name__)


class Service(Parts, Protocol):
    """What answering needs of the service (assistant/service.py)."""

    settings: Settings
    active: stopping.ActiveAnswers
    pipeline_config: pipeline.PipelineConfig

    @property
    def retriever(self) -> Retriever: ...
    @property
    def embedder(self) -> Embedder: ...
    def translate(self, question: str) -> str | None: ...
    def pinned_context(self, snap: Any = None, lang: str = "", build: bool = True) -> pinning.PinnedContext: ...
    def evidence(self, question: str, hits: list[Hit], count_tokens: Any = None,
                 pinned: pinning.PinnedContext = pinning.NONE, several: bool = False,
                 article: bool = False, retriever: Retriever | None = None) -> list[Source]: ...
    def advise(self, scenario: Any, among: Sequence[str] = ()) -> Any: ...
    def passage(self, chunk_id: str) -> Chunk | None: ...
    def check_text(self, text: Any, what: str) -> str: ...
    def kind_classifier(self) -> Any: ...


@dataclasses.dataclass(frozen=True)
class Retrieval:
    """What `Answerer.retrieve` found for a question."""

    retriever: Retriever  # the one index generation it searched
    hits: list[Hit]
    pinned: pinning.PinnedContext  # the pinned documents as they are
    twin: tuple[str, ...]  # their passages read in the question's language ((): none, or not translated yet)
    translation: str | None
    translate_ms: float

    def closeness(self, question: str) -> list[float]:
        """Each pinned passage's closeness to `question` (its own words or its twin's, with the translation): the
        evidence the refusal, the router and the focus line read from the pinned documents."""
        return self.retriever.similarities(question, self.pinned.chunks, self.translation, self.twin)


def _readings(pinned: pinning.PinnedContext, twin: tuple[str, ...]) -> dict[str, str] | None:
    """The pinned passages' twin texts by chunk id (search's `readings`); None without a twin."""
    return dict(zip((c.id for c in pinned.chunks), twin, strict=True)) if twin else None


class Answerer:
    def __init__(self, service: Service) -> None:
        self.service = service
        self.loop = AnswerLoop(service)

    def answer_stream(self, question: str | None, session_id: str | None, filters: Filters | Mapping[str, Any] | None,
               ticket: Ticket | None, *, owner: str | None, client: str | None,
               regenerate: bool = False) -> Iterator[Event]:
        """The events of one answer (see AssistantService.ask_stream). `regenerate`: a new version of the session's
        last turn, for `question` (an edited question) or, when None, the last question again."""
        svc = self.service
        t0 = time.perf_counter()
        try:
            if regenerate:
                if session_id is None or not svc.sessions.exists(session_id, owner, client):
                    raise unknown_session()
                sid = svc.sessions.ensure(session_id, owner, None)
            else:
                question = svc.check_text(question, "question")
                sid = svc.sessions.ensure(session_id, owner, client)
            ticket = ticket or svc.queue.reserve()
            with svc.active.track(sid, ticket, svc.queue, wait_s=svc.settings.queue_timeout_s or 600.0) as handle:
                replace = None
                if regenerate:
                    replace = svc.sessions.last_turn(sid)  # after the session's earlier answer was saved
                    if replace is None:
                        raise conversations.nothing_to_regenerate()
                    question = svc.check_text(replace["question"] if question is None else question, "question")
                assert question is not None
                plan = self._plan(question, sid, filters, t0, replace)
                yield from self.loop.run(plan, ticket, handle, t0, replace)
        finally:
            if ticket is not None:
                svc.queue.cancel(ticket)  # no-op once the turn was used

    def prompt_messages(self, question: str, count_tokens: Callable[[str], int] | None = None) -> list[Message]:
        """The model's prompt for a question asked outside any session, made exactly as an answer makes it (the
        Route, the evidence, the pinned context): what benchmarks replay on their own model, whose `count_tokens`
        they pass so the service's model is not loaded. [] when the model would not run (a refusal)."""
        plan = self._plan(question, "", None, time.perf_counter(), None, count_tokens)
        return list(plan.messages or [])

    def check_draft(self, question: str, draft: str) -> pipeline.Result | None:
        """What the answer to `question` (asked outside any session) makes of the model's text `draft`: the plan made
        exactly as an answer makes it (the Route, the evidence, the pinned context), then its check. None when the
        model would not run (a refusal, a selection answer without reasons). bench/recheck.py replays an evaluation
        run's recorded drafts through it, so a change to the check is measured without the model."""
        plan = self._plan(question, "", None, time.perf_counter(), None)
        return plan.finish(draft, False) if plan.messages else None

    def _plan(self, question: str, sid: str, filters: Filters | Mapping[str, Any] | None, t0: float,
              replace: dict[str, Any] | None, count_tokens: Callable[[str], int] | None = None) -> Plan:
        svc, settings = self.service, self.service.settings
        lang = detect_language(question)
        history = svc.sessions.history(sid, settings.history_token_budget)
        config = svc.pipeline_config
        if replace is not None:  # a new version of the last turn: the conversation before it, sampled hotter
            history = history[:-2]
            config = dataclasses.replace(config, temperature=conversations.regen_temperature(
                config.temperature, len(conversations.versions(replace))))
        asked = strip_injection(question) or question
        user_turns = [m["content"] for m in history if m["role"] == "user"]
        previous = self._previous_turn(sid, replace) if history else None
        standalone = router.standalone_question(asked, previous, user_turns)
        found = self.retrieve(standalone, lang, filters)
        retriever, hits, pinned, translation = found.retriever, found.hits, found.pinned, found.translation
        retrieval_ms = (time.perf_counter() - t0) * 1000  # includes the translation
        route, near = self.route(asked, standalone, lang, found, previous, user_turns)
        user_text = "\n".join([*user_turns, question])
        answer = Answer(answer="", citations=[], refused=False, language=lang, session_id=sid, question=question,
                        standalone_question=route.standalone)
        plan: Plan | None = None
        if route.selection:
            sel = self.selection(route)
            if sel is not None:
                plan = selection_plan(answer, sel, config, svc.embedder, user_text)
                plan.remember = router.remembered(route, sel.recommended)
        if plan is None:
            decision = route.decision
            if not decision.refuse:  # the model reads them in the question's language (their twin, answering/twin.py)
                pinned = svc.pinned_context(retriever.snap, lang)
            sources = [] if decision.refuse else svc.evidence(standalone, hits, count_tokens, pinned=pinned,
                                                              several=route.several, article=route.article,
                                                              retriever=retriever)
            focus = pipeline.focus(near, settings.pinned_focus, sources)
            plan = fact_plan(answer, decision, hits, sources, pinned, focus, config, svc.embedder, user_text,
                             selection=route.selection, several=route.several)
            plan.remember = router.remembered(route)
            if settings.translate_queries:
                plan.timings["translate_ms"] = round(found.translate_ms, 1)
                plan.diagnostics["translation"] = translation
        plan.timings["retrieval_ms"] = round(retrieval_ms, 1)
        plan.base_temperature = svc.pipeline_config.temperature
        return plan

    def retrieve(self, standalone: str, lang: str, filters: Filters | Mapping[str, Any] | None = None,
                 k: int | None = None) -> Retrieval:
        """The passages an answer to `standalone` (asked in `lang`) is written from: one search over one index
        generation, with the question's translation when the settings ask for it and the pinned passages also read
        through their twin in `lang` once it is translated (a refusal never waits for a first start's
        translations). The twin's reading counts for the ranking (other documents' passages follow the prefix only
        when they rank above the pinned ones), the refusal's evidence and the focus line: an English question is far
        from the Chinese passage that answers it (dev: article-en2-24, refused for weak evidence; article-en2-03,
        answered from a PaddlePaddle note ranked above the article)."""
        svc = self.service
        t = time.perf_counter()
        translation = svc.translate(standalone)
        translate_ms = (time.perf_counter() - t) * 1000
        retriever = svc.retriever  # one index generation for the whole answer
        pinned = svc.pinned_context(retriever.snap)  # the documents as they are
        read = svc.pinned_context(retriever.snap, lang, build=False)
        twin = tuple(read.texts) if read.chunks == pinned.chunks else ()
        hits = retriever.search(standalone, k=k or svc.settings.top_k, filters=Filters.parse(filters),
                                translation=translation, readings=_readings(pinned, twin))
        return Retrieval(retriever, hits, pinned, twin, translation, translate_ms)

    def route(self, asked: str, standalone: str, lang: str, found: Retrieval, previous: router.Turn | None,
              user_turns: list[str]) -> tuple[router.Route, list[float]]:
        """The question's Route (assistant/route.py) from what its retrieval found, and the pinned passages'
        closeness to it (the refusal's evidence and the focus line): `asked` is the user's question (injection
        stripped), `standalone` it after the follow-up rewrite, `previous` the turn before, `user_turns` the user's
        earlier words. bench/route_accuracy.py routes its cases through here."""
        near = found.closeness(standalone)
        route = router.route(asked, standalone, lang, found.hits, previous=previous, user_turns=user_turns,
                             vector=_query_vector(found.retriever, standalone, found.translation),
                             classifier=self.service.kind_classifier(), known=found.retriever.knows,
                             pinned_dense=max(near, default=0.0),
                             article_pinned=found.pinned.has_article)
        return route, near

    def _previous_turn(self, sid: str, replace: dict[str, Any] | None) -> router.Turn | None:
        """The turn before this question, as the session store kept it (its question and `extra`); for a new
        version of the last turn, the one before that."""
        sessions = self.service.sessions
        if replace is None:  # the last turn alone, not the whole session
            last = sessions.last_turn(sid)
            return router.Turn.from_message(last["question"], last["extra"]) if last else None
        messages = (sessions.get(sid) or {}).get("messages", [])[:-2]
        if len(messages) < 2 or messages[-1]["role"] != "assistant" or messages[-2]["role"] != "user":
            return None
        return router.Turn.from_message(messages[-2]["content"], messages[-1])

    def selection(self, route: router.Route) -> selection.SelectionPlan | None:
        """The Advisor's ranking for the situation of the conversation so far (the Route's), as a selection answer's
        parts, among the candidates the question compares; None when the Advisor cannot rank (the fact path answers
        then)."""
        svc = self.service
        try:
            advice = svc.advise(route.situation.replace(), route.compared)
        except (UserError, ValueError, KeyError, IndexError) as exc:  # e.g. no rubric fact resolves in this index
            log.warning("selection question answered on the fact path: the Advisor failed (%s)", exc)
            return None
        sel = selection.plan(advice, svc.passage, route.situation.lang)
        return sel if sel.sources else None


def _query_vector(retriever: Retriever, standalone: str, translation: str | None) -> Any:
    """The question's query embedding for the router's classifier (the one retrieval computed); None when the
    embedder failed after the search (a remote one went away): the router then decides by wording."""
    try:
        return retriever.query_vector(standalone, translation)
    except Exception as exc:
        log.warning("no query vector for the router (%s)", exc)
        return None
