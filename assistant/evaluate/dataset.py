"""Loading gold sets (JSONL) into EvalCase records.

Owns: reading one JSONL file, tolerating unknown fields, reporting a malformed line with its line
number and skipping it, and telling QA sets (question|turns) from Advisor sets (scenario).
Does not: run anything or score anything.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

KINDS = ("fact", "recommend", "followup", "out_of_scope", "selection")


@dataclass
class EvalCase:
    """One question-answering case; `turns` holds every user turn (one for single-turn cases)."""

    id: str
    lang: str
    kind: str
    turns: list[str]
    answer_facts: list[str] = field(default_factory=list)
    source_files: list[str] = field(default_factory=list)
    accept: list[str] = field(default_factory=list)  # selection cases: the candidates the article's guidance supports
    split: str = "dev"  # dev (tuning may look at it) | test (held out: reported, never tuned on)

    @property
    def question(self) -> str:
        """The scored (last) question."""
        return self.turns[-1]


@dataclass
class GoldSet:
    path: Path
    cases: list[EvalCase] = field(default_factory=list)
    scenarios: list[dict[str, Any]] = field(default_factory=list)  # Advisor rows, passed on as they are
    problems: list[str] = field(default_factory=list)  # "file:line: what is wrong"

    @property
    def is_advisor(self) -> bool:
        return bool(self.scenarios) and not self.cases


def parse_case(obj: Any) -> EvalCase:
    """An EvalCase from one decoded line; raises ValueError/TypeError saying what is wrong. Unknown fields are ignored."""
    if not isinstance(obj, dict):
        raise TypeError("not a JSON object")
    if not isinstance(obj.get("id"), str) or not obj["id"]:
        raise ValueError("missing 'id'")
    turns = obj.get("turns")
    if turns is None:
        q = obj.get("question")
        if not isinstance(q, str) or not q.strip():
            raise ValueError("needs 'question' or 'turns'")
        turns = [q]
    if not isinstance(turns, list) or not turns or not all(isinstance(t, str) and t.strip() for t in turns):
        raise ValueError("'turns' must be a non-empty list of strings")
    kind = obj.get("kind", "fact")
    if kind not in KINDS:
        raise ValueError(f"unknown kind {kind!r}")
    facts = obj.get("answer_facts") or []
    sources = obj.get("source_files") or []
    if not isinstance(facts, list) or not isinstance(sources, list):
        raise TypeError("'answer_facts' and 'source_files' must be lists")
    accept = obj.get("accept") or []
    if not isinstance(accept, list) or (kind == "selection" and not accept):
        raise ValueError("a selection case needs 'accept': a non-empty list of candidates")
    return EvalCase(id=obj["id"], lang=str(obj.get("lang", "en")), kind=kind, turns=list(turns),
                    answer_facts=[str(f) for f in facts], source_files=[str(s) for s in sources],
                    accept=[str(a) for a in accept], split=str(obj.get("split", "dev")))


def load_set(path: Path, limit: int | None = None) -> GoldSet:
    """Read a gold set; lines with a "scenario" field are Advisor rows. Malformed lines are reported and skipped."""
    gold = GoldSet(path=Path(path))
    for lineno, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        if limit is not None and len(gold.cases) + len(gold.scenarios) >= limit:
            break
        try:
            obj = json.loads(line)
            if isinstance(obj, dict) and "scenario" in obj:
                if not isinstance(obj.get("id"), str):
                    raise ValueError("missing 'id'")
                gold.scenarios.append(obj)
            else:
                gold.cases.append(parse_case(obj))
        except (ValueError, TypeError) as e:  # JSONDecodeError is a ValueError
            gold.problems.append(f"{path}:{lineno}: {e}")
    return gold
