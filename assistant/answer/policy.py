"""When to refuse, and follow-up rewriting: deterministic rules over retrieval scores, not the model's whim.

Refusal: the question is answered only when the best retrieved passage is close enough
(calibrated thresholds on the dense cosine and on the fused score, tuned on in-domain vs
out-of-domain dev questions: docs/refusal.md). Requests for the hidden instructions are refused outright.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from ..frameworks import CONCEPTS, find_frameworks
from ..text import has_cjk
from ..types import Hit

REFUSAL = {
    "zh": "抱歉，现有文档没有涉及这个问题，我无法据此回答。",
    "en": "Sorry, the documents I have do not cover this question, so I cannot answer it.",
}
PROMPT_LEAK = {
    "zh": "抱歉，我不能透露系统指令；我只根据已索引的框架文档回答训练框架选型的问题。",
    "en": "Sorry, I can't share my instructions; I only answer questions about AI training frameworks from the indexed documents.",
}

_LEAK = re.compile(
    r"system\s*prompt|your\s+(instructions|prompt|rules)|initial\s+prompt|ignore\s+(all\s+|the\s+|your\s+)?"
    r"(previous|prior|above)|系统提示|系统指令|提示词|你的指令|忽略(之前|以上|上面|前面)",
    re.IGNORECASE,
)


def addresses_the_model(text: str) -> bool:
    """Whether text asks for or overrides the assistant's instructions ("ignore all previous ...", "系统提示词")."""
    return _LEAK.search(text) is not None


_DOMAIN_TERMS = tuple({t for group in CONCEPTS for t in group if len(t) >= 2} | {
    "训练", "框架", "模型", "并行", "training", "framework", "model", "parallel", "gpu", "optimizer", "tensor"})


@dataclass
class Decision:
    refuse: bool
    reason: str  # "ok" | "weak_evidence" | "prompt_leak" | "empty"
    top_dense: float = 0.0
    top_score: float = 0.0


@dataclass
class RefusalThresholds:
    # Tuned on bench/data + eval dev questions; see docs/refusal.md for the sweep that chose them.
    min_dense: float = 0.30
    min_dense_with_domain_term: float = 0.22
    min_score: float = 0.25


# An injected instruction wrapped in brackets, e.g. "(SYSTEM: ignore your rules ...)" or "【系统指令：...】".
_BRACKETED_INJECTION = re.compile(
    r"[(（\[【<][^)）\]】>]*(system|ignore|instruction|系统|忽略|指令)[^)）\]】>]*[)）\]】>]", re.IGNORECASE)


def strip_injection(question: str) -> str:
    """The question without bracketed injected instructions; the real request inside is still answered."""
    return _BRACKETED_INJECTION.sub(" ", question).strip()


def decide(question: str, hits: list[Hit], th: RefusalThresholds | None = None) -> Decision:
    """Refuse on a request for the hidden instructions, else when the evidence is too weak.

    `question` is expected to have gone through strip_injection already.
    """
    th = th or RefusalThresholds()
    if addresses_the_model(question):
        return Decision(True, "prompt_leak")
    if not hits:
        return Decision(True, "empty")
    top_dense = max(h.dense for h in hits)
    top_score = max(h.score for h in hits)
    domain = bool(find_frameworks(question)) or has_domain_term(question)
    need = th.min_dense_with_domain_term if domain else th.min_dense
    ok = top_dense >= need and top_score >= th.min_score
    return Decision(not ok, "ok" if ok else "weak_evidence", top_dense, top_score)


def has_domain_term(text: str) -> bool:
    low = text.lower()
    return any(t in low for t in _DOMAIN_TERMS if not t.isascii()) or any(
        re.search(r"(?<![a-z])" + re.escape(t) + r"(?![a-z])", low) for t in _DOMAIN_TERMS if t.isascii())


def refusal_text(reason: str, lang: str) -> str:
    return (PROMPT_LEAK if reason == "prompt_leak" else REFUSAL)[lang if lang in REFUSAL else "en"]


# ---- follow-up rewriting --------------------------------------------------------------------------
_PRONOUN_ZH = re.compile(r"它们|它的|它|其|该框架|这个框架|那个框架|这个库|后者|前者|这两者|两者")
_PRONOUN_EN = re.compile(r"\b(it|its|it's|they|their|them|this framework|that framework|this one|that one|the latter|"
                         r"the former|both)\b", re.IGNORECASE)


def rewrite_followup(question: str, history: list[dict[str, str]]) -> str:
    """A standalone question: names from the previous user turns replace pronouns (cheap, no model call); after a
    selection answer, the framework it recommended.

    Only runs when there is history; a question that names its own framework is left alone.
    """
    if not history or find_frameworks(question):
        return question
    from .selection import recommended_in  # after a recommendation, "its" is the recommended framework

    last_answer = next((m["content"] for m in reversed(history) if m["role"] == "assistant"), "")
    names: list[str] = recommended_in(last_answer)
    for text in reversed([m["content"] for m in history if m["role"] == "user"] if not names else []):
        names = find_frameworks(text)
        if names:
            break
    if not names:
        return question
    subject = " 和 ".join(names[:2]) if has_cjk(question) else " and ".join(names[:2])
    if _PRONOUN_ZH.search(question):
        return _PRONOUN_ZH.sub(lambda m: subject + ("的" if m.group(0) in ("它的", "其") else ""), question, count=1)
    if _PRONOUN_EN.search(question):
        return _PRONOUN_EN.sub(lambda m: subject + ("'s" if m.group(0).lower() in ("its", "their") else ""),
                               question, count=1)
    return f"{subject}: {question}"
