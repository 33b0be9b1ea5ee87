"""The Advisor's result as types: what `advise` returns and what the chat's selection answer reads.

Owns the shape of an `Advice` and its JSON (`Advice.to_dict()`, the contract of the HTTP, MCP, CLI and LangChain
adapters): the ranked candidates with their cited reasons, the candidate x criterion table, what would change the
top choice, the trial plan, the margin between the first two and a tie, and the cited passages
(assistant.types.Citation, numbered 1..N in order of first use; every `citations` list of numbers points into them).
A record's field order is its JSON's key order (dataclasses.asdict); the cited passages are written with their
link (`Citation.to_dict(link=True)`). It builds nothing (assistant/advisor/__init__.py assembles an Advice) and
imports no parser of a situation, so the answer path may read it (.importlinter).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from ..types import Citation


@dataclass(frozen=True)
class Situation:
    """The parsed situation as the answer shows it (read from `Advice.scenario`, the Scenario's JSON): who, what they
    know, the stage, the hardware, the model's size, the domain and the goals."""

    team_size: int | None = None
    org: str | None = None
    known_frameworks: tuple[str, ...] = ()
    stage: str | None = None
    hardware: str | None = None
    accelerators: int | None = None
    accelerator: str | None = None
    params: float | None = None
    domain: str | None = None
    goals: tuple[str, ...] = ()

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Situation:
        return cls(d.get("team_size"), d.get("org"), tuple(d.get("known_frameworks") or ()), d.get("stage"),
                   d.get("hardware"), d.get("accelerators"), d.get("accelerator"), d.get("params"), d.get("domain"),
                   tuple(d.get("goals") or ()))


@dataclass
class Reason:
    """A rubric fact as a cited reason: its claim, the passage number, the rubric's criterion and points, the
    document it comes from and the sentence of the passage it rests on."""

    text: str
    citations: list[int]
    criterion: str
    points: float
    source: str
    evidence: str


@dataclass
class RankedCandidate:
    """One candidate of the ranking: its weighted score, per-criterion scores, the strongest reasons for and against
    it, and every passage its reasons and its table row cite."""

    name: str
    score: float
    criteria: dict[str, float]
    reasons: list[Reason]
    citations: list[Citation] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self) | {"citations": [c.to_dict(link=True) for c in self.citations]}


@dataclass
class Cell:
    """A candidate's score on one criterion, the claims behind it and their passages."""

    score: float
    text: str
    citations: list[int]


@dataclass
class Row:
    name: str
    score: float
    cells: dict[str, Cell]  # criterion -> cell


@dataclass
class Table:
    """Candidate x criterion: the criteria in the rubric's order, their labels in the user's language, weights, and
    one row per candidate in ranking order."""

    criteria: list[str]
    labels: dict[str, str]
    weights: dict[str, float]
    rows: list[Row]


@dataclass
class Change:
    """What would change the top choice: one field of the situation set to `value` puts `new_top` first; the facts
    that make it so."""

    text: str
    field: str
    value: Any
    new_top: str
    citations: list[int]
    reasons: list[Reason]


@dataclass
class TrialPlan:
    """The article's trial: the same small pipeline on the two top candidates, and what to measure."""

    candidates: list[str]
    text: str
    steps: list[str]
    measure: list[str]
    citations: list[int]


@dataclass
class Margin:
    """The lead of the first candidate over the second, and how it reads: "tie" (below tie_epsilon), "narrow"
    (below narrow_below) or "clear"."""

    top: str
    runner_up: str
    value: float
    label: str
    tie_epsilon: float
    narrow_below: float


@dataclass
class TieChoice:
    """One of the tied candidates and its strongest cited facts that the others lack."""

    candidate: str
    score: float
    choose_if: list[Reason]


@dataclass
class Tie:
    candidates: list[str]
    text: str
    decides: list[TieChoice]


@dataclass
class Advice:
    """A ranked, cited recommendation for one situation (`scenario`: the parsed situation as Scenario.to_dict())."""

    ranking: list[RankedCandidate]
    table: Table
    what_would_change: list[Change]
    trial_plan: TrialPlan
    citations: list[Citation]
    scenario: dict[str, Any]
    language: str
    summary: str
    dropped_facts: list[str]  # rubric facts no passage of the index states (left out of the scoring)
    margin: Margin
    tie: Tie | None = None
    compared: list[str] = field(default_factory=list)  # the candidates the question weighs ([]: all are ranked)

    def to_dict(self) -> dict[str, Any]:
        return {"summary": self.summary, "margin": asdict(self.margin), "tie": asdict(self.tie) if self.tie else None,
                "ranking": [r.to_dict() for r in self.ranking], "table": asdict(self.table),
                "what_would_change": [asdict(w) for w in self.what_would_change], "trial_plan": asdict(self.trial_plan),
                "citations": [c.to_dict(link=True) for c in self.citations], "scenario": self.scenario,
                "language": self.language, "dropped_facts": self.dropped_facts, "compared": self.compared}
