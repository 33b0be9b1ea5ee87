"""Uploaded documents: the user's own collection beside the corpus (add, list, delete, re-index), as jobs.

Layout under settings.state_dir (never the repository, so `assistant index build`, `make run` and a new
checkout keep them):
    uploads/<document id>/<file name>   the documents, one folder each; `uploads/` is one more index root,
                                        so a chunk's source reads uploads/<id>/<name> (types.source_kind)
    uploads/.documents.json             the registry: id, name, size, sha256, added, owner (hidden: not indexed)
    uploads.staging/, uploads.trash/    a file being checked before its job, a document being deleted

An upload is checked at once (type, size, count, a duplicate, and that it parses into at least one chunk:
a broken PDF is a 422 naming the file and the reason) and then indexed by a job on one worker thread, which
runs the incremental, atomic index build (index/builder.py) over the live index's roots plus `uploads/`.
Searches keep reading the previous generation until the new one is complete, so no search sees half a
document; a job that fails takes its file back out, leaving the index and the registry as they were. A delete
is a job too (waited for): the folder moves to the trash, the build drops its chunks, a failure moves it back.
Jobs live in memory (the server's lifetime); the documents and the registry live on disk.
"""
from __future__ import annotations

import hashlib
import json
import logging
import queue
import re
import shutil
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from .embed import Embedder
from .errors import UserError
from .index.builder import build_index
from .index.location import open_index
from .index.server import ServerIndex
from .ingest import LoadError, chunk_document, load_document
from .ingest.uploads import REGISTRY, read_registry, uploads_dir
from .private import private_dir, replace_durably
from .types import UPLOADS_FOLDER, source_kind

log = logging.getLogger(__name__)

UPLOAD_SUFFIXES = (".md", ".markdown", ".rst", ".ipynb", ".html", ".htm", ".pdf", ".txt")
ID_RE = re.compile(r"^[0-9a-f]{32}$")
JobStatus = Literal["queued", "running", "done", "failed"]
_KEEP_JOBS = 1000
_BUSY_RETRY_S = 120.0  # how long a job waits for another build (the CLI's) to finish


@dataclass
class Job:
    """One add, delete or re-index; `done`/`total` count the chunks embedded."""

    id: str
    action: Literal["add", "delete", "reindex"]
    document_id: str | None = None
    status: JobStatus = "queued"
    done: int = 0
    total: int = 0
    reason: str = ""  # why it failed (English; reason_zh in Chinese)
    reason_zh: str = ""
    created: float = field(default_factory=time.time)
    finished: float | None = None
    seconds: float = 0.0
    finished_event: threading.Event = field(default_factory=threading.Event, repr=False)

    def to_dict(self, lang: str = "en") -> dict[str, Any]:
        d = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in ("finished_event", "reason_zh")}
        d["reason"] = self.reason_zh if lang == "zh" and self.reason_zh else self.reason
        return d


def _refuse(code: str, en: str, zh: str, status: int) -> UserError:
    return UserError(code, en, zh, status)


def safe_name(name: str) -> str:
    """The file name of an upload, without any folder part or control characters (at most 160 characters)."""
    base = re.split(r"[\\/]", name or "")[-1]
    base = "".join(ch for ch in base if ch.isprintable() and ch not in '<>:"|?*').strip().lstrip(".")
    if len(base) > 160:
        stem, dot, suffix = base.rpartition(".")
        base = stem[: 150] + dot + suffix if dot else base[:160]
    return base


class DocumentLibrary:
    """The uploads folder, its registry and the job worker. `embedder()` gives the index's embedder;
    `published()` is called after a build went live (the service reopens its retriever there)."""

    def __init__(self, settings: Any, embedder: Callable[[], Embedder], published: Callable[[], None]) -> None:
        self.settings = settings
        self.root = uploads_dir(settings.state_dir)
        self.staging = self.root.with_name(UPLOADS_FOLDER + ".staging")
        self.trash = self.root.with_name(UPLOADS_FOLDER + ".trash")
        self.index_dir = Path(settings.index_dir)
        self._embedder = embedder
        self._published = published
        self._jobs: dict[str, Job] = {}
        self._pending: dict[str, dict[str, Any]] = {}  # document id -> registry entry of an add not yet done
        self._lock = threading.RLock()
        self._queue: queue.Queue[tuple[Job, Callable[[Job], None]]] = queue.Queue()
        self._worker: threading.Thread | None = None
        # what a killed process left: uploads not yet added, and documents whose delete had begun (the next build
        # drops their chunks)
        for leftover in (self.staging, self.trash):
            shutil.rmtree(leftover, ignore_errors=True)

    # ---- the registry -----------------------------------------------------------------------------
    def listing(self, snap: Any, pins: set[str], kind: str | None = None) -> list[dict[str, Any]]:
        """Every document of the live generation `snap`: the uploads (with those still being added) and the indexed
        corpus files; each with id, name, kind (upload|corpus), whether it is pinned (`pins`: sources), chunks, added
        (ISO time), size (bytes), status."""
        counts: dict[str, int] = {}
        for c in snap.chunks:
            counts[c.source] = counts.get(c.source, 0) + 1
        out: list[dict[str, Any]] = []
        if kind != "corpus":
            for d, status in [*((d, "indexed") for d in self.registry().values()),
                              *((d, "adding") for d in self.pending())]:
                src = f"{UPLOADS_FOLDER}/{d['id']}/{d['name']}"
                out.append({"id": d["id"], "name": d["name"], "kind": "upload", "source": src, "pinned": src in pins,
                            "chunks": counts.get(src, 0), "added": _iso(d["added"]), "size": d["size"],
                            "status": status})
        if kind != "upload":
            file_of = {src: path for path, src in snap.meta.file_sources.items()}
            for src, n in sorted(counts.items()):
                if source_kind(src) == "corpus":
                    f = Path(file_of.get(src, ""))
                    size = f.stat().st_size if file_of.get(src) and f.is_file() else None
                    out.append({"id": hashlib.sha256(src.encode()).hexdigest()[:16], "name": src, "kind": "corpus",
                                "source": src, "pinned": src in pins, "chunks": n, "added": _iso(snap.meta.created), "size": size,
                                "status": "indexed"})
        return out


    def registry(self) -> dict[str, dict[str, Any]]:
        return read_registry(self.root)

    def _write_registry(self, docs: dict[str, dict[str, Any]]) -> None:
        private_dir(self.root)
        replace_durably(self.root / REGISTRY, json.dumps(
            {"about": "Uploaded documents (assistant/documents.py); their files are the folders beside this one.",
             "documents": sorted(docs.values(), key=lambda d: d["added"])}, ensure_ascii=False, indent=1))

    def pending(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self._pending.values())

    # ---- add --------------------------------------------------------------------------------------
    def add(self, filename: str, data: bytes, owner: str | None = None) -> tuple[str, Job]:
        """Check an upload now (a 4xx UserError for what is refused), then queue its indexing job."""
        name = safe_name(filename)
        suffix = Path(name).suffix.lower()
        if not name or suffix not in UPLOAD_SUFFIXES:
            kinds = ", ".join(s.lstrip(".") for s in UPLOAD_SUFFIXES)
            raise _refuse("unsupported_type", f"{name or 'The file'}: this file type cannot be added (use {kinds}).",
                          f"{name or '该文件'}：不支持该文件类型（可用 {kinds}）。", 415)
        limit = self.settings.max_upload_bytes
        if len(data) > limit:
            raise _refuse("upload_too_large", f"{name} is too large ({len(data)} bytes; max {limit} bytes).",
                          f"{name} 过大（{len(data)} 字节，最多 {limit} 字节）。", 413)
        if not data.strip():
            raise _refuse("empty_upload", f"{name} is empty.", f"{name} 是空文件。", 422)
        digest = hashlib.sha256(data).hexdigest()
        with self._lock:
            docs = {**self.registry(), **self._pending}
            if len(docs) >= self.settings.max_uploads:
                n = self.settings.max_uploads
                raise _refuse("too_many_uploads", f"There are already {n} uploaded documents (the limit): delete "
                              "one first.", f"已有 {n} 个上传文档（上限）：请先删除一个。", 409)
            same = next((d for d in docs.values() if d.get("sha256") == digest), None)
            if same is not None:
                raise _refuse("duplicate_upload", f"{name}: the same file is already uploaded as {same['name']} "
                              f"({same['id']}).", f"{name}：相同的文件已上传（{same['name']}，{same['id']}）。", 409)
            doc_id = uuid.uuid4().hex
            staged = self.staging / doc_id / name
            private_dir(staged.parent)
            staged.write_bytes(data)
            try:
                try:
                    doc = load_document(staged)
                except LoadError as e:
                    raise _refuse("unreadable_upload", f"{name} cannot be read: {e.reason}.",
                                  f"{name} 无法读取：{e.reason}。", 422) from None
                chunks = chunk_document(doc)
                if not chunks:
                    raise _refuse("no_text", f"{name} has no text to index.", f"{name} 中没有可索引的文本。", 422)
            except BaseException:
                shutil.rmtree(staged.parent, ignore_errors=True)
                raise
            entry = {"id": doc_id, "name": name, "size": len(data), "sha256": digest, "added": time.time(),
                     "format": suffix.lstrip("."), "owner": owner}
            self._pending[doc_id] = entry
            job = self._submit("add", doc_id, self._run_add, total=len(chunks))
        return doc_id, job

    def _run_add(self, job: Job) -> None:
        doc_id = job.document_id
        assert doc_id is not None
        entry = self._pending[doc_id]
        folder = self.root / doc_id
        private_dir(self.root)
        try:
            shutil.move(str(self.staging / doc_id), str(folder))
            docs = self.registry()
            self._write_registry({**docs, doc_id: entry})
            self._build(job)
        except BaseException:
            shutil.rmtree(folder, ignore_errors=True)
            docs = self.registry()
            docs.pop(doc_id, None)
            self._write_registry(docs)
            raise
        finally:
            shutil.rmtree(self.staging / doc_id, ignore_errors=True)
            with self._lock:
                self._pending.pop(doc_id, None)

    # ---- delete and re-index --------------------------------------------------------------------------
    def delete(self, doc_id: str) -> Job:
        """Remove an uploaded document from the index and the disk; waits for it (a 404 for an unknown id)."""
        with self._lock:
            if doc_id in self._pending:
                raise _refuse("document_busy", "The document is still being added; delete it when its job is done.",
                              "该文档仍在添加中；请在任务完成后再删除。", 409)
            if not ID_RE.match(doc_id or "") or doc_id not in self.registry():
                raise _refuse("not_found", "Unknown document (only uploaded documents can be deleted).",
                              "未找到该文档（只能删除上传的文档）。", 404)
            job = self._submit("delete", doc_id, self._run_delete)
        job.finished_event.wait()
        if job.status == "failed":
            raise UserError("delete_failed", f"The document could not be deleted: {job.reason}",
                            f"无法删除该文档：{job.reason_zh or job.reason}", 500)
        return job

    def _run_delete(self, job: Job) -> None:
        doc_id = job.document_id
        assert doc_id is not None
        docs = self.registry()
        entry = docs.pop(doc_id)
        private_dir(self.trash)
        shutil.move(str(self.root / doc_id), str(self.trash / doc_id))
        self._write_registry(docs)
        try:
            self._build(job)
        except BaseException:
            self._restore_trash({doc_id: entry})
            raise
        shutil.rmtree(self.trash / doc_id, ignore_errors=True)

    def _restore_trash(self, entries: dict[str, dict[str, Any]]) -> None:
        """Put back documents whose delete failed (the build did not go live)."""
        docs = self.registry()
        for doc_id, entry in entries.items():
            if (self.trash / doc_id).exists() and not (self.root / doc_id).exists():
                shutil.move(str(self.trash / doc_id), str(self.root / doc_id))
            docs[doc_id] = entry
        self._write_registry(docs)

    def reindex(self) -> Job:
        """Build the index again now over its folders and the uploads (picks up changed files); a job."""
        return self._submit("reindex", None, self._build)

    # ---- jobs -------------------------------------------------------------------------------------------
    def job(self, job_id: str) -> Job | None:
        return self._jobs.get(job_id)

    def _submit(self, action: Any, doc_id: str | None, run: Callable[[Job], None], total: int = 0) -> Job:
        job = Job(uuid.uuid4().hex, action, doc_id, total=total)
        with self._lock:
            self._jobs[job.id] = job
            while len(self._jobs) > _KEEP_JOBS:
                self._jobs.pop(next(iter(self._jobs)))
            if self._worker is None or not self._worker.is_alive():
                self._worker = threading.Thread(target=self._work, name="assistant-documents", daemon=True)
                self._worker.start()
        self._queue.put((job, run))
        return job

    def _work(self) -> None:
        while True:
            job, run = self._queue.get()
            job.status = "running"
            t0 = time.perf_counter()
            try:
                run(job)
                job.status = "done"
            except UserError as e:
                job.status, job.reason, job.reason_zh = "failed", e.en, e.zh
            except Exception as e:  # noqa: BLE001 - a job's failure is reported on the job, not raised
                log.exception("document job %s failed", job.id)
                job.status, job.reason = "failed", f"{type(e).__name__}: {str(e)[:200]}"
            job.seconds = time.perf_counter() - t0
            job.finished = time.time()
            job.finished_event.set()

    def wait(self, job_id: str, timeout: float | None = None) -> Job:
        job = self._jobs[job_id]
        job.finished_event.wait(timeout)
        return job

    # ---- the build ----------------------------------------------------------------------------------------
    def _index(self) -> Any:
        """Where the index lives (a local directory or a Chroma server: assistant/index/location.py)."""
        return open_index(self.settings)

    def roots(self) -> list[Path]:
        """What an index build indexes: the live index's folders (else settings.docs), and the uploads."""
        meta = self._index().current_meta()
        given = list(meta.roots) if meta is not None and meta.roots else list(self.settings.docs)
        up = self.root.resolve()
        roots = [Path(r) for r in given if Path(r).exists() and Path(r).resolve() != up]
        return [*roots, self.root] if self.has_uploads() else roots

    def has_uploads(self) -> bool:
        return self.folder_has_uploads(self.root)

    @staticmethod
    def folder_has_uploads(root: Path) -> bool:
        return root.is_dir() and any(p.is_dir() for p in root.iterdir())

    def _build(self, job: Job) -> None:
        index = self._index()
        meta = index.current_meta()

        def progress(done: int, total: int) -> None:
            job.done, job.total = done, total

        deadline = time.monotonic() + _BUSY_RETRY_S
        while True:
            try:
                build_index(self.index_dir, self.roots(), self._embedder(), progress=False,
                            chunk_tokens=meta.chunk_tokens if meta is not None else None,
                            log=lambda m: log.info("%s", m), on_progress=progress,
                            server=index if isinstance(index, ServerIndex) else None)
                break
            except UserError as e:
                if e.code != "build_running" or time.monotonic() > deadline:
                    raise
                time.sleep(1.0)
        self._published()


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).isoformat(timespec="seconds")
