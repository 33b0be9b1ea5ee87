"""Evidence selection: which sentences of the retrieved passages go into the prompt, within a token budget.

The prompt is what costs time on a CPU (prefill ~64 tok/s for the 1.5B model on 2 cores), so the model
is shown the sentences that matter, not whole chunks. Every sentence of the top passages, and of the passages
next to them in their sections that a list runs on into (a list cut between chunks), is scored against the question by
meaning (the embedder, which also bridges Chinese and English) and by shared terms (with the cross-language
aliases); each retrieved passage first contributes its best sentence, in rank order (so a comparison keeps
evidence for each side), then the items of the lists whose lead-in ("…以下四个部分：") was such a sentence (the closest to
the question first), then the best remaining sentences fill the budget (a lead-in taken then brings its code block or
list at once). Whatever the order of choice, a passage's sentences are shown in the page's order.
Duplicates are dropped, a sentence scoring under `floor` x the best one stays out (a weak passage's best
sentence, a table of contents, a list of paper titles: tokens the model reads for nothing), and the kept
sentences of a passage stay in their original order.
The budget was chosen from a measured curve of key-fact recall against prompt length (docs/performance.md).
"""
from __future__ import annotations

import re
from collections.abc import Callable
from typing import NamedTuple

import numpy as np

from ..embed import Embedder
from ..frameworks import expand_terms, find_frameworks, frameworks_of, sentence_frameworks
from ..text import LIST_ITEM, content_terms, is_code_block, normalise, split_sentences, starts_with_pronoun
from ..types import Chunk, Hit
from .policy import addresses_the_model
from .prompt import Source

_REFERENCE_LINE = re.compile(r"^\s*(来源\s*/\s*Sources|来源|Sources?)\s*[:：]|https?://\S+", re.IGNORECASE)
_BIBLIOGRAPHY_ENTRY = re.compile(r"^\s*\[\d+\]\s")
MAX_SENTENCE_TOKENS = 120  # a longer "sentence" (a code block, a table row dump) only goes in when it ranks first


DEFAULT_MAX_SOURCES = 4


def select_evidence(question: str, hits: list[Hit], count_tokens: Callable[[str], int], budget: int,
                    max_sources: int = DEFAULT_MAX_SOURCES, embedder: Embedder | None = None, floor: float = 0.0,
                    around: Callable[[Chunk], list[Chunk]] | None = None) -> list[Source]:
    """`around(chunk)`: the chunk with the passages just before and after it in its section, in document order
    (Retriever.around); where a list runs on between a hit and such a neighbour (a list cut between chunks: its
    lead-in ranked, the item the question asks for in the next chunk), the neighbour's sentences compete for the
    budget beside the hit's, without a place of their own."""
    hits = hits[:max_sources]
    if not hits:
        return []
    passages = _with_neighbours(hits, around)
    q_terms = _weighted_terms(question)
    cands: list[tuple[int, int, str]] = []  # (passage index, sentence index, text)
    for pi, p in enumerate(passages):
        cands += [(pi, si, s) for si, s in enumerate(split_sentences(p.hit.chunk.text)) if not _is_reference(s)]
    scores = _scores(question, q_terms, [c[2] for c in cands], embedder)
    # a small prior for the passage's rank (a neighbour just below its hit), so ties go to the better passage
    scores = [s + 0.05 / (1 + passages[c[0]].rank + passages[c[0]].neighbour) for s, c in zip(scores, cands, strict=True)]

    chosen: set[int] = set()
    seen: set[str] = set()
    used = 0
    cutoff = floor * max(scores)  # only the first sentence taken may score under it
    items: list[int] = []  # the other items of lists whose lead-in was taken while each hit gives its best sentence

    def take(i: int, first: bool, introduced: bool = False, defer: bool = False) -> None:
        nonlocal used
        key = normalise(cands[i][2])
        if key in seen:
            return
        t = count_tokens(cands[i][2])
        if (t > MAX_SENTENCE_TOKENS and not (first or introduced)) or chosen and (
                used + t > budget or (scores[i] < cutoff and not introduced)):
            return
        chosen.add(i)
        seen.add(key)
        used += t
        after = i + 1  # a lead-in ("add the following arguments:") brings the code block or list it introduces
        if (not introduced and after < len(cands) and cands[after][:2] == (cands[i][0], cands[i][1] + 1)
                and _introduces(cands[i][2], cands[after][2])):
            take(after, first=False, introduced=True)
            if defer:
                items.extend(_rest_of_list(cands, after))
            else:
                for j in sorted(_rest_of_list(cands, after), key=lambda j: -scores[j]):  # the closest items first
                    take(j, first=False, introduced=True)

    order = sorted(range(len(cands)), key=lambda i: -scores[i])
    for pi in (pi for pi, p in enumerate(passages) if not p.neighbour):  # hits come in rank order
        best = next((i for i in order if cands[i][0] == pi), None)  # each hit's best sentence
        if best is not None:
            take(best, first=not chosen, defer=True)
    for i in sorted(items, key=lambda i: -scores[i]):  # then the lists those brought, while the budget lasts
        take(i, first=False, introduced=True)
    for i in order:  # then the best sentences overall
        if i not in chosen:
            take(i, first=False)

    out: list[Source] = []
    for pi, p in enumerate(passages):
        kept = [cands[i][2] for i in sorted(chosen, key=lambda i: cands[i][1]) if cands[i][0] == pi]
        if kept:
            out.append(Source(len(out) + 1, p.hit, " ".join(kept)))
    return out


class _Passage(NamedTuple):
    hit: Hit
    rank: int  # the hit's rank (a neighbour's: its hit's)
    neighbour: bool  # read because a list runs on into it from the hit


def _with_neighbours(hits: list[Hit], around: Callable[[Chunk], list[Chunk]] | None) -> list[_Passage]:
    """The hits with the neighbouring passages of their sections that a list runs on into, in document order around
    each hit. A passage comes once, as a hit if it is one."""
    if around is None:
        return [_Passage(h, r, False) for r, h in enumerate(hits)]
    ids = {h.chunk.id for h in hits}
    out: list[_Passage] = []
    for rank, hit in enumerate(hits):
        window = around(hit.chunk)
        at = next((i for i, c in enumerate(window) if c.id == hit.chunk.id), None)
        if at is None:
            window, at = [hit.chunk], 0
        for i, c in enumerate(window):
            if i == at:
                out.append(_Passage(hit, rank, False))
            elif c.id not in ids and _runs_on(*((c, hit.chunk) if i < at else (hit.chunk, c))):
                ids.add(c.id)
                out.append(_Passage(Hit(c, hit.score), rank, True))
    return out


def _introduces(sentence: str, then: str) -> bool:
    """`sentence` is the lead-in of the block that follows it: it ends with a colon, and `then` is a code block or a
    list item (within a passage, or the next chunk's first item: `_runs_on`)."""
    return sentence.rstrip().endswith((":", "：")) and (is_code_block(then) or LIST_ITEM.match(then.lstrip()) is not None)


def _rest_of_list(cands: list[tuple[int, int, str]], first: int) -> list[int]:
    """The items after `first` (a list's first item) of the list it begins: the next sentences of its passage while each
    begins an item ("2. …", "#. …", "- …"); a sentence that does not (an item's second sentence, the text after the
    list) ends it. [] when `first` is no list item (a code block)."""
    if not LIST_ITEM.match(cands[first][2].lstrip()):
        return []
    j = first + 1
    while j < len(cands) and cands[j][:2] == (cands[first][0], cands[first][1] + j - first) \
            and LIST_ITEM.match(cands[j][2].lstrip()):
        j += 1
    return list(range(first + 1, j))


def _runs_on(first: Chunk, then: Chunk) -> bool:
    """A list runs on from `first` into the chunk after it, `then`: `then` starts with a list item and `first` ends
    with its lead-in (a colon) or within a list (its last paragraph has an item)."""
    if not LIST_ITEM.match(then.text.lstrip()):
        return False
    tail = re.split(r"\n\s*\n", first.text.strip())[-1]
    return _introduces(tail, then.text) or any(LIST_ITEM.match(line.strip()) for line in tail.splitlines())


def best_sentence(question: str, sources: list[Source], embedder: Embedder | None = None,
                  max_chars: int = 400) -> tuple[Source, str] | None:
    """The single evidence sentence that matches the question best (scored as in select_evidence): what
    an answer falls back to quoting when nothing the model wrote could be checked against the sources."""
    named = set(find_frameworks(question))
    cands = [(s, x.strip()) for s in sources for x, about in _sentences_about(s) if x.strip()
             and not _is_reference(x) and len(x) <= max_chars and "```" not in x
             and not addresses_the_model(x)  # text addressed to the model is never quoted
             and not starts_with_pronoun(x)  # nor "这是……组合" without what 这 means
             and not (named and about and not about & named)]  # nor, asked of PaddlePaddle, one about Megatron-LM
    if not cands:
        return None
    scores = _scores(question, _weighted_terms(question), [x for _, x in cands], embedder)
    return cands[int(np.argmax(scores))]


def _sentences_about(source: Source) -> list[tuple[str, set[str]]]:
    """A passage's sentences, each with the frameworks it is about: those it names (or its table row's first cell
    names), else the passage's (its chunk's frameworks and those the shown sentences name; the citation check reads
    the whole chunk's text there)."""
    sents = split_sentences(source.text)
    passage = frameworks_of(source.text, source.hit.chunk.frameworks)
    return [(x, f or passage) for x, f in zip(sents, sentence_frameworks(source.text, sents), strict=True)]


def _is_reference(sentence: str) -> bool:
    """A list of source URLs (the notes end each section with one) or an entry of a page's reference list
    ("[1] NVIDIA/Megatron-LM: Ongoing research ..."): evidence of nothing, and costly."""
    if _REFERENCE_LINE.match(sentence) or _BIBLIOGRAPHY_ENTRY.match(sentence):
        return True
    urls = sum(len(u) for u in re.findall(r"https?://\S+", sentence))
    return urls > 0.5 * len(sentence)


_ZH_ORDINAL = re.compile(r"第\s*([一二三四五六七八九十])")
_ZH_DIGIT = dict(zip("一二三四五六七八九十", ["1", "2", "3", "4", "5", "6", "7", "8", "9", "10"], strict=True))


def _terms(text: str) -> set[str]:
    """Words that count as shared with the question: no single Latin letters, but digits do count, and
    a Chinese ordinal is written as the digit the documents use (第三阶段 = 第 3 阶段 = stage 3)."""
    text = _ZH_ORDINAL.sub(lambda m: f"第 {_ZH_DIGIT[m.group(1)]} ", text)
    return content_terms(text)


def _weighted_terms(question: str) -> dict[str, tuple[str, float]]:
    """Each term a sentence may share with the question: (the question's word it belongs to, its weight). The
    question's own words weigh 1, a number it asks about 2 ("stage 3" is not "stage 1"), and the cross-language terms
    it expands to 0.5 (they bridge zh and en, but an alias such as ZeRO -> optimizer-state sharding must not outweigh
    what the question actually says). A word written with dots, hyphens or underscores is one word with its parts
    ("Megatron-LM": megatron-lm, megatron, lm): a sentence naming it shares it once, not three times. A part of two
    such words is the first one's the question says ("ZeRO-Offload ... offload_optimizer": offload is ZeRO-Offload's),
    so the weights do not depend on the order a set happens to iterate in."""
    out = {t: (t, 0.5) for term in expand_terms(question) for t in _terms(term)}
    out.update({t: (t, 2.0 if t.isdigit() else 1.0) for t in _terms(question)})
    said = question.lower()
    compounds = sorted((t for t in out if re.search(r"[._\-]", t)),
                       key=lambda t: (said.find(t) if t in said else len(said), t))
    for word in compounds:
        for part in re.split(r"[._\-]", word):
            if part in out and part != word and out[part][0] == part:
                out[part] = (word, out[part][1])
    return out


def _scores(question: str, q_terms: dict[str, tuple[str, float]], sents: list[str],
            embedder: Embedder | None) -> list[float]:
    """Meaning (cosine, when an embedder is given) plus the weighted share of the question's words a sentence has
    (a word counts once, with the best weight among its terms the sentence has)."""
    weight: dict[str, float] = {}
    for word, w in q_terms.values():
        weight[word] = max(weight.get(word, 0.0), w)
    norm = max(1.0, min(sum(weight.values()), 6.0))

    def shared(sentence: str) -> float:
        got: dict[str, float] = {}
        for t in _terms(sentence):
            if t in q_terms:
                word, w = q_terms[t]
                got[word] = max(got.get(word, 0.0), w)
        return sum(got.values())

    overlap = [shared(s) / norm for s in sents]
    if embedder is None or not sents:
        return overlap
    q = np.asarray(embedder.query(question), dtype=np.float32)
    m = np.asarray(embedder.passages(sents), dtype=np.float32)
    cos = (m @ q) / (np.linalg.norm(m, axis=1) * np.linalg.norm(q) + 1e-9)
    return [0.6 * float(c) + 0.4 * min(1.0, o) for c, o in zip(cos, overlap, strict=True)]
