"""The rubric: load the table of facts (rubric.yaml), resolve each fact to a passage in the index, and score.

A fact says "for this candidate, under this condition on the scenario, this criterion gains (or loses) so many
points, because of this claim", and names the evidence: a search query, the source path it must come from and
strings the passage must contain. `resolve_facts` runs `service.search(query, k=5, filters={"source": ...})`
once per fact and language and keeps the first hit that matches; facts without a passage are dropped, so no
score rests on an uncited claim. `score` is pure: same scenario and resolved facts -> same result.
This module does not build the Advice (see __init__.py) and never calls the language model.
"""
from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml

from ..interfaces import Searcher
from .scenario import Scenario

RUBRIC_PATH = Path(__file__).with_name("rubric.yaml")
FAMILY_ALIASES = {"DeepSpeed": "PyTorch", "Megatron-LM": "PyTorch", "Colossal-AI": "PyTorch"}


@dataclass(frozen=True)
class Fact:
    id: str
    candidate: str
    criterion: str
    when: dict[str, Any]
    points: float
    claim: dict[str, str]  # {"zh": ..., "en": ...}
    source: str
    query: str
    match: tuple[str, ...]


@dataclass
class Rubric:
    candidates: list[str]
    bases: dict[str, str]
    weights: dict[str, float]
    criteria: dict[str, dict[str, str]]
    scale: float
    facts: list[Fact]
    trial_plan: dict[str, Any]
    tie_epsilon: float = 0.015
    trial_fact: Fact = field(init=False)

    def __post_init__(self) -> None:
        ev = self.trial_plan["evidence"]
        self.trial_fact = Fact("trial-plan", "", "", {}, 0, {"zh": self.trial_plan["zh"], "en": self.trial_plan["en"]},
                               ev["source"], ev["query"], tuple(ev["match"]))


@lru_cache(maxsize=4)
def load_rubric(path: Path = RUBRIC_PATH) -> Rubric:
    """Parse rubric.yaml; facts naming several candidates are expanded to one fact per candidate."""
    raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    bases = {c["name"]: c["base"] for c in raw["candidates"]}
    facts = []
    for f in raw["facts"]:
        names = f["candidate"] if isinstance(f["candidate"], list) else [f["candidate"]]
        for name in names:
            if name not in bases or f["criterion"] not in raw["weights"]:
                raise ValueError(f"rubric fact {f['id']}: unknown candidate {name!r} or criterion {f['criterion']!r}")
            claim = {k: f[k].format(name=name, base=bases[name]) for k in ("zh", "en")}
            ev = f["evidence"]
            facts.append(Fact(f"{f['id']}:{name}" if len(names) > 1 else f["id"], name, f["criterion"], f.get("when") or {},
                              float(f["points"]), claim, ev["source"], ev["query"], tuple(str(m) for m in ev["match"])))
    return Rubric(list(bases), bases, {k: float(v) for k, v in raw["weights"].items()}, raw["criteria"],
                  float(raw.get("scale", 4)), facts, raw["trial_plan"], float(raw.get("tie_epsilon", 0.015)))


# ---- conditions ----------------------------------------------------------------------------------
def _team(sc: Scenario, base: str) -> str:
    known = {FAMILY_ALIASES.get(k, k) for k in sc.known_frameworks}
    if not known:
        return "none"
    return "knows" if base in known else "other"


def applies(fact: Fact, sc: Scenario, base: str) -> bool:
    """All keys of the fact's condition hold for the scenario."""
    return _holds(fact.when, fact.id, sc, base)


def _holds(when: dict[str, Any], fact_id: str, sc: Scenario, base: str) -> bool:
    params = sc.params
    for key, val in when.items():
        if key == "any":  # a list of conditions, one of which must hold
            ok = any(_holds(alt, fact_id, sc, base) for alt in val)
        elif key in ("stage", "hardware", "domain", "lang", "org", "experience"):
            ok = getattr(sc, key) in val
        elif key == "not_hardware":
            ok = sc.hardware is not None and sc.hardware not in val
        elif key == "goals":
            ok = any(g in sc.goals for g in val)
        elif key == "min_params":
            ok = params is not None and params >= float(val)
        elif key == "max_params":
            ok = params is not None and params < float(val)
        elif key == "min_accelerators":
            ok = sc.accelerators is not None and sc.accelerators >= int(val)
        elif key == "max_accelerators":
            ok = sc.accelerators is not None and sc.accelerators < int(val)
        elif key == "accelerators_stated":
            ok = (sc.accelerators is not None) == bool(val)
        elif key == "max_team_size":
            ok = sc.team_size is not None and sc.team_size <= int(val)
        elif key == "team":
            ok = _team(sc, base) == val
        else:
            raise ValueError(f"rubric fact {fact_id}: unknown condition {key!r}")
        if not ok:
            return False
    return True


# ---- resolution ----------------------------------------------------------------------------------
_cache: dict[tuple[str, str], dict[str, Any]] = {}
_cache_lock = threading.Lock()


def resolve(service: Searcher, fact: Fact, lang: str) -> Any | None:
    """The Hit supporting the fact, preferring passages in `lang`; None when no passage matches.

    The evidence query is tried first, then the claim itself (robust to chunking changes)."""
    queries = [fact.query] + [fact.claim[k] for k in (lang, "en", "zh") if fact.claim.get(k)]
    for query, filters in ((q, f) for q in dict.fromkeys(queries)
                           for f in ({"source": fact.source, "language": lang}, {"source": fact.source})):
        for hit in service.search(query, k=5, filters=filters):
            low = hit.chunk.text.lower()
            if hit.chunk.source.endswith(fact.source) and any(m.lower() in low for m in fact.match):
                return hit
    return None


def resolve_facts(service: Searcher, rubric: Rubric, lang: str) -> dict[str, Any]:
    """fact id -> Hit for every fact (and the trial plan) that has a supporting passage; cached per index generation."""
    key = (service.index_generation(), lang)
    with _cache_lock:
        if key in _cache:
            return _cache[key]
    found: dict[str, Any] = {}
    by_query: dict[tuple[str, str, tuple[str, ...]], Any] = {}
    for fact in [*rubric.facts, rubric.trial_fact]:
        qkey = (fact.query, fact.source, fact.match)
        if qkey not in by_query:
            by_query[qkey] = resolve(service, fact, lang)
        if by_query[qkey] is not None:
            found[fact.id] = by_query[qkey]
    with _cache_lock:
        _cache[key] = found
    return found


# ---- scoring -------------------------------------------------------------------------------------
@dataclass
class CandidateScore:
    name: str
    total: float
    criteria: dict[str, float]
    facts: dict[str, list[Fact]]  # criterion -> applicable resolved facts


def score(rubric: Rubric, sc: Scenario, resolved: dict[str, Any], among: Sequence[str] = ()) -> list[CandidateScore]:
    """Rank the candidates (those of `among` when given), best first; ties broken by the rubric's candidate order."""
    out = []
    for name in rubric.candidates:
        if among and name not in among:
            continue
        base = rubric.bases[name]
        per: dict[str, list[Fact]] = {c: [] for c in rubric.weights}
        for fact in rubric.facts:
            if fact.candidate == name and fact.id in resolved and applies(fact, sc, base):
                per[fact.criterion].append(fact)
        crit = {c: criterion_score(sum(f.points for f in fs), rubric.scale) for c, fs in per.items()}
        total = round(sum(rubric.weights[c] * s for c, s in crit.items()), 4)
        out.append(CandidateScore(name, total, crit, per))
    order = {n: i for i, n in enumerate(rubric.candidates)}
    return sorted(out, key=lambda c: (-c.total, order[c.name]))


def criterion_score(points: float, scale: float) -> float:
    """0.5 is neutral (no evidence either way); +scale points or more -> 1.0, -scale or less -> 0.0."""
    return round(0.5 + max(-scale, min(scale, points)) / (2 * scale), 4)
