"""The vector store: a Chroma PersistentClient collection of chunk embeddings (cosine space).

Metadata kept per chunk: language, source, kind (upload or corpus), and one boolean `fw_<Name>` per framework so that
Chroma `where` filters can select by framework. The chunk texts themselves live in chunks.jsonl
beside the store (the generation's source of truth); Chroma holds ids, vectors and filter fields.
"""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..filters import Filters
from ..types import Chunk

COLLECTION = "chunks"


def fw_key(name: str) -> str:
    return "fw_" + "".join(ch if ch.isalnum() else "_" for ch in name)


def _meta(c: Chunk) -> dict[str, Any]:
    m: dict[str, Any] = {"language": c.language, "source": c.source, "kind": c.kind}
    for fw in c.frameworks:
        m[fw_key(fw)] = True
    return m


class VectorStore:
    def __init__(self, path: Path) -> None:
        import chromadb
        from chromadb.config import Settings as ChromaSettings

        self.path = path
        self._client = chromadb.PersistentClient(
            path=str(path), settings=ChromaSettings(anonymized_telemetry=False, allow_reset=False)
        )
        self._col = self._client.get_or_create_collection(
            COLLECTION, metadata={"hnsw:space": "cosine"}, embedding_function=None
        )

    def count(self) -> int:
        return int(self._col.count())

    def add(self, chunks: list[Chunk], vectors: np.ndarray, batch: int = 1000) -> None:
        for i in range(0, len(chunks), batch):
            part = chunks[i : i + batch]
            self._col.add(
                ids=[c.id for c in part],
                embeddings=vectors[i : i + batch],
                metadatas=[_meta(c) for c in part],
            )

    def delete(self, ids: list[str], batch: int = 1000) -> None:
        for i in range(0, len(ids), batch):
            self._col.delete(ids=ids[i : i + batch])

    def vectors(self, ids: Sequence[str], dim: int, batch: int = 1000) -> np.ndarray:
        """The stored vectors of `ids`, one row each in that order (zeros for an id the store lacks).

        Read in pages of `batch` ids, so that a remote Chroma server answers in bounded responses."""
        out = np.zeros((len(ids), dim), dtype=np.float32)
        row = {cid: i for i, cid in enumerate(ids)}
        for i in range(0, len(ids), batch):
            got = self._col.get(ids=list(ids[i : i + batch]), include=["embeddings"])
            for cid, vec in zip(got["ids"], got["embeddings"], strict=True):
                out[row[cid]] = vec
        return out

    def query(self, vector: np.ndarray, k: int, where: dict[str, Any] | None = None) -> list[tuple[str, float]]:
        """(chunk id, cosine similarity) pairs, best first."""
        n = self.count()
        if n == 0:
            return []
        res = self._col.query(
            query_embeddings=[vector], n_results=min(k, n), where=where or None, include=["distances"]
        )
        return [(i, 1.0 - float(d)) for i, d in zip(res["ids"][0], res["distances"][0], strict=True)]

    def close(self) -> None:
        # Chroma keeps a per-path system cache; clearing lets a generation directory be removed.
        try:
            self._client.clear_system_cache()
        except Exception:  # noqa: BLE001 - best effort on shutdown
            pass


def where_clause(filters: Filters | None) -> dict[str, Any] | None:
    """The Chroma `where` for the conditions of filters that the store's metadata can express (framework,
    language); the source substring is left to Filters.accepts, which every candidate is checked with."""
    if not filters:
        return None
    parts: list[dict[str, Any]] = []
    if filters.framework:
        ors = [{fw_key(f): True} for f in filters.framework]
        parts.append(ors[0] if len(ors) == 1 else {"$or": ors})
    if filters.language:
        parts.append({"language": filters.language})
    if filters.kind == "upload":  # chunks stored before "kind" existed are all corpus ones: "corpus" is not pushed down
        parts.append({"kind": "upload"})
    if not parts:
        return None
    return parts[0] if len(parts) == 1 else {"$and": parts}
