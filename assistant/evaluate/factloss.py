"""Where key facts are lost along the answer chain: per fact, the first stage that no longer holds it.

Owns: the stages, the classification of one case's facts from its AnswerTrace, and the loss table (counts per
stage, overall, by kind and by language) with its difference from a baseline's. Facts are matched by
metrics.fact_present, the one matcher the fact recall uses, so `kept` / facts is the micro fact recall.

A fact that is in the final answer is `kept`. Otherwise it is lost at the first stage that lacks it:
    not_retrieved      no passage the retriever returned (every hit, before the evidence selection) holds it, nor
                       any pinned passage (the pinned documents are in the model's context whatever their rank)
    refused            retrieved, but policy.decide refused before generation (no evidence was shown)
    cut_by_evidence    retrieved, but not in the evidence the model was shown (budget, floor, max sources, or a
                       passage of another document that ranked below the pinned documents' best: pipeline.extra_hits)
    not_written        in the evidence, but not in the model's draft
    removed_by_check   in the draft, but not in the final answer (the citation check dropped or replaced it)
    error              the service raised for this case, or the answerer kept no trace
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..types import AnswerTrace
from .metrics import fact_present

STAGES = ("not_retrieved", "refused", "cut_by_evidence", "not_written", "removed_by_check", "kept", "error")


def fact_stage(fact: str, trace: AnswerTrace | None) -> str:
    """The stage at which one fact is lost, or "kept" (see the module docstring)."""
    if trace is None:
        return "error"
    if fact_present(fact, trace.final):
        return "kept"
    if not any(fact_present(fact, h.chunk.text) for h in trace.retrieved):
        return "not_retrieved"
    if trace.refused_before_generation:
        return "refused"
    if not any(fact_present(fact, e) for e in trace.evidence):
        return "cut_by_evidence"
    if not fact_present(fact, trace.draft):
        return "not_written"
    return "removed_by_check"


def classify(facts: Sequence[str], trace: AnswerTrace | None) -> list[dict[str, str]]:
    """[{fact, stage}] for each key fact of a case, in the case's order."""
    return [{"fact": f, "stage": fact_stage(f, trace)} for f in facts]


def counts(rows: Sequence[dict[str, Any]]) -> dict[str, int]:
    """Facts per stage (every stage present, zeros included) plus "facts", over result rows with "fact_loss"."""
    out = dict.fromkeys(STAGES, 0)
    for r in rows:
        for f in r.get("fact_loss") or []:
            out[f["stage"]] += 1
    return {"facts": sum(out.values()), **out}


def loss_table(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """summary["fact_loss"]: the counts overall, and the same under by_kind and by_lang."""
    table: dict[str, Any] = counts(rows)
    for field, key in (("kind", "by_kind"), ("lang", "by_lang")):
        groups: dict[str, list[dict[str, Any]]] = {}
        for r in rows:
            if r.get("fact_loss"):
                groups.setdefault(str(r.get(field)), []).append(r)
        table[key] = {g: counts(rs) for g, rs in sorted(groups.items())}
    return table


def loss_delta(table: dict[str, Any], base: dict[str, Any]) -> dict[str, int]:
    """This run's count minus the baseline's, per stage and for "facts" (a stage the baseline lacks counts as 0)."""
    return {k: int(table.get(k, 0)) - int(base.get(k, 0)) for k in ("facts",) + STAGES}
