"""The vector store: one Chroma collection of chunk embeddings (cosine space), embedded or on a Chroma server.

Embedded (the default): a PersistentClient in the generation's directory, one collection `chunks`; the chunk
texts live in chunks.jsonl beside it. On a Chroma server (assistant/index/server.py) each generation is its own
collection of the server, and holds the chunk texts too (each record's document is the chunk's JSON, its
metadata `row` the chunk's position), so that every replica reads one generation from one place.

Metadata kept per chunk: language, source, kind (upload or corpus), and one boolean `fw_<Name>` per framework so that
Chroma `where` filters can select by framework.
"""
from __future__ import annotations

import json
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
    """`VectorStore(path)`: embedded Chroma in a directory; `VectorStore(client=..., name=...)`: the collection
    `name` of a Chroma client (a server's HttpClient). The methods are the same for both."""

    def __init__(self, path: Path | None = None, *, client: Any = None, name: str = COLLECTION) -> None:
        self.path = path
        self.name = name
        self._owns_client = client is None
        if client is None:
            import chromadb
            from chromadb.config import Settings as ChromaSettings

            if path is None:
                raise ValueError("VectorStore needs a path or a client")
            client = chromadb.PersistentClient(
                path=str(path), settings=ChromaSettings(anonymized_telemetry=False, allow_reset=False)
            )
        self._client = client
        self._col = self._client.get_or_create_collection(
            name, metadata={"hnsw:space": "cosine"}, embedding_function=None
        )

    def count(self) -> int:
        return int(self._col.count())

    def add(self, chunks: list[Chunk], vectors: np.ndarray, batch: int = 1000, *, with_texts: bool = False,
            first_row: int = 0) -> None:
        """Add chunks with their vectors; `with_texts` also stores each chunk (its JSON as the record's document,
        its row `first_row + i`), as a generation on a Chroma server does."""
        for i in range(0, len(chunks), batch):
            part = chunks[i : i + batch]
            metas = [_meta(c) for c in part]
            docs = None
            if with_texts:
                for j, m in enumerate(metas):
                    m["row"] = first_row + i + j
                docs = [json.dumps(c.to_dict(), ensure_ascii=False) for c in part]
            self._col.add(ids=[c.id for c in part], embeddings=vectors[i : i + batch], metadatas=metas,  # type: ignore[arg-type]
                          documents=docs)

    def chunks(self, batch: int = 1000) -> list[Chunk]:
        """The chunks stored `with_texts`, in row order (read in pages of `batch`)."""
        rows: list[tuple[int, Chunk]] = []
        total = self.count()
        for offset in range(0, total, batch):
            got = self._col.get(limit=batch, offset=offset, include=["documents", "metadatas"])
            for doc, meta in zip(got["documents"] or [], got["metadatas"] or [], strict=True):
                rows.append((int(meta["row"]), Chunk.from_dict(json.loads(doc))))  # type: ignore[arg-type]
        rows.sort(key=lambda r: r[0])
        return [c for _r, c in rows]

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
        if not self._owns_client:
            return  # a server's client is shared by the stores of its generations
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
