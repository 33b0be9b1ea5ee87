"""The one answer loop: every answer (a fact answer, a refusal, a selection answer, a regenerated or edited turn)
runs through `AnswerLoop.run` with a `Plan` that says what it shows first, what the model is asked, and how the
model's text becomes the answer.

Owns what every answer shares: the "sources" event, the lead streamed before the model, the turn in the generation
queue, stopping (`cancel`) and a consumer that closes the stream (what was written is checked and kept), the
"status" event before the check, the language rule (an answer written in the other language than the question's is
put into the question's language by the model before the check), the timings, and saving the turn (a new turn, or a
new version of the last one). What a plan computes lives in answering/fact.py and answering/choose.py.
"""
from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

from .. import conversations, stopping
from ..answer import pipeline
from ..answer.citations import parse_markers
from ..answer.pipeline import Generation, PipelineConfig, Result
from ..answer.prompt import rewrite_messages
from ..genqueue import Cancelled, GenerationQueue, Ticket
from ..lang import off_language
from ..llm.base import ChatModel, Message
from ..sessions import SessionStorage
from ..types import CHECKING_CITATIONS, Answer, AnswerTrace, Event


@dataclass
class Plan:
    """One answer, decided before the model runs.

    `answer` is prefilled (question, language, session, sources, advice, refused). `lead` streams at once (a
    refusal's text, a selection answer's situation and recommendation). `messages` is the model's prompt (None: the
    model does not run, and the queue place is given back); `turn_lead` streams when the model's turn begins.
    `finish(raw, stopped)` makes the answer of the model's text; `trace(raw, result)` what the evaluator reads.
    `status`: a check runs, announced by a "status" event (not for a refusal)."""

    answer: Answer
    reason: str  # stored with the turn: why it was answered so ("selection", a policy reason)
    config: PipelineConfig
    finish: Callable[[str, bool], Result]
    trace: Callable[[str, Result], AnswerTrace]
    lead: str = ""
    messages: list[Message] | None = None
    turn_lead: str = ""
    status: bool = True
    base_temperature: float = 0.1  # the settings' temperature: a language retry samples no hotter than this
    timings: dict[str, float] = field(default_factory=dict)  # the plan's own (retrieval_ms, translate_ms)
    diagnostics: dict[str, Any] = field(default_factory=dict)  # added to the result's
    remember: dict[str, Any] = field(default_factory=dict)  # stored with the turn for the next one's router
    prefix: str = ""  # the system message kept as the model's cached prefix (a fact answer's pinned context)


class Parts(Protocol):
    """What the loop needs of the service."""

    queue: GenerationQueue
    sessions: SessionStorage

    @property
    def llm(self) -> ChatModel: ...

    def warm(self, system: str) -> None: ...


class AnswerLoop:
    def __init__(self, parts: Parts) -> None:
        self.parts = parts

    def run(self, plan: Plan, ticket: Ticket, handle: stopping.StopHandle, t0: float,
            replace: dict[str, Any] | None) -> Iterator[Event]:
        """The events of one answer: sources, token..., status, citations, done. The turn is saved even when the
        consumer leaves at "status" (the answer is checked and kept all the same) or mid-answer (what was written)."""
        answer = plan.answer
        yield Event("sources", answer.sources)
        first_ms: float | None = None
        if plan.lead:
            yield Event("token", plan.lead)
            first_ms = (time.perf_counter() - t0) * 1000
        raw = ""
        model_ttft_ms: float | None = None
        if plan.messages is not None:
            def keep_written(written: str) -> None:  # the consumer left mid-answer: keep it, as a stop would
                kept = plan.finish(written, True)
                if kept.text:
                    self._apply(answer, kept)
                    self._save(answer, plan, replace)

            gen = yield from self._generate(plan, ticket, handle, t0, keep_written)
            raw = gen.text
            answer.usage = {"prompt_tokens": gen.prompt_tokens, "completion_tokens": gen.completion_tokens}
            model_ttft_ms = (gen.ttft_s or 0.0) * 1000
        else:
            self.parts.queue.cancel(ticket)
        left = False
        if plan.status:
            try:
                yield Event("status", CHECKING_CITATIONS)
            except GeneratorExit:
                left = True
        result = plan.finish(raw, answer.stopped)
        self._apply(answer, result)
        answer.diagnostics.update(plan.diagnostics)
        answer.trace = plan.trace(raw, result)
        timings = dict(plan.timings)
        timings["ttft_ms"] = round(first_ms if first_ms is not None else model_ttft_ms or timings.get("retrieval_ms", 0.0), 1)
        if plan.lead and plan.status:  # the model's own first token, after the lead it follows
            timings["model_ttft_ms"] = round(model_ttft_ms or 0.0, 1)
        timings["total_ms"] = round((time.perf_counter() - t0) * 1000, 1)
        answer.timings = timings
        self._save(answer, plan, replace)
        if left:
            return
        yield Event("citations", answer.citations)
        yield Event("done", answer)

    def _generate(self, plan: Plan, ticket: Ticket, handle: stopping.StopHandle, t0: float,
                  keep_written: Callable[[str], None]) -> Generator[Event, None, Generation]:
        """The model's turn in the queue, streamed as "token" events (after `plan.turn_lead`, once the turn starts)
        and stoppable: a stop before the turn gives an empty Generation, a stop during it what was written (either
        way `answer.stopped`); a consumer that closes the stream gets `keep_written(what was written)` called, with
        `answer.stopped` set, before the close goes on (the model's stream is closed with it). A finished draft in
        the other language than the question's is put into its language in the same turn."""
        answer, queue = plan.answer, self.parts.queue
        written: list[str] = []
        try:
            with queue.turn(ticket) as waited:
                answer.queue = {"ticket": ticket.number, "wait_ms": round(waited * 1000, 1)}
                if plan.turn_lead:
                    yield Event("token", plan.turn_lead)
                llm = self.parts.llm
                if plan.prefix:
                    self.parts.warm(plan.prefix)
                gen = yield from stopping.stoppable_tokens(pipeline.generate(llm, plan.messages or [], plan.config, t0,
                                                                             answer.language),
                                                           handle.event, written, t0)
                if not handle.asked and off_language(gen.text, answer.language):
                    gen = self._rewrite_in_language(llm, plan, handle, gen)
        except Cancelled:
            if not handle.asked:
                raise
            gen = Generation("", None, 0, 0)  # stopped before its turn: nothing was written
        except GeneratorExit:
            answer.stopped = True
            keep_written("".join(written))
            raise
        answer.stopped = handle.asked
        return gen

    def _rewrite_in_language(self, llm: ChatModel, plan: Plan, handle: stopping.StopHandle,
                             first: Generation) -> Generation:
        """The draft put into the question's language by the model, not streamed, at the base temperature (the
        small models copy the language of their evidence; asked again the same way, they copy it again); the first
        draft stays when the rewrite is no better (still off, or without the draft's citations) or a stop came. The citation check then runs on the rewrite."""
        config = dataclasses.replace(plan.config, temperature=min(plan.config.temperature, plan.base_temperature))
        pieces: list[str] = []
        for piece in llm.stream(rewrite_messages(first.text, plan.answer.language),
                                max_tokens=config.max_answer_tokens + config.max_answer_tokens // 2,
                                temperature=config.temperature, language=plan.answer.language):
            if handle.asked:
                return first
            pieces.append(piece)
        text = "".join(pieces).strip()
        retry = {"first_draft": first.text, "kept": "rewrite"}
        plan.diagnostics["language_rewrite"] = retry
        cited = set(parse_markers(first.text)[1])
        if not text or off_language(text, plan.answer.language) or (cited and not cited & set(parse_markers(text)[1])):
            # in the other language still, or it lost the draft's citations: no better than the draft
            retry["kept"] = "first"
            return first
        usage = llm.last_usage
        return Generation(text, first.ttft_s, first.prompt_tokens + usage.prompt_tokens,
                          first.completion_tokens + usage.completion_tokens)

    @staticmethod
    def _apply(answer: Answer, result: Result) -> None:
        answer.answer, answer.citations, answer.refused = result.text, result.citations, result.refused
        answer.diagnostics = dict(result.diagnostics)
        if result.sources is not None:
            answer.sources = result.sources

    def _save(self, answer: Answer, plan: Plan, replace: dict[str, Any] | None) -> None:
        """The turn, stored: a new one, or a new version of the last one (`replace`, the stored last turn)."""
        sessions = self.parts.sessions
        extra: dict[str, Any] = {"citations": [c.to_dict() for c in answer.citations], "refused": answer.refused,
                                 "reason": plan.reason, "standalone_question": answer.standalone_question,
                                 "stopped": answer.stopped}
        if plan.remember:  # what the next turn's router reads (route.Turn)
            extra["route"] = plan.remember
        if replace is None:
            answer.message_id = sessions.add_turn(answer.session_id, answer.question, answer.answer, extra)
            return
        versioned = conversations.with_new_version(replace, answer.question, answer.answer, extra)
        sessions.replace_turn(answer.session_id, replace["answer_id"], answer.question, answer.answer, versioned)
        answer.message_id = replace["answer_id"]
        answer.alternatives = len(versioned["alternatives"])


def final(events: Iterator[Event]) -> Answer:
    """The answer of a stream of answer events (its "done")."""
    answer: Answer | None = None
    for ev in events:
        if ev.kind == "done":
            answer = ev.data
    assert answer is not None
    return answer
