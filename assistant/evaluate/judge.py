"""Entailment judges for the ALCE-style citation metrics.

Owns: the strict yes/no entailment prompt (bilingual), parsing the model's verdict, caching verdicts, and the
combination with the pipeline's own support score (assistant.answer.citations) when the local model is weak.
Judges are callables `(premise, claim) -> bool`, which is what metrics.alce_citation_scores expects.

Modes (see docs/evaluation.md for the hand check that chose the default):
- "model":    the chat model's verdict alone.
- "support":  support score (0.55 * cosine + 0.45 * term overlap, max over the premise's sentences) >= threshold.
- "combined": yes when the support score is high (>= high), no when it is low (< low), the model decides between;
  a claim in another language than its passage (an English answer citing the Chinese article) goes to the model
  whenever the score is not high: the score's term-overlap half (0.45) cannot match across languages, so such a
  pair scores 0.1-0.4 however faithful the translation (docs/evaluation.md, "How far the judge can be trusted").
"""
from __future__ import annotations

import re
from typing import Any

from ..lang import detect_language
from ..llm.base import ChatModel

SYSTEM = ("You check citations. Answer only \"yes\" or \"no\". 你只回答 yes 或 no。")
USER = ("Passage / 段落:\n{premise}\n\n"
        "Claim / 陈述:\n{claim}\n\n"
        "Is the claim fully supported by the passage (everything it states is said or directly implied there)? "
        "该陈述是否完全得到段落支持？Answer yes or no.")
_YES = re.compile(r"^\W*(yes|是|对|支持|true)", re.IGNORECASE)
_NO = re.compile(r"^\W*(no|否|不|false)", re.IGNORECASE)
MAX_PREMISE_CHARS = 1200


def parse_verdict(text: str) -> bool | None:
    """yes/是 -> True, no/否 -> False, anything else -> None."""
    t = text.strip()
    if _NO.match(t):
        return False
    if _YES.match(t):
        return True
    return None


class ModelJudge:
    """Asks a local chat model, temperature 0 and ~3 tokens, whether the premise entails the claim."""

    def __init__(self, llm: ChatModel, max_tokens: int = 3) -> None:
        self.llm = llm
        self.max_tokens = max_tokens
        self.calls = 0
        self.unparsed = 0
        self._cache: dict[tuple[str, str], bool] = {}

    def __call__(self, premise: str, claim: str) -> bool:
        key = (premise, claim)
        if key not in self._cache:
            messages = [{"role": "system", "content": SYSTEM},
                        {"role": "user", "content": USER.format(premise=premise[:MAX_PREMISE_CHARS], claim=claim)}]
            out = self.llm.complete(messages, max_tokens=self.max_tokens, temperature=0.0)
            self.calls += 1
            verdict = parse_verdict(out)
            if verdict is None:
                self.unparsed += 1
            self._cache[key] = bool(verdict)
        return self._cache[key]


class SupportJudge:
    """The answer pipeline's support score of the claim by the premise, thresholded."""

    def __init__(self, embedder: Any, threshold: float = 0.40) -> None:
        from ..answer.citations import CitationChecker

        self.checker = CitationChecker(embedder)
        self.threshold = threshold
        self._cache: dict[tuple[str, str], float] = {}

    def score(self, premise: str, claim: str) -> float:
        key = (premise, claim)
        if key not in self._cache:
            from ..answer.prompt import Source
            from ..types import Chunk, Hit

            chunk = Chunk(id="premise", text=premise, source="", title="", heading_path=(), language="",
                          frameworks=(), lines=(0, 0))
            src = Source(1, Hit(chunk, 1.0), premise)
            support, _ = self.checker.support_matrix([claim], [src])
            self._cache[key] = float(support[0, 0])
        return self._cache[key]

    def __call__(self, premise: str, claim: str) -> bool:
        return self.score(premise, claim) >= self.threshold


class CombinedJudge:
    """Support score decides the clear cases; the model decides the band in between."""

    def __init__(self, model: ModelJudge, support: SupportJudge, low: float = 0.4, high: float = 0.6) -> None:
        self.model, self.support, self.low, self.high = model, support, low, high
        self.cross_lingual = 0  # pairs sent to the model because claim and passage differ in language

    def __call__(self, premise: str, claim: str) -> bool:
        s = self.support.score(premise, claim)
        if s >= self.high:
            return True
        if detect_language(premise) != detect_language(claim):
            self.cross_lingual += 1
            return self.model(premise, claim)
        if s < self.low:
            return False
        return self.model(premise, claim)


def make_judge(mode: str, llm: ChatModel, embedder: Any) -> Any:
    """A judge for mode "model", "support" or "combined"."""
    if mode == "model":
        return ModelJudge(llm)
    if mode == "support":
        return SupportJudge(embedder)
    if mode == "combined":
        return CombinedJudge(ModelJudge(llm), SupportJudge(embedder))
    raise ValueError(f"unknown judge mode {mode!r} (model, support, combined)")
