"""The Advisor: from a team's situation to a ranked, cited framework recommendation.

`advise(service, scenario)` parses the scenario (Scenario, dict or free text), resolves the rubric's facts to
passages of the index (rubric.py), scores every candidate, and assembles an `Advice`: the ranking with
reasons, a candidate x criterion table in which every cell cites a passage, the margin between the first two
(a tie when it is below the rubric's `tie_epsilon`, with the cited facts that decide between the tied ones),
what would change the top choice (the rubric re-run with one field changed), and the article's trial plan for
the two top candidates.
Deterministic and model-free: it uses `service.search` only, never the language model.
Owns the assembly of an Advice (its types and JSON are advice.py's) and the numbering of its passages.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..interfaces import Searcher
from ..text import split_sentences
from ..types import SNIPPET_MAX, Citation, Numbering
from .advice import Advice, Cell, Change, Margin, RankedCandidate, Reason, Row, Table, Tie, TieChoice, TrialPlan
from .rubric import CandidateScore, Fact, Rubric, load_rubric, resolve_facts, score
from .scenario import HARDWARE, STAGES, Scenario, merge_situation, parse_free_text, situation_from_turns, to_scenario

__all__ = ["Advice", "Scenario", "advise", "parse_free_text", "merge_situation", "situation_from_turns", "load_rubric"]
NARROW_MARGIN = 0.05  # below this (and above the tie epsilon) the lead is reported as narrow


class _Citations:
    """The facts' passages as citations, numbered 1..N in order of first use; one number per passage."""

    def __init__(self, resolved: dict[str, Any]) -> None:
        self.resolved = resolved
        self.numbers: Numbering[str] = Numbering()  # chunk id -> n
        self.records: list[Citation] = []

    def cite(self, fact: Fact) -> int:
        hit = self.resolved[fact.id]
        c = hit.chunk
        n = self.numbers.number(c.id)
        if n > len(self.records):
            snippet = c.text if len(c.text) <= SNIPPET_MAX else c.text[:SNIPPET_MAX] + "…"
            self.records.append(Citation.from_chunk(n, c, snippet, hit.dense))
        return n

    def evidence(self, fact: Fact) -> str:
        """The sentence of the fact's passage that holds one of its match strings (what the fact rests on)."""
        text = self.resolved[fact.id].chunk.text
        for sentence in split_sentences(text) or [text]:
            if any(m.lower() in sentence.lower() for m in fact.match):
                return " ".join(sentence.split())
        return " ".join(text.split())[:300]

    def reason(self, fact: Fact, lang: str) -> Reason:
        """A fact as a cited reason: its claim, the passage number, where it comes from and the sentence it rests on."""
        return Reason(fact.claim[lang], [self.cite(fact)], fact.criterion, fact.points, fact.source, self.evidence(fact))


def advise(service: Searcher, scenario: Scenario | dict[str, Any] | str, among: Sequence[str] = ()) -> Advice:
    """The Advice for a scenario; `among`: the candidates a question weighs against each other ("JAX or PyTorch?"),
    then the ranking, table, margin, what would change and the trial are theirs (with fewer than two of the rubric's
    candidates named, all are ranked)."""
    sc = to_scenario(scenario)
    rubric = load_rubric()
    resolved = resolve_facts(service, rubric, sc.lang)
    among = [n for n in rubric.candidates if n in among]
    among = among if len(among) >= 2 else []
    ranked = score(rubric, sc, resolved, among)
    cites = _Citations(resolved)
    lang = sc.lang
    ranking = [_ranking_entry(rubric, cs, cites, lang) for cs in ranked]
    table = _table(rubric, ranked, cites, lang)
    for entry, row in zip(ranking, table.rows, strict=True):
        nums = sorted({n for r in entry.reasons for n in r.citations} |
                      {n for cell in row.cells.values() for n in cell.citations})
        entry.citations = [cites.records[n - 1] for n in nums]
    changes = what_would_change(rubric, sc, resolved, ranked, cites, among)
    plan = _trial_plan(rubric, ranked, cites, lang)
    dropped = sorted(f.id for f in rubric.facts if f.id not in resolved)
    margin = _margin(rubric, ranked)
    tie = _tie(rubric, ranked, cites, lang)
    return Advice(ranking=ranking, table=table, what_would_change=changes, trial_plan=plan, citations=cites.records,
                  scenario=sc.to_dict(), language=lang, summary=_summary(ranked, margin, tie, lang),
                  dropped_facts=dropped, margin=margin, tie=tie, compared=among)


# ---- ranking and table ---------------------------------------------------------------------------
def _ranking_entry(rubric: Rubric, cs: CandidateScore, cites: _Citations, lang: str) -> RankedCandidate:
    weighted = [(rubric.weights[c] * f.points, f) for c, fs in cs.facts.items() for f in fs if f.points]
    pros = sorted((w for w in weighted if w[0] > 0), key=lambda w: (-w[0], w[1].id))[:4]
    cons = sorted((w for w in weighted if w[0] < 0), key=lambda w: (w[0], w[1].id))[:2]
    reasons = [cites.reason(f, lang) for _, f in pros + cons]
    return RankedCandidate(cs.name, cs.total, dict(cs.criteria), reasons)


def _cell_facts(rubric: Rubric, cs: CandidateScore, criterion: str, resolved: dict[str, Any]) -> tuple[list[Fact], bool]:
    """Applicable facts of a cell; when none applies, one resolved reference fact (marked as not scored)."""
    facts = sorted(cs.facts[criterion], key=lambda f: (-abs(f.points), f.id))
    if facts:
        return facts, True
    pool = [f for f in rubric.facts if f.candidate == cs.name and f.criterion == criterion and f.id in resolved]
    pool.sort(key=lambda f: (f.points != 0, f.id))
    if pool:
        return pool[:1], False
    return ([rubric.trial_fact] if rubric.trial_fact.id in resolved else []), False


def _table(rubric: Rubric, ranked: list[CandidateScore], cites: _Citations, lang: str) -> Table:
    criteria = list(rubric.weights)
    rows = []
    for cs in ranked:
        cells = {}
        for crit in criteria:
            facts, scored = _cell_facts(rubric, cs, crit, cites.resolved)
            prefix = "" if scored else ("（本场景不计分）" if lang == "zh" else "(not scored here) ")
            cells[crit] = Cell(cs.criteria[crit], prefix + " ".join(f.claim[lang] for f in facts[:3]),
                               sorted({cites.cite(f) for f in facts[:3]}))
        rows.append(Row(cs.name, cs.total, cells))
    labels = {c: rubric.criteria[c][lang] for c in criteria}
    return Table(criteria, labels, dict(rubric.weights), rows)


# ---- what would change ---------------------------------------------------------------------------
_FIELD_LABELS = {"zh": {"hardware": "硬件", "stage": "项目阶段", "known_frameworks": "团队熟悉的框架", "goals": "目标",
                        "model_scale": "模型规模"},
                 "en": {"hardware": "hardware", "stage": "stage", "known_frameworks": "team's framework", "goals": "goals",
                        "model_scale": "model scale"}}
_VALUE_LABELS = {"zh": {"cpu": "仅 CPU", "few_gpus": "少量 GPU", "gpu_cluster": "GPU 集群", "tpu": "TPU", "npu": "国产 NPU（如昇腾）",
                        "research": "研究", "prototype": "原型验证", "production": "规模化生产", "localisation": "国产化",
                        "mobile": "移动端部署"},
                 "en": {"cpu": "CPU only", "few_gpus": "a few GPUs", "gpu_cluster": "a GPU cluster", "tpu": "TPUs",
                        "npu": "NPUs such as Ascend", "research": "research", "prototype": "a prototype",
                        "production": "production", "localisation": "localisation", "mobile": "mobile deployment"}}


def _variations(sc: Scenario) -> list[tuple[str, Any, Scenario]]:
    out: list[tuple[str, Any, Scenario]] = []
    out += [("hardware", h, sc.replace(hardware=h)) for h in HARDWARE if h != sc.hardware]
    out += [("stage", s, sc.replace(stage=s)) for s in STAGES if s != sc.stage]
    for fw in ("PyTorch", "TensorFlow", "PaddlePaddle", "JAX"):
        if sc.known_frameworks != [fw]:
            out.append(("known_frameworks", fw, sc.replace(known_frameworks=[fw])))
    for goal in ("localisation", "mobile"):
        if goal not in sc.goals:
            out.append(("goals", goal, sc.replace(goals=[*sc.goals, goal])))
    params = sc.params
    if params is None or params < 1e11:
        out.append(("model_scale", "175B", sc.replace(model_scale="175B")))
    if params is None or params >= 1e10:
        out.append(("model_scale", "300M", sc.replace(model_scale="300M")))
    return out


def what_would_change(rubric: Rubric, sc: Scenario, resolved: dict[str, Any], ranked: list[CandidateScore],
                      cites: _Citations, among: Sequence[str] = (), limit: int = 6) -> list[Change]:
    """Re-run the rubric (among the same candidates) with one field changed; report the changes that change the top
    choice."""
    lang, top = sc.lang, ranked[0]
    out: list[Change] = []
    seen: set[tuple[str, str]] = set()
    for fld, value, alt in _variations(sc):
        new = score(rubric, alt, resolved, among)[0]
        if new.name == top.name or (fld, new.name) in seen:
            continue
        facts = sorted((f for fs in new.facts.values() for f in fs if f.points > 0 and _depends_on(f, fld)),
                       key=lambda f: (-f.points, f.id))[:2]
        if not facts:
            continue
        seen.add((fld, new.name))
        out.append(Change(_change_text(lang, fld, value, new.name, top.name), fld, value, new.name,
                          sorted({cites.cite(f) for f in facts}), [cites.reason(f, lang) for f in facts]))
        if len(out) >= limit:
            break
    return out


def _depends_on(fact: Fact, fld: str) -> bool:
    keys = {"hardware": ("hardware", "not_hardware"), "stage": ("stage",), "known_frameworks": ("team",),
            "goals": ("goals",), "model_scale": ("min_params", "max_params")}[fld]
    return any(k in fact.when for k in keys)


def _change_text(lang: str, fld: str, value: Any, new: str, old: str) -> str:
    v = _VALUE_LABELS[lang].get(str(value), str(value))
    f = _FIELD_LABELS[lang][fld]
    if lang == "zh":
        return f"如果{f}是{v}，{new} 会排第一（而不是 {old}）。"
    return f"If your {f} were {v}, {new} would rank first instead of {old}."


# ---- trial plan and summary ----------------------------------------------------------------------
def _trial_plan(rubric: Rubric, ranked: list[CandidateScore], cites: _Citations, lang: str) -> TrialPlan:
    a, b = ranked[0].name, ranked[1].name
    tp = rubric.trial_plan
    if lang == "zh":
        steps = ["从你们自己的业务数据里取一个有代表性的小子集。",
                 f"在 {a} 和 {b} 上各实现同一个简化版训练 Pipeline（数据加载、模型、训练循环、评估）。",
                 "在目标硬件上跑相同的步数，记录下面的指标。",
                 "结合团队熟悉度和上面的对比表做最终决定。"]
    else:
        steps = ["Take a small, representative subset of your own data.",
                 f"Implement the same simplified training pipeline (data loading, model, training loop, evaluation) "
                 f"on {a} and on {b}.",
                 "Run the same number of steps on your target hardware and record the measures below.",
                 "Decide with the team's familiarity and the table above in mind."]
    cited = [cites.cite(rubric.trial_fact)] if rubric.trial_fact.id in cites.resolved else []
    return TrialPlan([a, b], tp[lang], steps, list(tp["measure"][lang]), cited)


# ---- margin, tie and summary ---------------------------------------------------------------------
def _margin(rubric: Rubric, ranked: list[CandidateScore]) -> Margin:
    a, b = ranked[0], ranked[1]
    value = round(a.total - b.total, 4)
    label = "tie" if value < rubric.tie_epsilon else "narrow" if value < NARROW_MARGIN else "clear"
    return Margin(a.name, b.name, value, label, rubric.tie_epsilon, NARROW_MARGIN)


def _tie(rubric: Rubric, ranked: list[CandidateScore], cites: _Citations, lang: str) -> Tie | None:
    """When the first candidates are within the epsilon: each one's strongest cited facts the others lack."""
    tied = [cs for cs in ranked if ranked[0].total - cs.total < rubric.tie_epsilon]
    if len(tied) < 2:
        return None

    def own(cs: CandidateScore) -> list[tuple[float, Fact]]:
        return [(rubric.weights[c] * f.points, f) for c, fs in cs.facts.items() for f in fs if f.points > 0]

    decides = []
    for cs in tied:
        others = {f.id.split(":")[0] for o in tied if o is not cs for _, f in own(o)}
        distinct = sorted((w for w in own(cs) if w[1].id.split(":")[0] not in others), key=lambda w: (-w[0], w[1].id))[:2]
        decides.append(TieChoice(cs.name, cs.total, [cites.reason(f, lang) for _, f in distinct]))
    names = [cs.name for cs in tied]
    if lang == "zh":
        text = f"{'、'.join(names)} 打平（分差小于 {rubric.tie_epsilon}），决定因素见下。"
    else:
        text = f"{' and '.join(names)} tie (within {rubric.tie_epsilon}); what decides between them follows."
    return Tie(names, text, decides)


def _summary(ranked: list[CandidateScore], margin: Margin, tie: Tie | None, lang: str) -> str:
    a, b = ranked[0], ranked[1]
    gap = margin.value
    if tie:
        names = tie.candidates
        if lang == "zh":
            return f"{'、'.join(names)} 打平（{a.total:.2f} 对 {b.total:.2f}，分差 {gap:.3f} 小于 {margin.tie_epsilon}）。"
        return f"Tie: {' and '.join(names)} ({a.total:.2f} vs {b.total:.2f}, {gap:.3f} apart, within {margin.tie_epsilon})."
    if lang == "zh":
        word = "领先较小" if margin.label == "narrow" else "明显领先"
        return f"推荐 {a.name}（得分 {a.total:.2f}），其次是 {b.name}（{b.total:.2f}），领先 {gap:.2f}（{word}）。"
    word = "a narrow lead" if margin.label == "narrow" else "a clear lead"
    return f"Recommended: {a.name} (score {a.total:.2f}); runner-up: {b.name} ({b.total:.2f}), {gap:.2f} behind ({word})."
