"""The Embedder interface: one abstract method for queries and passages (`_encode`), the batching and the
normalisation in the base class. Vectors are L2-normalised float32 numpy arrays, so a dot product is the cosine
similarity."""
from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence

import numpy as np

from ..text import valid_unicode


class Embedder(ABC):
    name: str = "embedder"
    dim: int = 0

    @abstractmethod
    def _encode(self, texts: Sequence[str], kind: str) -> np.ndarray:
        """Raw vectors for texts; kind is "query" or "passage" (models like E5 embed them differently)."""

    def passages(self, texts: Sequence[str], batch_size: int = 64) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        texts = [valid_unicode(t) for t in texts]  # the tokenizers encode to UTF-8
        parts = [self._encode(texts[i : i + batch_size], "passage") for i in range(0, len(texts), batch_size)]
        return _normalise(np.vstack(parts))

    def query(self, text: str) -> np.ndarray:
        return _normalise(self._encode([valid_unicode(text)], "query"))[0]

    def queries(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:  # some engines cannot encode an empty batch
            return np.zeros((0, self.dim), dtype=np.float32)
        return _normalise(self._encode([valid_unicode(t) for t in texts], "query"))

    def ping(self) -> None:  # noqa: B027 - optional hook, a no-op by default
        """Raise a UserError when the embedder cannot answer now (a remote server that is down); for /readyz."""


def _normalise(v: np.ndarray) -> np.ndarray:
    v = np.asarray(v, dtype=np.float32)
    if v.ndim == 1:
        v = v[None, :]
    n = np.linalg.norm(v, axis=1, keepdims=True)
    n[n == 0] = 1.0
    return v / n
