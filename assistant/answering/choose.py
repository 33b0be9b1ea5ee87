"""A selection answer's plan: the situation and the recommendation stream at once (they come from the Advisor's
ranking, assistant/answer/selection.py writes them), then the model phrases the deciding reasons from the ranking's
cited facts, checked like every answer."""
from __future__ import annotations

from ..answer import selection
from ..answer.citations import CitationChecker
from ..answer.pipeline import PipelineConfig, Result
from ..embed import Embedder
from ..types import Answer, AnswerTrace
from .loop import Plan


def selection_plan(answer: Answer, sel: selection.SelectionPlan, config: PipelineConfig, embedder: Embedder,
                   user_text: str) -> Plan:
    """The plan of a selection answer from the Advisor's ranking (`sel`); the model runs only when the ranking has
    deciding reasons to phrase."""
    answer.sources = [s.hit for s in sel.sources]
    answer.advice = sel.advice
    # no passage quotes here: a model reason that adds to its fact is shown as the Advisor's fact
    # (selection.faithful_reasons), which is the quote's job on the fact path, and a quote there is the passage
    # sentence nearest the claim with its neighbour, often about something else
    checker = CitationChecker(embedder, config.support_threshold, quote_threshold=None)

    def finish(raw: str, stopped: bool) -> Result:
        done = selection.finish(sel, raw, checker, user_text, stopped=stopped)
        return Result(done.text, done.citations, diagnostics=done.diagnostics, sources=done.sources)

    def trace(raw: str, result: Result) -> AnswerTrace:
        # for the fact-loss table: the Advisor's cited passages are what was "retrieved" and shown (as its facts)
        return AnswerTrace(retrieved=[s.hit for s in sel.sources], evidence=[s.text for s in sel.sources],
                           draft=sel.lead + " " + raw, final=result.text)

    messages = selection.messages(sel, answer.standalone_question) if sel.reasons else None
    return Plan(answer, "selection", config, finish, trace, lead=sel.situation + "\n\n" + sel.lead,
                messages=messages, turn_lead=" ")
