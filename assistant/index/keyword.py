"""Keyword search: jieba-tokenised BM25 (bm25s), saved beside the vector store.

Tokens: jieba words for Chinese, lower-cased words (with dots and dashes kept, so
`tf.function` and `megatron-lm` stay whole, plus their parts) for English; stop words dropped.
"""
from __future__ import annotations

import logging
import re
from pathlib import Path

import numpy as np

_WORD = re.compile(r"[a-z0-9][a-z0-9_.\-]*[a-z0-9]|[a-z0-9]|[\u4e00-\u9fff]+")
_STOP = frozenset(
    """a an the of to in on for and or is are was were be been it its this that these those with as by at from
    what which who how why when where do does did can could should would will i we you they he she my our your
    there their than then so if not no yes about into over use used using also more most such one two
    的 了 和 是 在 与 及 或 有 也 就 都 而 把 被 对 等 中 上 下 为 以 之 这 那 个 吗 呢 吧 啊 什么 怎么 如何 哪个 哪些 可以 一个 我们 你们
    他们 它 它们 还是 是否 进行 使用 通过 需要 支持""".split()
)

_jieba_ready = False


def _jieba():
    global _jieba_ready
    import jieba

    if not _jieba_ready:
        jieba.setLogLevel(logging.WARNING)
        for term in ("张量并行", "流水线并行", "数据并行", "序列并行", "专家并行", "混合精度", "动转静", "飞桨", "零冗余",
                     "分布式训练", "计算图", "动态图", "静态图", "自动并行", "混合并行", "显存", "国产化"):
            jieba.add_word(term)
        _jieba_ready = True
    return jieba


def tokenize(text: str) -> list[str]:
    """Search tokens of a text in either language."""
    low = text.lower()
    out: list[str] = []
    for m in _WORD.finditer(low):
        tok = m.group(0)
        if "\u4e00" <= tok[0] <= "\u9fff":
            out.extend(w for w in _jieba().lcut(tok) if w not in _STOP)
        elif tok not in _STOP:
            out.append(tok)
            if "." in tok or "-" in tok or "_" in tok:
                out.extend(p for p in re.split(r"[._\-]", tok) if p and p not in _STOP)
    return out


class KeywordIndex:
    """BM25 over the chunks of one index generation; row i is chunk i of the generation."""

    def __init__(self, retriever) -> None:  # bm25s.BM25
        self._r = retriever
        self._vocab: dict[str, int] = getattr(retriever, "vocab_dict", {}) or {}

    @classmethod
    def build(cls, texts: list[str]) -> KeywordIndex:
        import bm25s

        r = bm25s.BM25(k1=1.2, b=0.75)
        r.index([tokenize(t) or ["∅"] for t in texts], show_progress=False)
        return cls(r)

    def save(self, path: Path) -> None:
        self._r.save(str(path), show_progress=False)

    @classmethod
    def load(cls, path: Path) -> KeywordIndex:
        import bm25s

        return cls(bm25s.BM25.load(str(path), show_progress=False, verbosity=0))

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
