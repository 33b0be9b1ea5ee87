"""The answer pipeline, as functions that return values: hits -> evidence -> prompt -> generation -> citation
check -> the answer's text, citations and diagnostics.

The service (assistant/service.py) decides *when* each step runs (input checks, sessions, the follow-up
rewrite, the generation queue, events to the adapters); this module decides *what* each step computes and
holds no state of its own. Benchmarks replay the same functions, so what they measure is what users get.

    extra_hits(hits, pinned)                     which retrieved passages follow the pinned prefix (answer/pinned.py)
    evidence(question, hits, config, ...)        the passages' sentences the prompt carries (budget and floor)
    generate(llm, messages, config)              a generator: yields token pieces, returns a Generation
    check(raw, question, sources, config, ...)   the checked answer (or a quote of the best evidence, or a refusal)
    refused(reason, lang)                        the refusal for a question the index cannot answer
"""
from __future__ import annotations

import time
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from typing import Any

from ..embed import Embedder
from ..frameworks import names_only
from ..llm.base import ChatModel, Message
from ..types import Chunk, Citation, Hit
from .citations import CitationChecker, quoted_answer, renumber
from .evidence import DEFAULT_MAX_SOURCES, best_sentence, select_evidence
from .pinned import NONE, PinnedContext
from .policy import Decision, refusal_text
from .prompt import Source

SEVERAL_MAX_SOURCES = 5  # every retrieved passage (settings.top_k) for a list or comparison question


@dataclass(frozen=True)
class PipelineConfig:
    """The settings the pipeline reads (see assistant/settings.py for their meaning and defaults)."""

    context_token_budget: int
    evidence_floor: float
    support_threshold: float
    max_answer_tokens: int
    temperature: float
    several_token_budget: int = 0  # a list or comparison question's budget (Route.several); 0: the same

    @classmethod
    def from_settings(cls, settings: Any) -> PipelineConfig:
        return cls(context_token_budget=settings.context_token_budget, evidence_floor=settings.evidence_floor,
                   several_token_budget=settings.several_token_budget,
                   support_threshold=settings.support_threshold, max_answer_tokens=settings.max_answer_tokens,
                   temperature=settings.temperature)


@dataclass(frozen=True)
class Generation:
    """What the model wrote for one prompt, and what it cost."""

    text: str
    ttft_s: float | None  # seconds from `started` to the first piece; None when nothing came
    prompt_tokens: int
    completion_tokens: int


@dataclass
class Result:
    """The answer's final text and citations, whether it is a refusal, and how the check went."""

    text: str
    citations: list[Citation]
    refused: bool = False
    diagnostics: dict[str, Any] = field(default_factory=dict)
    sources: list[Hit] | None = None  # the passages the answer lists, when the check decides them (else as shown)


def extra_hits(hits: list[Hit], pinned: PinnedContext = NONE, article: bool = False) -> list[Hit]:
    """The retrieved passages that follow the pinned prefix in the user's turn: those of other documents that
    retrieval ranks above the pinned documents' best passage. A question whose best match is pinned gets none (the
    prefix already holds it, and every added passage costs prefill time), nor does one that refers to the pinned
    article itself (`article`, the Route's: "according to the article"): the 1.5B model answers from whatever
    passage stands next to the question, and across languages our English notes outrank the Chinese article (dev:
    "What does the article advise ...?" answered from a DeepSpeed tutorial). Passages of a pinned document are never
    repeated."""
    if not pinned.k:
        return hits
    if article and pinned.has_article:
        return []
    out: list[Hit] = []
    for hit in hits:
        if pinned.holds(hit.chunk):
            break
        out.append(hit)
    return out


def focus(similarities: list[float], n: int, extra: list[Source] | None = None) -> list[int]:
    """The numbers [1]..[k] of the `n` pinned passages closest to the question (their `similarities`, in prefix
    order), best first: the user's turn names them so the model reads those first. The 1.5B model finds a fact
    in a 29-passage prefix less often when the question is in the other language (dev, eval/gold_article_en.jsonl),
    while the multilingual embedding puts the passage that holds it first for 15 of those 20 questions. None when
    passages of other documents follow the prefix (`extra`): pointed at the article, the model left a docs passage
    that held the answer (dev: fact-zh-26)."""
    if extra:
        return []
    order = sorted(range(len(similarities)), key=lambda i: -similarities[i])
    return [i + 1 for i in order[:n]]


def pinned_shown(hits: list[Hit], pinned: PinnedContext = NONE, focus: list[int] | None = None) -> list[Source]:
    """The pinned passages that retrieval ranked for this question or that the user's turn names (`focus`),
    numbered as in the prefix: what the answer's sources list shows of the pinned documents, and where a quote may
    come from."""
    ranked = {h.chunk.id for h in hits}
    named = set(focus or ())
    return [s for s in pinned.originals() if s.hit.chunk.id in ranked or s.n in named]


def evidence(question: str, hits: list[Hit], config: PipelineConfig, count_tokens: Callable[[str], int],
             embedder: Embedder, pinned: PinnedContext = NONE, several: bool = False,
             article: bool = False, around: Callable[[Chunk], list[Chunk]] | None = None) -> list[Source]:
    """The evidence an answer's prompt carries for these hits, within the token budget and above the floor; with a
    pinned context, only passages of other documents (extra_hits), numbered after the pinned ones. `several`: the
    question asks for several items; `article`: it is about the pinned article (its Route says both); `around`: a
    hit's section neighbours (select_evidence)."""
    budget, max_sources = evidence_budget(several, config)
    chosen = select_evidence(question, extra_hits(hits, pinned, article), count_tokens, budget, max_sources=max_sources,
                             embedder=embedder, floor=config.evidence_floor, around=around)
    return [Source(s.n + pinned.k, s.hit, s.text) for s in chosen]


def evidence_budget(several: bool, config: PipelineConfig) -> tuple[int, int]:
    """(token budget, passages) for a question: a question asking for several things gets the larger budget and
    every retrieved passage."""
    if config.several_token_budget and several:
        return config.several_token_budget, SEVERAL_MAX_SOURCES
    return config.context_token_budget, DEFAULT_MAX_SOURCES


def generate(llm: ChatModel, messages: list[Message], config: PipelineConfig,
             started: float | None = None, language: str | None = None) -> Generator[str, None, Generation]:
    """Stream the model's answer (in `language`, the question's): yields each piece, and returns a Generation
    (`gen = yield from generate(...)`). `started` (a time.perf_counter() value, default now) is where the time to the
    first piece counts from."""
    started = time.perf_counter() if started is None else started
    pieces: list[str] = []
    ttft: float | None = None
    for piece in llm.stream(messages, max_tokens=config.max_answer_tokens, temperature=config.temperature,
                            language=language):
        if ttft is None:
            ttft = time.perf_counter() - started
        pieces.append(piece)
        yield piece
    usage = llm.last_usage
    return Generation("".join(pieces), ttft, usage.prompt_tokens, usage.completion_tokens)


def check(raw: str, question: str, sources: list[Source], config: PipelineConfig, embedder: Embedder,
          lang: str, user_text: str = "", pinned: PinnedContext = NONE, shown: list[Source] | None = None,
          quote: bool = True) -> Result:
    """Keep the sentences their citations support (against the pinned passages and the evidence); when none is,
    quote the closest sentence of the passages retrieval found for the question (`shown`, default the evidence), and
    when there is none, or `quote` is off (no passage was close to the question), refuse. `user_text` (the user's
    words): sentences that restate it are no claims. The kept citations are numbered [1].. in the order the answer
    first cites them."""
    checker = CitationChecker(embedder, config.support_threshold)
    checked = checker.check(raw, pinned.numbered() + sources, user_text=user_text or question, question=question)
    diagnostics: dict[str, Any] = {
        "factual_sentences": checked.factual_sentences, "supported_sentences": checked.supported_sentences,
        "dropped_numbers": checked.dropped_numbers, "removed_sentences": checked.removed_sentences,
        "quoted_sentences": [list(q) for q in checked.quoted_sentences], "raw_answer": raw, "fallback": ""}
    if checked.text and not bare_name(checked.text, checked.citations):
        return Result(*renumber(checked.text, checked.citations), diagnostics=diagnostics)
    if checked.text:  # "PyTorch。": a framework to use without its reason or citation is no answer
        diagnostics["bare_name"] = checked.text
    closest = best_sentence(question, sources if shown is None else shown, embedder) if quote else None
    if closest is None:
        return Result(refusal_text("weak_evidence", lang), [], refused=True, diagnostics=diagnostics)
    text, cite = quoted_answer(closest[0], closest[1], lang)
    diagnostics["fallback"] = "quote"
    return Result(*renumber(text, [cite]), diagnostics=diagnostics)


def bare_name(text: str, citations: list[Citation]) -> bool:
    """An answer that is only a framework's name (or two), uncited: "PyTorch。", "JAX and PyTorch." A fact answer
    that names a framework to use carries its reason and citation; the check quotes the closest passage instead."""
    return not citations and names_only(text)


def refused(decision: Decision, lang: str) -> Result:
    """The answer to a question the retrieved passages do not cover (policy.decide said so, and why: an off-subject
    refusal names what was asked and what the documents cover nearby)."""
    return Result(decision.message(lang), [], refused=True)
