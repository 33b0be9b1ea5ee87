"""Embedding cache: chunk id -> vector, in SQLite, per embedder. Lets a rebuild embed only new chunks."""
from __future__ import annotations

import sqlite3
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from ..private import private_dir, private_file


class EmbeddingCache:
    def __init__(self, path: Path, dim: int) -> None:
        private_dir(path.parent)
        self.dim = dim
        self._db = sqlite3.connect(str(private_file(path)))
        self._db.execute("CREATE TABLE IF NOT EXISTS emb (id TEXT PRIMARY KEY, vec BLOB NOT NULL)")

    def missing(self, ids: Iterable[str]) -> list[str]:
        ids = list(ids)
        have: set[str] = set()
        for i in range(0, len(ids), 500):
            part = ids[i : i + 500]
            q = "SELECT id FROM emb WHERE id IN (%s)" % ",".join("?" * len(part))
            have.update(r[0] for r in self._db.execute(q, part))
        return [i for i in ids if i not in have]

    def put(self, ids: list[str], vectors: np.ndarray) -> None:
        with self._db:  # one transaction: a crash leaves the cache consistent
            self._db.executemany(
                "INSERT OR REPLACE INTO emb (id, vec) VALUES (?, ?)",
                [(i, np.asarray(v, dtype=np.float32).tobytes()) for i, v in zip(ids, vectors, strict=True)],
            )

    def get(self, ids: list[str]) -> np.ndarray:
        found: dict[str, bytes] = {}
        for i in range(0, len(ids), 500):
            part = ids[i : i + 500]
            q = "SELECT id, vec FROM emb WHERE id IN (%s)" % ",".join("?" * len(part))
            found.update(self._db.execute(q, part).fetchall())
        out = np.zeros((len(ids), self.dim), dtype=np.float32)
        for row, cid in enumerate(ids):
            out[row] = np.frombuffer(found[cid], dtype=np.float32)
        return out

    def close(self) -> None:
        self._db.close()
