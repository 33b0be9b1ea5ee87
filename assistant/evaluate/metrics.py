"""Metric functions: pure, no model, no I/O. Each returns None when the metric does not apply to a case.

Owns: fact matching (NFKC, case-insensitive, `|` alternatives, parameter-server = parameter server), refusal
correctness, retrieval hit@k and reciprocal rank by source-path suffix, citation marker validity and source hit,
ALCE-style citation recall/precision given an entailment function, percentiles and aggregation (overall, by
language, by kind).
"""
from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from ..answer.citations import parse_markers

# Case-level metric keys averaged into the summary (latency percentiles are added separately).
CASE_METRICS = ("fact_recall", "refusal_accuracy", "hit_at_1", "hit_at_5", "mrr", "citation_validity",
                "citation_source_hit", "citation_recall", "citation_precision", "selection_lead", "selection_pass")
LATENCY_METRICS = ("ttft_ms_p50", "ttft_ms_p95", "total_ms_p50", "total_ms_p95")


def norm(text: str) -> str:
    """Full-width and half-width forms alike (NFKC), lower case."""
    return unicodedata.normalize("NFKC", text).lower()


def _fact_norm(text: str) -> str:
    """norm(), and a hyphen between letters reads as a space: "parameter-server mode" states "parameter server"."""
    return re.sub(r"(?<=[a-z])-(?=[a-z])", " ", norm(text))


def fact_present(fact: str, answer: str) -> bool:
    """A fact is present when any of its `|` alternatives occurs in the answer."""
    a = _fact_norm(answer)
    return any(alt.strip() and _fact_norm(alt.strip()) in a for alt in fact.split("|"))


def fact_recall(facts: Sequence[str], answer: str) -> float | None:
    """Share of facts present in the answer; None when the case has no facts."""
    if not facts:
        return None
    return sum(fact_present(f, answer) for f in facts) / len(facts)


def refusal_correct(kind: str, refused: bool) -> float:
    """1.0 when an out-of-scope case was refused or an in-scope case was answered."""
    return float(refused == (kind == "out_of_scope"))


def is_source_hit(path: str, source_files: Iterable[str]) -> bool:
    """A passage is a hit when its source path ends with one of the gold source files."""
    p = path.replace("\\", "/")
    return any(p.endswith(s.replace("\\", "/")) for s in source_files if s)


def hit_at_k(paths: Sequence[str], source_files: Sequence[str], k: int) -> float | None:
    if not source_files:
        return None
    return float(any(is_source_hit(p, source_files) for p in paths[:k]))


def reciprocal_rank(paths: Sequence[str], source_files: Sequence[str]) -> float | None:
    if not source_files:
        return None
    for i, p in enumerate(paths, start=1):
        if is_source_hit(p, source_files):
            return 1.0 / i
    return 0.0


def citation_markers(text: str) -> list[int]:
    """Every [n] (also [1,2], 【n】) in the text, in order, as the citation check reads them (`parse_markers`)."""
    return parse_markers(text)[1]


def citation_validity(text: str, valid_numbers: Iterable[int]) -> float | None:
    """Share of [n] markers that resolve to a citation record / source; None when the text has no marker."""
    marks = citation_markers(text)
    if not marks:
        return None
    valid = set(valid_numbers)
    return sum(n in valid for n in marks) / len(marks)


def citation_source_hit(cited_paths: Sequence[str], source_files: Sequence[str]) -> float | None:
    """1.0 when at least one cited passage comes from a gold source file."""
    if not source_files:
        return None
    return float(any(is_source_hit(p, source_files) for p in cited_paths))


Entail = Callable[[str, str], bool]  # (premise passages, claim) -> entailed


def alce_citation_scores(sentences: Sequence[tuple[str, list[int]]], passages: dict[int, str],
                         entail: Entail) -> tuple[float | None, float | None]:
    """ALCE citation recall and precision (Gao et al. 2023, compute_autoais).

    recall = share of sentences whose cited passages, joined, entail the sentence (no citation: 0).
    precision = share of citations that are needed: in a supported sentence with several citations, a citation
    is irrelevant when it alone does not entail the sentence and the others without it still do.
    """
    if not sentences:
        return None, None
    supported = 0
    needed = 0
    total = 0
    for text, refs in sentences:
        refs = list(dict.fromkeys(refs))
        total += len(refs)
        joint = cited_support(text, refs, passages, entail)
        supported += joint
        if joint and len(refs) > 1:
            for r in refs:
                rest = [x for x in refs if x != r]
                irrelevant = not entail(passages[r], text) and entail(_join(passages, rest), text)
                needed += not irrelevant
        else:
            needed += len(refs) if joint else 0
    recall = supported / len(sentences)
    precision = needed / total if total else None
    return recall, precision


def cited_support(text: str, refs: Sequence[int], passages: dict[int, str], entail: Entail) -> bool:
    """The sentence is cited and its cited passages, joined, entail it (ALCE's per-sentence recall)."""
    return bool(refs) and all(r in passages for r in refs) and entail(_join(passages, refs), text)


def _join(passages: dict[int, str], refs: Sequence[int]) -> str:
    return "\n".join(passages[r] for r in refs)


# a candidate named in a recommendation, longest names first ("PyTorch + DeepSpeed" before "PyTorch")
_CANDIDATES = (("PyTorch + DeepSpeed", r"PyTorch\s*\+\s*DeepSpeed|DeepSpeed"),
               ("PyTorch + Megatron-LM", r"PyTorch\s*\+\s*Megatron(?:-LM)?|Megatron(?:-LM)?"),
               ("Colossal-AI", r"Colossal(?:-AI)?"), ("PaddlePaddle", r"PaddlePaddle|飞桨|Paddle"),
               ("TensorFlow", r"TensorFlow"), ("JAX", r"\bJAX\b"), ("PyTorch", r"PyTorch"))


def first_claim(text: str) -> str:
    """The answer's first sentence that is a claim: a lead-in line ending in a colon (the situation an answer
    assumes, "For your situation (...):") is skipped."""
    from ..text import split_sentences  # noqa: PLC0415 (metrics stay import-light for the gate)

    for line in text.splitlines():
        line = line.strip()
        if not line or line[-1] in ":：":
            continue
        sents = split_sentences(line)
        return sents[0] if sents else line
    return ""


def recommended_candidate(sentence: str) -> str | None:
    """The candidate a sentence names first (the one it recommends, or the first of a tie)."""
    found = [(m.start(), i, name) for i, (name, pat) in enumerate(_CANDIDATES)
             for m in [re.search(pat, sentence, re.IGNORECASE)] if m]
    return min(found)[2] if found else None


def selection_lead(text: str, accept: Sequence[str], refused: bool) -> float | None:
    """1.0 when the answer is not refused, its first claim names an accepted candidate first and cites [n]."""
    if not accept:
        return None
    first = first_claim(text)
    return float(not refused and recommended_candidate(first) in accept and bool(citation_markers(first)))


def percentile(values: Sequence[float], q: float) -> float | None:
    """Linear-interpolated percentile (q in 0..100); None for no values."""
    xs = sorted(v for v in values if v is not None)
    if not xs:
        return None
    pos = (len(xs) - 1) * q / 100.0
    lo, hi = math.floor(pos), math.ceil(pos)
    return round(xs[lo] + (xs[hi] - xs[lo]) * (pos - lo), 1)


def mean(values: Iterable[float | None]) -> float | None:
    xs = [v for v in values if v is not None]
    return round(sum(xs) / len(xs), 4) if xs else None


def summarise(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Means of the case metrics and latency percentiles (over answered cases) for a list of result rows."""
    out: dict[str, Any] = {"n": len(rows)}
    for key in CASE_METRICS:
        out[key] = mean(r["metrics"].get(key) for r in rows)
    answered = [r for r in rows if not r.get("refused") and not r.get("error")]
    for name in ("ttft_ms", "total_ms"):
        vals = [r["timings"].get(name) for r in answered if r.get("timings", {}).get(name) is not None]
        out[f"{name}_p50"] = percentile(vals, 50)
        out[f"{name}_p95"] = percentile(vals, 95)
    return out


def aggregate(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Overall metrics plus the same under by_lang, by_kind and by_split (dev: tuned on; test: held out)."""
    summary = summarise(rows)
    for field, key in (("lang", "by_lang"), ("kind", "by_kind"), ("split", "by_split")):
        groups: dict[str, list[dict[str, Any]]] = {}
        for r in rows:
            groups.setdefault(str(r.get(field)), []).append(r)
        summary[key] = {g: summarise(rs) for g, rs in sorted(groups.items())}
    return summary
