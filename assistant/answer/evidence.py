"""Evidence selection: which passages (and how much of each) go into the prompt, within a token budget.

The prompt is what costs time on a CPU (prefill ~48 tok/s for the 1.5B model), so the evidence is
the best passages trimmed to their most relevant sentences until the budget is spent.
"""
from __future__ import annotations

from collections.abc import Callable

from ..frameworks import expand_terms
from ..index.keyword import tokenize
from ..types import Hit
from .prompt import Source
from .text import split_sentences


def select_evidence(question: str, hits: list[Hit], count_tokens: Callable[[str], int], budget: int,
                    max_sources: int = 4) -> list[Source]:
    q_terms = set(tokenize(question)) | {t for term in expand_terms(question) for t in tokenize(term)}
    per_source = max(80, budget // max(1, min(max_sources, len(hits))))
    out: list[Source] = []
    used = 0
    for hit in hits[:max_sources]:
        text = hit.chunk.text
        if count_tokens(text) > per_source:
            text = _trim(text, q_terms, count_tokens, per_source)
        t = count_tokens(text)
        if out and used + t > budget:
            break
        out.append(Source(len(out) + 1, hit, text))
        used += t
    return out


def _trim(text: str, q_terms: set[str], count_tokens: Callable[[str], int], limit: int) -> str:
    """Keep the sentences that share most terms with the question, in their original order."""
    sents = split_sentences(text)
    ranked = sorted(range(len(sents)), key=lambda i: (-len(q_terms & set(tokenize(sents[i]))), i))
    keep: set[int] = set()
    used = 0
    for i in ranked:
        t = count_tokens(sents[i])
        if used + t > limit and keep:
            continue
        keep.add(i)
        used += t
    return " ".join(sents[i] for i in sorted(keep))
