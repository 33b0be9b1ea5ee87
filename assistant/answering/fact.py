"""A fact answer's plan: the refusal decided on the retrieved passages, or the evidence after the pinned prefix, the
prompt, and the check that turns the model's text into the answer (assistant/answer/pipeline.py computes each step;
this module puts them in a `Plan` for the answer loop)."""
from __future__ import annotations

from .. import stopping
from ..answer import pinned as pinning
from ..answer import pipeline
from ..answer.pipeline import PipelineConfig, Result
from ..answer.policy import Decision
from ..answer.prompt import Source, build_messages
from ..embed import Embedder
from ..types import Answer, AnswerTrace, Hit
from .loop import Plan


def fact_plan(answer: Answer, decision: Decision, hits: list[Hit], sources: list[Source],
              pinned: pinning.PinnedContext, focus: list[int], config: PipelineConfig, embedder: Embedder,
              user_text: str, *, selection: bool = False, several: bool = False) -> Plan:
    """The plan of a fact answer to `answer.standalone_question`: `sources` are the evidence after the pinned
    prefix (none when refused), `focus` the pinned passages the user's turn names; `selection` and `several` are the
    Route's (the prompt's hints)."""
    question, lang = answer.standalone_question, answer.language
    pinned = pinning.NONE if decision.refuse else pinned
    shown = pipeline.pinned_shown(hits, pinned, focus) + sources  # the pinned passages ranked or named, the rest
    answer.sources = [s.hit for s in shown]
    answer.refused = decision.refuse
    checked_sources = pinned.numbered() + sources  # what a citation may open

    def with_cited_pinned(result: Result) -> Result:
        """A cited pinned passage joins the sources the answer lists."""
        listed = {h.chunk.id for h in answer.sources}
        cited = {c.chunk_id for c in result.citations}
        result.sources = [*answer.sources, *(s.hit for s in checked_sources
                                             if s.hit.chunk.id not in listed and s.hit.chunk.id in cited)]
        return result

    def finish(raw: str, stopped: bool) -> Result:
        if decision.refuse:
            return pipeline.refused(decision, lang)
        if stopped:
            return with_cited_pinned(stopping.check_stopped(raw, checked_sources, config, embedder))
        return with_cited_pinned(pipeline.check(raw, question, sources, config, embedder, lang, user_text=user_text,
                                                pinned=pinned, shown=shown, quote=decision.quotes_closest))

    def trace(raw: str, result: Result) -> AnswerTrace:
        # the pinned passages are in the model's context whatever their rank: retrieved, for the loss table (the
        # other sources the model was shown come from `hits`)
        ranked = {h.chunk.id for h in hits}
        always = [s.hit for s in checked_sources if s.hit.chunk.id not in ranked]
        return AnswerTrace(retrieved=hits + always, evidence=[s.text for s in checked_sources], draft=raw,
                           final=result.text, refused_before_generation=decision.refuse)

    if decision.refuse:
        return Plan(answer, decision.reason, config, finish, trace, lead=decision.message(lang), status=False)
    messages = build_messages(question, sources, lang, system=pinned.system, focus=focus, selection=selection,
                              several=several)
    return Plan(answer, decision.reason, config, finish, trace, messages=messages, prefix=pinned.system)
