"""Keyword search: BM25 (bm25s) over the search tokens of assistant.text.tokenize, saved beside the vector store
(with the chunks' mean length, `mean_length.json`, which BM25 scores a text outside the index with)."""
from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from ..text import tokenize
from ..types import Chunk


def keyword_text(c: Chunk) -> str:
    """What BM25 indexes of a chunk. Headings carry the section's topic words; framework names make "PyTorch FSDP"
    match the right docs."""
    return " ".join([*c.heading_path, *c.frameworks, c.text])


class KeywordIndex:
    """BM25 over the chunks of one index generation; row i is chunk i of the generation."""

    def __init__(self, retriever, mean_length: float | None = None) -> None:  # bm25s.BM25
        self._r = retriever
        self._vocab: dict[str, int] = getattr(retriever, "vocab_dict", {}) or {}
        # the indexed chunks' mean length in tokens; None for an index saved without it (the caller computes it)
        self.mean_length = mean_length

    @classmethod
    def build(cls, texts: list[str]) -> KeywordIndex:
        import bm25s

        docs = [tokenize(t) or ["∅"] for t in texts]
        r = bm25s.BM25(k1=1.2, b=0.75)
        r.index(docs, show_progress=False)
        return cls(r, sum(map(len, docs)) / len(docs) if docs else 1.0)

    def save(self, path: Path) -> None:
        self._r.save(str(path), show_progress=False)
        if self.mean_length is not None:
            (path / "mean_length.json").write_text(json.dumps({"mean_length": self.mean_length}), encoding="utf-8")

    @classmethod
    def load(cls, path: Path) -> KeywordIndex:
        import bm25s

        try:
            mean = float(json.loads((path / "mean_length.json").read_text(encoding="utf-8"))["mean_length"])
        except (OSError, ValueError, KeyError, TypeError):  # saved before it was kept, or damaged
            mean = None
        return cls(bm25s.BM25.load(str(path), show_progress=False, verbosity=0), mean)

    def has(self, token: str) -> bool:
        """Whether some indexed chunk has this search token."""
        return token in self._vocab

    def search(self, query: str | list[str], k: int = 50) -> list[tuple[int, float]]:
        """(row, score) pairs, best first; only rows with a positive score."""
        toks = tokenize(query) if isinstance(query, str) else query
        toks = [t for t in toks if t in self._vocab]
        if not toks:
            return []
        n = self._r.scores["num_docs"] if isinstance(getattr(self._r, "scores", None), dict) else None
        k = min(k, n) if n else k
        rows, scores = self._r.retrieve([toks], k=k, show_progress=False, n_threads=1)
        return [(int(i), float(s)) for i, s in zip(rows[0], scores[0], strict=True) if s > 0]

    def score_texts(self, tokens: list[str], texts: Sequence[str], avgdl: float) -> list[float]:
        """The BM25 score each of `texts` (not indexed: e.g. a passage's translation) would have for these query
        tokens among the indexed chunks: the index's document frequencies and parameters (Lucene's idf, as bm25s
        scores), `avgdl` the indexed chunks' mean length in tokens; a repeated query token counts again, as in
        `search`."""
        r = self._r
        scores = getattr(r, "scores", None)
        if not isinstance(scores, dict) or not tokens:
            return [0.0] * len(texts)
        indptr, n = scores["indptr"], scores["num_docs"]
        idf: dict[str, float] = {}
        for tok in tokens:
            i = self._vocab.get(tok)
            if i is not None and i + 1 < len(indptr):
                df = int(indptr[i + 1] - indptr[i])
                idf[tok] = math.log(1 + (n - df + 0.5) / (df + 0.5))
        out = []
        for text in texts:
            tf = Counter(tokenize(text))
            norm = r.k1 * ((1 - r.b) + r.b * (sum(tf.values()) or 1) / avgdl)
            out.append(sum(idf[t] * tf[t] / (norm + tf[t]) for t in tokens if t in idf and tf[t]))
        return out
