"""Citations you can trust: parse [n], drop numbers that point at no source, check every factual
sentence against the passages, keep supported citations, attach the best-supported source where the
model cited nothing or cited wrongly, and drop sentences no source supports.

Support of a sentence by a passage = max over the passage's sentences of
    0.55 * cosine(multilingual embedding) + 0.45 * term overlap (share of the sentence's content terms,
    expanded across languages, found in the passage sentence).
The model (1.5B) rarely cites by itself (shared/notes/models.md), so alignment does the real work.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np

from ..embed import Embedder
from ..frameworks import expand_terms
from ..index.keyword import tokenize
from ..types import Citation
from .prompt import Source
from .text import split_sentences

_MARK = re.compile(r"\s*[\[【](\d+(?:\s*[,，、]\s*\d+)*)[\]】]")
_FACT_MIN_ZH = 6
_FACT_MIN_EN = 4


@dataclass
class CheckedAnswer:
    text: str
    citations: list[Citation]
    dropped_numbers: list[int] = field(default_factory=list)
    removed_sentences: list[str] = field(default_factory=list)
    factual_sentences: int = 0
    supported_sentences: int = 0


def parse_markers(sentence: str) -> tuple[str, list[int]]:
    """The sentence without its [n] markers, and the numbers in order of appearance."""
    nums: list[int] = []
    for m in _MARK.finditer(sentence):
        nums.extend(int(x) for x in re.split(r"[,，、]", m.group(1)) if x.strip())
    return _MARK.sub("", sentence).strip(), nums


def is_factual(sentence: str) -> bool:
    cjk = len(re.findall(r"[\u4e00-\u9fff]", sentence))
    words = len(re.findall(r"[A-Za-z]+", sentence))
    return cjk >= _FACT_MIN_ZH or words >= _FACT_MIN_EN or (cjk >= 3 and words >= 1)


def _terms(text: str) -> set[str]:
    toks = set(tokenize(text))
    for t in expand_terms(text):
        toks.update(tokenize(t))
    return toks


class CitationChecker:
    def __init__(self, embedder: Embedder, threshold: float = 0.35, drop_unsupported: bool = True) -> None:
        self.embedder = embedder
        self.threshold = threshold
        self.drop_unsupported = drop_unsupported

    def support_matrix(self, sentences: list[str], sources: list[Source]) -> tuple[np.ndarray, list[list[str]]]:
        """support[i, j] of sentence i by source j, and each source's sentences (for snippets)."""
        src_sents = [split_sentences(s.text) or [s.text] for s in sources]
        flat = [x for ss in src_sents for x in ss]
        if not sentences or not flat:
            return np.zeros((len(sentences), len(sources))), src_sents
        vecs = self.embedder.passages(sentences + flat)
        sv, pv = vecs[: len(sentences)], vecs[len(sentences):]
        cos = sv @ pv.T
        sent_terms = [_terms(s) for s in sentences]
        flat_terms = [set(tokenize(x)) for x in flat]
        overlap = np.array([[len(st & ft) / max(1, len(st)) for ft in flat_terms] for st in sent_terms])
        pair = 0.55 * cos + 0.45 * overlap
        support = np.zeros((len(sentences), len(sources)))
        self._best_sent = np.zeros((len(sentences), len(sources)), dtype=int)
        start = 0
        for j, ss in enumerate(src_sents):
            block = pair[:, start : start + len(ss)]
            support[:, j] = block.max(axis=1)
            self._best_sent[:, j] = block.argmax(axis=1)
            start += len(ss)
        return support, src_sents

    def check(self, answer: str, sources: list[Source]) -> CheckedAnswer:
        valid = {s.n for s in sources}
        by_n = {s.n: (j, s) for j, s in enumerate(sources)}
        raw = split_sentences(answer)
        parsed = [parse_markers(s) for s in raw]
        plain = [p[0] for p in parsed]
        support, src_sents = self.support_matrix(plain, sources)
        out_sents: list[str] = []
        used: dict[int, Citation] = {}
        result = CheckedAnswer("", [])
        for i, (text, nums) in enumerate(parsed):
            result.dropped_numbers.extend(n for n in nums if n not in valid)
            nums = [n for n in dict.fromkeys(nums) if n in valid]
            if not is_factual(text):
                if re.search(r"[\w\u4e00-\u9fff]", text):  # drop debris such as a lone "." left by the model
                    out_sents.append(text)
                continue
            result.factual_sentences += 1
            keep = [n for n in nums if support[i, by_n[n][0]] >= self.threshold]
            if not keep and len(sources):
                j = int(np.argmax(support[i]))
                if support[i, j] >= self.threshold:
                    keep = [sources[j].n]
            if not keep:
                if not self.drop_unsupported:
                    out_sents.append(text)
                else:
                    result.removed_sentences.append(text)
                continue
            result.supported_sentences += 1
            for n in keep:
                j, src = by_n[n]
                score = float(support[i, j])
                if n not in used or used[n].support < score:
                    snippet = src_sents[j][int(self._best_sent[i, j])]
                    used[n] = _record(src, snippet, score)
            out_sents.append(text + "".join(f"[{n}]" for n in keep))
        if not result.supported_sentences and result.removed_sentences:
            # Nothing survived the check: keep nothing rather than an unsupported answer.
            result.text = ""
        else:
            result.text = _join(out_sents)
        result.citations = [used[n] for n in sorted(used)]
        return result


def _record(src: Source, snippet: str, score: float) -> Citation:
    c = src.hit.chunk
    return Citation(n=src.n, chunk_id=c.id, title=c.title, heading_path=list(c.heading_path), source=c.source,
                    lines=list(c.lines), snippet=snippet.strip()[:400], support=round(score, 4), supported=True)


def _join(sentences: list[str]) -> str:
    out = ""
    for s in sentences:
        if not out:
            out = s
        elif re.search(r"[\u4e00-\u9fff。！？；]", out[-1]) or re.match(r"[\u4e00-\u9fff]", s):
            out += s
        else:
            out += " " + s
    return out.strip()
