"""Score the Advisor on scenario cases (eval/advisor.jsonl): top-1/top-2 accuracy and citation validity.

A case: {"id", "lang", "scenario": {...}, "expected_top1", "acceptable": [...]}. `score_cases` runs
`advise` on each and returns per-case rows and a summary; `assistant eval --set eval/advisor.jsonl`
calls it through assistant/evaluate/runner.py. No language model is involved.
"""
from __future__ import annotations

from typing import Any

from ..interfaces import Searcher
from . import advise
from .advice import Advice


def _cell_validity(advice: Advice) -> tuple[int, int]:
    """(valid cells, cells): a cell is valid when it cites at least one number and every number is a record."""
    numbers = {c.n for c in advice.citations}
    cells = [cell for row in advice.table.rows for cell in row.cells.values()]
    valid = sum(1 for cell in cells if cell.citations and all(n in numbers for n in cell.citations))
    return valid, len(cells)


def score_case(service: Searcher, case: dict[str, Any]) -> dict[str, Any]:
    scenario = dict(case.get("scenario") or {})
    if case.get("lang"):
        scenario.setdefault("lang", case["lang"])
    if not scenario and case.get("text"):
        scenario = {"text": case["text"]}
    advice = advise(service, scenario)
    names = [r.name for r in advice.ranking]
    expected = case["expected_top1"]
    acceptable = case.get("acceptable") or [expected]
    valid, cells = _cell_validity(advice)
    return {"id": case.get("id", ""), "lang": advice.language, "expected_top1": expected, "acceptable": acceptable,
            "top1": names[0], "top2": names[1], "ranking": [(r.name, r.score) for r in advice.ranking],
            "top1_correct": names[0] == expected, "top2_correct": expected in names[:2] or names[0] in acceptable,
            "acceptable_top1": names[0] in acceptable, "valid_cells": valid, "cells": cells,
            "what_would_change": [w.text for w in advice.what_would_change]}


def score_cases(service: Searcher, cases: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    rows = [score_case(service, c) for c in cases]
    n = len(rows)

    def share(key: str) -> float:
        return round(sum(1 for r in rows if r[key]) / n, 4) if n else 0.0

    cells = sum(r["cells"] for r in rows)
    summary = {"n": n, "top1_accuracy": share("top1_correct"), "top2_accuracy": share("top2_correct"),
               "acceptable_top1": share("acceptable_top1"),
               "cell_citation_validity": round(sum(r["valid_cells"] for r in rows) / cells, 4) if cells else 0.0,
               "by_lang": {lang: {"n": len(sub), "top1_accuracy": round(sum(r["top1_correct"] for r in sub) / len(sub), 4)}
                           for lang in sorted({r["lang"] for r in rows})
                           for sub in [[r for r in rows if r["lang"] == lang]]},
               "misses": [r["id"] for r in rows if not r["top1_correct"]]}
    return rows, summary


# ---- the parse set (eval/advisor_parse.jsonl) ------------------------------------------------------
def _field_ok(name: str, expected: Any, sc: Any) -> bool:
    got = sc.params if name == "params" else getattr(sc, name)
    if name == "params":
        return got is None if expected is None else got is not None and abs(got - expected) <= 0.01 * expected
    if name == "known_frameworks":
        return set(got) == set(expected)
    if name == "goals":  # the expected goals are present; other derived goals are allowed
        return set(expected) <= set(got)
    if name == "accelerator" and expected is not None:
        return got is not None and got.replace(" ", "").lower() == str(expected).replace(" ", "").lower()
    return bool(got == expected)


def score_parse_case(case: dict[str, Any]) -> dict[str, Any]:
    """Parse one case ({"text"} or {"turns": [...]}, folded with situation_from_turns) and check its expected fields."""
    from .scenario import parse_free_text, situation_from_turns

    sc = situation_from_turns(case["turns"]) if case.get("turns") else parse_free_text(case["text"])
    fields = {name: _field_ok(name, exp, sc) for name, exp in case["expect"].items()}
    got = {name: (sc.params if name == "params" else getattr(sc, name)) for name in case["expect"]}
    return {"id": case.get("id", ""), "lang": case.get("lang"), "fields": fields, "got": got, "expect": case["expect"]}


def score_parse_cases(cases: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Per-field accuracy and overall accuracy (correct fields / expected fields) of the free-text parser."""
    rows = [score_parse_case(c) for c in cases]
    per: dict[str, list[bool]] = {}
    for r in rows:
        for name, ok in r["fields"].items():
            per.setdefault(name, []).append(ok)
    total = [ok for oks in per.values() for ok in oks]
    summary = {"n": len(rows), "fields": len(total), "overall": round(sum(total) / len(total), 4) if total else 0.0,
               "per_field": {k: {"n": len(v), "accuracy": round(sum(v) / len(v), 4)} for k, v in sorted(per.items())},
               "by_lang": {lang: round(sum(ok for r in rows if r["lang"] == lang for ok in r["fields"].values()) /
                                       max(1, sum(len(r["fields"]) for r in rows if r["lang"] == lang)), 4)
                           for lang in sorted({str(r["lang"]) for r in rows})},
               "misses": [f"{r['id']}:{k}" for r in rows for k, ok in r["fields"].items() if not ok]}
    return rows, summary
