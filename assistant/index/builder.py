"""Building the index: incremental (embed only new or changed chunks) and atomic (a killed build
leaves the previous generation live).

A build writes a new generation directory next to the live one and, only when it is complete,
replaces the CURRENT pointer with os.replace. Files whose bytes are unchanged reuse their chunks;
chunks whose id is in the embedding cache reuse their vectors; the Chroma store of the previous
generation is copied and patched (deleted ids removed, new ids added) instead of refilled.

With a Chroma server (`server`, assistant/index/server.py) the same plan is written as a new collection of the
server: vectors of chunks the previous generation has are read back from it (never embedded again, even by a
machine whose embedding cache is empty), the rest are embedded, every chunk is written with its text, and the
generation goes live by its catalogue record and the pointer, written last. The build lock and the embedding
cache stay in index_dir on the machine that builds.
"""
from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import os
import shutil
import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..corpus.sync import provenance
from ..embed import Embedder
from ..errors import UserError
from ..ingest import DEFAULT_CHUNK_TOKENS, LoadError, chunk_document, discover, load_document
from ..ingest.chunker import CHUNKER_VERSION
from ..private import DIR_MODE, fsync_dir, private_dir, private_file, replace_durably, seal_tree
from ..types import Chunk
from .cache import EmbeddingCache
from .identity import embedder_version, probe_vector
from .keyword import KeywordIndex, keyword_text
from .snapshot import IndexMeta, current_generation, read_chunks, read_meta, write_meta
from .store import VectorStore

if TYPE_CHECKING:
    from .server import ServerIndex

FORMAT_VERSION = 1


@dataclass
class BuildReport:
    generation: str = ""
    documents: int = 0
    chunks: int = 0
    embedded: int = 0
    added: int = 0
    removed: int = 0
    changed_files: int = 0
    skipped: list[tuple[str, str]] = field(default_factory=list)
    unchanged: bool = False
    seconds: float = 0.0
    embed_seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        d = dict(self.__dict__)
        d["skipped"] = [{"path": p, "reason": r} for p, r in self.skipped]
        return d


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _fingerprint(path: Path, root: Path) -> str:
    """The file's sha256, and for a synced page also its provenance: the same bytes at a new commit get new
    links, so their chunks are made again (same ids, so no new embeddings)."""
    prov = provenance(path, root)
    if not prov:
        return _sha(path)
    return _sha(path) + ":" + hashlib.sha256(json.dumps(prov, sort_keys=True).encode()).hexdigest()[:16]


class _BuildLock:
    def __init__(self, index_dir: Path) -> None:
        self.path = index_dir / ".build.lock"

    def __enter__(self) -> _BuildLock:
        self.f = private_file(self.path).open("w")
        try:
            fcntl.flock(self.f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as e:
            raise UserError("build_running", "Another index build is running on this index.",
                            "另一个索引构建正在进行。", status=409) from e
        return self

    def __exit__(self, *exc: object) -> None:
        fcntl.flock(self.f, fcntl.LOCK_UN)
        self.f.close()


def build_index(
    index_dir: Path,
    doc_paths: list[Path],
    embedder: Embedder,
    *,
    chunk_tokens: int | None = None,
    progress: bool = True,
    log: Callable[[str], None] = print,
    keep_previous: int = 1,
    on_progress: Callable[[int, int], None] | None = None,
    server: ServerIndex | None = None,
) -> BuildReport:
    """Index every supported file under doc_paths into index_dir, or into `server` (then index_dir keeps only the
    build lock and the embedding cache); see the module docstring. `on_progress(done, total)` is called as the new
    chunks are embedded (total: the chunks to embed)."""
    t0 = time.perf_counter()
    private_dir(index_dir)
    cleanup = server.remove_unpublished if server is not None else lambda: _remove_unpublished(index_dir)
    with _BuildLock(index_dir):
        cleanup()
        try:
            if server is not None:
                report = _build_on_server(server, index_dir, doc_paths, embedder, chunk_tokens, progress, log,
                                          on_progress)
            else:
                report = _build_locked(index_dir, doc_paths, embedder, chunk_tokens, progress, log, on_progress)
        except BaseException as exc:  # a failed build leaves only the previous generation behind
            cleanup()
            if isinstance(exc, Exception) and _out_of_space(exc):
                raise UserError(
                    "disk_full", f"The disk is full: the index build in {index_dir} could not write its files. "
                    "The previous index is unchanged. Free some space and build again.",
                    f"磁盘已满：{index_dir} 中的索引构建无法写入文件。原有索引未受影响。请释放空间后重新构建。",
                    status=507) from exc
            if isinstance(exc, OSError | shutil.Error | sqlite3.Error):
                raise UserError(
                    "index_write_failed", f"The index build in {index_dir} could not write its files ({exc_reason(exc)}). "
                    "The previous index is unchanged. Check the disk and the directory's permissions, then build again.",
                    f"{index_dir} 中的索引构建无法写入文件（{exc_reason(exc)}）。原有索引未受影响。请检查磁盘和目录权限后重新构建。",
                    status=500) from exc
            raise
        if not report.unchanged:
            if server is not None:
                server.prune(keep_previous)
            else:
                _prune(index_dir, keep_previous)
    report.seconds = time.perf_counter() - t0
    return report


@dataclass
class _Plan:
    chunk_tokens: int
    files: list[tuple[Path, Path]]
    fingerprints: dict[str, str]
    same_settings: bool
    report: BuildReport
    chunks: list[Chunk] = field(default_factory=list)
    file_sources: dict[str, str] = field(default_factory=dict)

    def meta(self, embedder: Embedder) -> IndexMeta:
        """What the new generation records: the settings that made it, its files, and the embedder's identity."""
        return IndexMeta(embedder.name, self.chunk_tokens, FORMAT_VERSION, CHUNKER_VERSION,
                         fingerprints=self.fingerprints, documents=self.report.documents, chunks=len(self.chunks),
                         skipped=tuple(self.report.skipped), file_sources=self.file_sources,
                         roots=tuple(sorted({str(r) for _f, r in self.files})), created=time.time(),
                         dim=embedder.dim, embedder_version=embedder_version(embedder), probe=probe_vector(embedder))


def _plan(doc_paths: list[Path], embedder: Embedder, chunk_tokens: int | None, prev_gen: str | None,
          prev_meta: IndexMeta | None, prev_chunks: Callable[[], list[Chunk]], log: Callable[[str], None]) -> _Plan:
    """What to build: the files, their chunks (reused from the previous generation where a file is unchanged and
    the build settings are the same); report.unchanged when nothing changed at all."""
    chunk_tokens = chunk_tokens or DEFAULT_CHUNK_TOKENS
    files = discover(doc_paths)
    fingerprints = {str(f): _fingerprint(f, root) for f, root in files}
    settings_key = {"embedder": embedder.name, "chunk_tokens": chunk_tokens, "format": FORMAT_VERSION,
                    "chunker": CHUNKER_VERSION}
    report = BuildReport()
    same_settings = prev_meta is not None and prev_meta.build_key() == settings_key
    plan = _Plan(chunk_tokens, files, fingerprints, same_settings, report)
    if prev_gen and prev_meta and same_settings and prev_meta.fingerprints == fingerprints:
        report.unchanged = True
        report.generation = prev_gen
        report.documents = prev_meta.documents
        report.chunks = prev_meta.chunks
        report.skipped = list(prev_meta.skipped)
        return plan
    plan.chunks, plan.file_sources = _collect_chunks(files, fingerprints, prev_chunks() if same_settings else [],
                                                     prev_meta, same_settings, chunk_tokens, report, log)
    if not plan.chunks:
        raise UserError("empty_corpus",
                        "No documents to index: the given paths hold no readable Markdown, reST, notebook, HTML, PDF, "
                        "text or .py tutorial files.",
                        "没有可索引的文档：给定路径中没有可读取的 Markdown、reST、notebook、HTML、PDF、文本或 .py 教程文件。")
    return plan


def _build_locked(index_dir: Path, doc_paths: list[Path], embedder: Embedder, chunk_tokens: int | None,
                  progress: bool, log: Callable[[str], None],
                  on_progress: Callable[[int, int], None] | None = None) -> BuildReport:
    prev_gen = current_generation(index_dir)
    prev_meta = read_meta(prev_gen) if prev_gen else None
    plan = _plan(doc_paths, embedder, chunk_tokens, prev_gen.name if prev_gen else None, prev_meta,
                 lambda: read_chunks(prev_gen) if prev_gen else [], log)
    report, chunks = plan.report, plan.chunks
    if report.unchanged:
        return report
    same_settings = plan.same_settings
    new_gen = _write_generation(index_dir, chunks, embedder, prev_gen if same_settings else None, progress, report,
                                on_progress)
    write_meta(new_gen, plan.meta(embedder))
    # Durable before visible: the generation's files and directories are fsynced, then renamed into place, then
    # the pointer is written to a temp file, fsynced and renamed over CURRENT (the moment the generation goes
    # live), and the directory fsynced. A crash at any point leaves the previous generation answering.
    seal_tree(new_gen)
    final = new_gen.with_name(new_gen.name.removesuffix(".partial"))
    os.replace(new_gen, final)
    fsync_dir(index_dir)
    replace_durably(index_dir / "CURRENT", final.name)
    report.generation = final.name
    report.chunks = len(chunks)
    return report


def _collect_chunks(files: list[tuple[Path, Path]], fingerprints: dict[str, str], prev_chunks: list[Chunk],
                    prev_meta: IndexMeta | None, same_settings: bool, chunk_tokens: int, report: BuildReport,
                    log: Callable[[str], None]) -> tuple[list[Chunk], dict[str, str]]:
    prev_by_source: dict[str, list[Chunk]] = {}
    prev_files = prev_meta.fingerprints if prev_meta and same_settings else {}
    prev_sources = prev_meta.file_sources if prev_meta and same_settings else {}
    for c in prev_chunks:
        prev_by_source.setdefault(c.source, []).append(c)
    chunks: list[Chunk] = []
    file_sources: dict[str, str] = {}
    for f, root in files:
        key = str(f)
        src = prev_sources.get(key)
        if src and prev_files.get(key) == fingerprints[key] and src in prev_by_source:
            chunks.extend(prev_by_source[src])
            file_sources[key] = src
            report.documents += 1
            continue
        try:
            doc = load_document(f, root)
        except LoadError as e:
            report.skipped.append((str(f), e.reason))
            log(f"skipped {f}: {e.reason}")
            continue
        report.changed_files += 1
        report.documents += 1
        file_sources[key] = doc.source
        chunks.extend(chunk_document(doc, max_tokens=chunk_tokens))
    # dedupe ids (identical text under identical headings of the same source)
    seen: set[str] = set()
    unique = [c for c in chunks if not (c.id in seen or seen.add(c.id))]  # type: ignore[func-returns-value]
    return unique, file_sources


def _write_generation(index_dir: Path, chunks: list[Chunk], embedder: Embedder, prev_gen: Path | None,
                      progress: bool, report: BuildReport,
                      on_progress: Callable[[int, int], None] | None = None) -> Path:
    gen = index_dir / f"gen-{time.time_ns()}.partial"
    gen.mkdir(mode=DIR_MODE)
    cache = EmbeddingCache(index_dir / "cache" / f"{_safe(embedder.name)}.sqlite", embedder.dim)
    try:
        ids = [c.id for c in chunks]
        prev_ids: set[str] = set()
        if prev_gen is not None and (prev_gen / "chroma").is_dir():
            shutil.copytree(prev_gen / "chroma", gen / "chroma")
            prev_ids = {c.id for c in read_chunks(prev_gen)}
        store = VectorStore(gen / "chroma")
        todo = cache.missing(ids)
        reuse = [i for i in todo if i in prev_ids]  # a cache lost or cleared: the copied store has these vectors
        if reuse:
            cache.put(reuse, store.vectors(reuse, embedder.dim))
            todo = [i for i in todo if i not in prev_ids]
        by_id = {c.id: c for c in chunks}
        te = time.perf_counter()
        _embed_into_cache([by_id[i] for i in todo], embedder, cache, progress, on_progress=on_progress)
        report.embed_seconds = time.perf_counter() - te
        report.embedded = len(todo)
        removed = sorted(prev_ids - set(ids))
        added = [c for c in chunks if c.id not in prev_ids]
        store.delete(removed)
        store.add(added, cache.get([c.id for c in added]))
        report.removed, report.added = len(removed), len(added)
        store.close()
        with (gen / "chunks.jsonl").open("w", encoding="utf-8") as f:
            for c in chunks:
                f.write(json.dumps(c.to_dict(), ensure_ascii=False) + "\n")
        KeywordIndex.build([keyword_text(c) for c in chunks]).save(gen / "bm25")
    finally:
        cache.close()
    return gen


def _build_on_server(server: ServerIndex, index_dir: Path, doc_paths: list[Path], embedder: Embedder,
                     chunk_tokens: int | None, progress: bool, log: Callable[[str], None],
                     on_progress: Callable[[int, int], None] | None = None) -> BuildReport:
    prev_gen = server.live(fresh=True)
    prev_meta = server.meta(prev_gen) if prev_gen else None
    prev: list[Chunk] = []

    def prev_chunks() -> list[Chunk]:
        prev.extend(server.store(prev_gen).chunks() if prev_gen else [])
        return prev

    plan = _plan(doc_paths, embedder, chunk_tokens, prev_gen, prev_meta, prev_chunks, log)
    report, chunks = plan.report, plan.chunks
    if report.unchanged:
        return report
    cache = EmbeddingCache(index_dir / "cache" / f"{_safe(embedder.name)}.sqlite", embedder.dim)
    try:
        ids = [c.id for c in chunks]
        prev_ids = {c.id for c in prev}
        reuse = [i for i in cache.missing(ids) if i in prev_ids]  # the previous generation has them: read back
        if reuse and prev_gen:
            cache.put(reuse, server.store(prev_gen).vectors(reuse, embedder.dim))
        # The new collection exists from here on, filled batch by batch as its vectors are ready; until publish()
        # nothing points to it, and a build killed meanwhile leaves it for the next build to remove.
        gen, store = server.new_generation()
        batch = 256
        total = len(cache.missing(ids))
        done = 0
        if on_progress is not None:
            on_progress(0, total)
        for i in range(0, len(chunks), batch):
            part = chunks[i : i + batch]
            todo = cache.missing([c.id for c in part])
            te = time.perf_counter()
            by_id = {c.id: c for c in part}
            _embed_into_cache([by_id[t] for t in todo], embedder, cache, progress=False)
            report.embed_seconds += time.perf_counter() - te
            report.embedded += len(todo)
            done += len(todo)
            if on_progress is not None and todo:
                on_progress(done, total)
            store.add(part, cache.get([c.id for c in part]), with_texts=True, first_row=i)
        report.removed = len(prev_ids - set(ids))
        report.added = len(set(ids) - prev_ids)
    finally:
        cache.close()
    server.publish(gen, plan.meta(embedder))
    report.generation = gen
    report.chunks = len(chunks)
    return report


def embed_text(c: Chunk) -> str:
    """What the dense embedder sees: the heading path gives short passages their context."""
    head = " > ".join(c.heading_path[-2:])
    return f"{head}\n{c.text}" if head else c.text


def _embed_into_cache(chunks: list[Chunk], embedder: Embedder, cache: EmbeddingCache, progress: bool,
                      batch: int = 32, on_progress: Callable[[int, int], None] | None = None) -> None:
    if on_progress is not None:
        on_progress(0, len(chunks))
    if not chunks:
        return
    from tqdm import tqdm

    bar = tqdm(total=len(chunks), desc="embedding", unit="chunk", disable=not progress)
    for i in range(0, len(chunks), batch):
        part = chunks[i : i + batch]
        cache.put([c.id for c in part], embedder.passages([embed_text(c) for c in part]))
        bar.update(len(part))
        if on_progress is not None:
            on_progress(min(i + batch, len(chunks)), len(chunks))
    bar.close()


def _safe(name: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_" else "_" for ch in name)[:80]


def _gen_time(p: Path) -> int:
    return int(p.name.removesuffix(".partial").split("-")[1])


def _remove_unpublished(index_dir: Path) -> None:
    """Remove what a killed or failed build left: .partial directories, and generations newer than the live one
    that never went live (renamed, then killed before the CURRENT switch); otherwise _prune would keep such a
    generation as "the previous one" and delete the one that really was."""
    live = current_generation(index_dir)
    for p in index_dir.glob("gen-*"):
        if p.name.endswith(".partial") or (p.is_dir() and p != live and (live is None or _gen_time(p) > _gen_time(live))):
            shutil.rmtree(p, ignore_errors=True)
    (index_dir / "CURRENT.tmp").unlink(missing_ok=True)


def exc_reason(exc: BaseException) -> str:
    """A short reason for a failed write: the OS's words for an OSError, else the first line of the text."""
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return (str(exc).splitlines() or [type(exc).__name__])[0][:200]


_NO_SPACE = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)


def _out_of_space(exc: BaseException) -> bool:
    """True when exc (or what caused it, or one of shutil.copytree's collected errors) says the disk is full.
    SQLite (the embedding cache, Chroma's store) reports it as text rather than an errno."""
    seen: set[int] = set()
    todo: list[object] = [exc]
    while todo:
        e = todo.pop()
        if id(e) in seen:
            continue
        seen.add(id(e))
        if isinstance(e, OSError) and e.errno in _NO_SPACE:
            return True
        text = str(e)
        if "disk is full" in text or "No space left" in text or "File too large" in text:
            return True
        if isinstance(e, shutil.Error) and e.args and isinstance(e.args[0], list):
            todo.extend(str(t[-1]) for t in e.args[0] if isinstance(t, tuple))
        if isinstance(e, BaseException):
            todo.extend(x for x in (e.__cause__, e.__context__) if x is not None)
    return False


def _prune(index_dir: Path, keep_previous: int) -> None:
    live = current_generation(index_dir)
    gens = sorted((p for p in index_dir.glob("gen-*") if p.is_dir() and not p.name.endswith(".partial")),
                  key=_gen_time)
    old = [g for g in gens if g != live]
    for g in old[: max(0, len(old) - keep_previous)]:
        shutil.rmtree(g, ignore_errors=True)
