"""`assistant corpus sync`: the manifest's files at their commits -> the local docs cache, verified, atomically.

Cache layout (`corpus_cache_dir`, default `<cache_dir>/corpus`):

    framework-docs/<source id>/<path in the upstream repository>   the files, unchanged
    framework-docs/.sources.lock.json                              what the cache holds: per file the source id,
                                                                   path, commit, sha256, git blob id, licence,
                                                                   upstream link and origin (upstream or mirror)

The folder is named `framework-docs` so that a synced page's source path is `framework-docs/<id>/<path>`,
exactly as for pages of ../shared/framework-docs: evaluation sets keep matching and chunk ids (which hash the
source path) stay the same. The loader reads the cache lock to give each page its upstream link and licence.

Two locks, two jobs: `corpus/sources.lock.json` (committed) pins what a file at a commit must be (sha256, git
blob id), so every machine's sync is checked against the same bytes; the cache lock records what this machine
fetched and from where, so a second sync with nothing changed does nothing, a changed commit re-fetches only
the files whose blob changed, and an upstream sync after a mirror sync reports which files differ.

Upstream: per (source, commit) one `git fetch --depth 1 --filter=blob:none` (trees only), `git ls-tree` to
resolve paths/globs and to compare blob ids with the cache, then a sparse checkout of just the changed paths.
Mirror (`--mirror DIR`, laid out `<id>/<path>`): files are taken as they are; hashes that differ from the
pinned ones are reported. Nothing is written until every source has succeeded (git works in a temp folder beside
the cache); then each new file goes in with temp file + os.replace and the cache lock is replaced last. A failed
sync leaves the previous cache.
"""
from __future__ import annotations

import fcntl
import fnmatch
import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import UserError
from ..private import private_dir, private_file, replace_durably
from .layout import CACHE_LOCK, PINNED_LOCK, docs_root
from .manifest import PathSpec, Source, git_blob_id, read_pinned, sha256

GIT_TIMEOUT_S = 300.0


def read_cache_lock(root: Path) -> dict[str, Any]:
    """{"sources": {id: {...}}, "files": {"<id>/<path>": {...}}} of a synced docs folder (empty when none)."""
    f = Path(root) / CACHE_LOCK
    if not f.is_file():
        return {"sources": {}, "files": {}}
    data = json.loads(f.read_text(encoding="utf-8"))
    return {"sources": data.get("sources", {}), "files": {e["local"]: e for e in data.get("files", [])}}


@dataclass
class SyncReport:
    origin: str = "upstream"
    fetched: list[str] = field(default_factory=list)  # "<id>/<path>" written into the cache
    unchanged: int = 0
    removed: list[str] = field(default_factory=list)
    differs: list[str] = field(default_factory=list)  # "<id>/<path>: why" (pinned hash, previous mirror copy)
    bytes: int = 0
    seconds: float = 0.0

    @property
    def nothing_changed(self) -> bool:
        return not (self.fetched or self.removed)

    def to_dict(self) -> dict[str, Any]:
        return {**self.__dict__, "nothing_changed": self.nothing_changed}


@dataclass
class _Got:
    source: Source
    path: str
    commit: str
    data: bytes | None  # None: unchanged, keep the cached file


def sync(sources: list[Source], corpus_cache: Path, *, mirror: Path | None = None, pinned_lock: Path = PINNED_LOCK,
         log: Callable[[str], None] = print, git_timeout_s: float = GIT_TIMEOUT_S,
         manifest_ids: set[str] | None = None) -> SyncReport:
    """Bring the cache to `sources`' files; with `manifest_ids` (every id of the manifest) the files of sources
    the manifest no longer lists are removed too. See the module docstring."""
    t0 = time.perf_counter()
    corpus_cache = private_dir(Path(corpus_cache))
    root = private_dir(docs_root(corpus_cache))
    if mirror is not None and not Path(mirror).is_dir():
        raise UserError("mirror_missing", f"Mirror folder not found: {mirror}", f"找不到镜像文件夹：{mirror}", status=404)
    report = SyncReport(origin=f"mirror:{Path(mirror).resolve()}" if mirror else "upstream")
    pinned = read_pinned(pinned_lock)
    with private_file(corpus_cache / ".sync.lock").open("w") as lockf:
        try:
            fcntl.flock(lockf, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as e:
            raise UserError("sync_running", "Another corpus sync is running on this cache.",
                            "另一个语料同步正在进行。", status=409) from e
        old = read_cache_lock(root)
        staging = Path(tempfile.mkdtemp(prefix=".staging-", dir=corpus_cache))
        try:
            got: list[_Got] = []
            for src in sources:
                if mirror is None and _up_to_date(src, old, root):
                    got += [_Got(src, e["path"], e["commit"], None) for k, e in old["files"].items()
                            if k.startswith(src.id + "/")]
                    continue
                got += (_from_mirror(src, Path(mirror), old, root, pinned, report) if mirror is not None
                        else _from_upstream(src, old, root, pinned, report, staging, git_timeout_s, log))
            _commit(got, sources, old, root, report, manifest_ids)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    report.seconds = time.perf_counter() - t0
    return report


# ---- deciding what changed -----------------------------------------------------------------------------------
def _specs_key(src: Source) -> list[list[str]]:
    return [[p.pattern, p.commit] for p in src.paths]


def _cached_ok(old: dict[str, Any], root: Path, local: str, sha: str | None = None) -> bool:
    """The cache holds this file with the bytes its lock says (and, given, this sha256)."""
    e = old["files"].get(local)
    f = root / local
    if e is None or not f.is_file() or (sha is not None and e["sha256"] != sha):
        return False
    return sha256(f.read_bytes()) == e["sha256"]


def _up_to_date(src: Source, old: dict[str, Any], root: Path) -> bool:
    """Fetched from upstream with these very paths and commits, and every file still intact: nothing to do
    (a pinned commit cannot change, so no network is needed to know)."""
    rec = old["sources"].get(src.id)
    if not rec or rec.get("origin") != "upstream" or rec.get("specs") != _specs_key(src) or rec.get("repo") != src.repo:
        return False
    mine = [k for k in old["files"] if k.startswith(src.id + "/")]
    return bool(mine) and all(_cached_ok(old, root, k) for k in mine)


def _check_pinned(src: Source, path: str, commit: str, sha: str, blob: str, pinned: dict[tuple[str, str, str], Any],
                  report: SyncReport, strict: bool) -> None:
    pin = pinned.get((src.id, path, commit))
    if pin is None or (pin["sha256"] == sha and pin.get("blob", blob) == blob):
        return
    local = f"{src.id}/{path}"
    if strict and pin.get("checked") == "git blob":
        raise UserError("hash_mismatch",
                        f"{local} at {commit[:12]} is not the file the lock pins (sha256 {sha[:12]}, pinned "
                        f"{pin['sha256'][:12]}): the upstream repository changed or the download is corrupt. "
                        f"Nothing was written; check {src.repo} or update corpus/sources.lock.json.",
                        f"{local}（提交 {commit[:12]}）与锁文件记录的哈希不符（sha256 {sha[:12]}，应为 "
                        f"{pin['sha256'][:12]}）：上游仓库已变化或下载损坏。未写入任何文件。", status=502)
    report.differs.append(f"{local}: sha256 {sha[:12]} differs from the pinned {pin['sha256'][:12]}"
                          f" ({pin.get('checked', 'pinned')})")


# ---- mirror --------------------------------------------------------------------------------------------------
def _expand_local(base: Path, spec: PathSpec, src: Source, mirror: Path) -> list[str]:
    if not spec.is_glob:
        if not (base / spec.pattern).is_file():
            raise _missing(src, spec, f"mirror {mirror}")
        return [spec.pattern]
    found = sorted(p.relative_to(base).as_posix() for p in base.rglob("*") if p.is_file()
                   and fnmatch.fnmatchcase(p.relative_to(base).as_posix(), spec.pattern))
    if not found:
        raise _missing(src, spec, f"mirror {mirror}")
    return found


def _from_mirror(src: Source, mirror: Path, old: dict[str, Any], root: Path,
                 pinned: dict[tuple[str, str, str], Any], report: SyncReport) -> list[_Got]:
    base = mirror / src.id
    out = []
    for spec in src.paths:
        for path in _expand_local(base, spec, src, mirror):
            data = (base / path).read_bytes()
            sha = sha256(data)
            _check_pinned(src, path, spec.commit, sha, git_blob_id(data), pinned, report, strict=False)
            local = f"{src.id}/{path}"
            same = _cached_ok(old, root, local, sha) and old["files"][local]["commit"] == spec.commit
            out.append(_Got(src, path, spec.commit, None if same else data))
    return out


# ---- upstream (git) ------------------------------------------------------------------------------------------
def _git(repo: Path, *args: str, timeout: float, src: Source) -> str:
    env = {**os.environ, "GIT_TERMINAL_PROMPT": "0", "GIT_ASKPASS": "true", "LC_ALL": "C"}
    cmd = ["git", "-C", str(repo), "-c", "protocol.file.allow=always", "-c", "advice.detachedHead=false", *args]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, check=False)
    except subprocess.TimeoutExpired:
        raise _unreachable(src, f"git {args[0]} timed out after {timeout:.0f} s") from None
    except FileNotFoundError:
        raise UserError("git_missing", "git is not installed; install it, or sync from a folder with --mirror DIR.",
                        "未安装 git：请安装 git，或用 --mirror DIR 从本地文件夹同步。", status=503) from None
    if done.returncode != 0:
        raise _GitFailed(done.stderr.strip().splitlines()[-1] if done.stderr.strip() else f"exit {done.returncode}")
    return done.stdout


class _GitFailed(Exception):
    pass


def _unreachable(src: Source, why: str) -> UserError:
    return UserError("upstream_unreachable",
                     f"Cannot reach {src.repo} for source '{src.id}' ({why}). Nothing was changed. Without the "
                     f"internet, sync from a local copy: assistant corpus sync --mirror ../shared/framework-docs",
                     f"无法访问来源 '{src.id}' 的上游仓库 {src.repo}（{why}），未做任何更改。没有网络时可从本地副本同步："
                     f"assistant corpus sync --mirror ../shared/framework-docs", status=503)


def _missing(src: Source, spec: PathSpec, where: str) -> UserError:
    return UserError("missing_path", f"Source '{src.id}': {spec.pattern} is not in {where} at commit "
                     f"{spec.commit[:12]}. Nothing was changed; fix corpus/sources.yaml.",
                     f"来源 '{src.id}'：{where} 在提交 {spec.commit[:12]} 中没有 {spec.pattern}，未做任何更改；"
                     f"请修正 corpus/sources.yaml。", status=404)


def _fetch_tree(src: Source, commit: str, work: Path, timeout: float) -> dict[str, str]:
    """path -> blob id of the whole tree at commit (trees only: no file contents are downloaded)."""
    _git(work, "init", "-q", timeout=timeout, src=src)
    _git(work, "remote", "add", "origin", src.repo, timeout=timeout, src=src)
    try:
        _git(work, "fetch", "-q", "--depth", "1", "--filter=blob:none", "origin", commit, timeout=timeout, src=src)
    except _GitFailed as e:
        msg = str(e)
        if any(s in msg.lower() for s in ("not our ref", "couldn't find remote ref", "no such remote ref",
                                           "unadvertised object")):
            raise UserError("commit_missing", f"Source '{src.id}': commit {commit[:12]} is not in {src.repo} "
                            f"({msg}). Nothing was changed; fix corpus/sources.yaml.",
                            f"来源 '{src.id}'：{src.repo} 中没有提交 {commit[:12]}（{msg}），未做任何更改。",
                            status=404) from None
        raise _unreachable(src, msg) from None
    tree: dict[str, str] = {}
    for line in _git(work, "ls-tree", "-r", "-z", commit, timeout=timeout, src=src).split("\0"):
        if not line:
            continue
        info, path = line.split("\t", 1)
        mode, kind, oid = info.split()
        if kind == "blob":
            tree[path] = oid
    return tree


def _expand_tree(tree: dict[str, str], spec: PathSpec, src: Source) -> list[str]:
    found = sorted(p for p in tree if fnmatch.fnmatchcase(p, spec.pattern)) if spec.is_glob else (
        [spec.pattern] if spec.pattern in tree else [])
    if not found:
        raise _missing(src, spec, src.repo)
    return found


def _sparse_pattern(path: str) -> str:
    return "/" + "".join("\\" + ch if ch in "*?[]\\!# " else ch for ch in path)


def _from_upstream(src: Source, old: dict[str, Any], root: Path, pinned: dict[tuple[str, str, str], Any],
                   report: SyncReport, staging: Path, timeout: float, log: Callable[[str], None]) -> list[_Got]:
    out: list[_Got] = []
    commits = list(dict.fromkeys(p.commit for p in src.paths))
    for commit in commits:
        work = staging / f"{src.id}-{commit[:12]}"
        work.mkdir()
        log(f"{src.id}: reading the tree of {src.repo} at {commit[:12]}")
        try:
            tree = _fetch_tree(src, commit, work, timeout)
            paths = [p for spec in src.paths if spec.commit == commit for p in _expand_tree(tree, spec, src)]
            todo = []
            for path in dict.fromkeys(paths):
                local = f"{src.id}/{path}"
                e = old["files"].get(local)
                if e is not None and e["blob"] == tree[path] and _cached_ok(old, root, local):
                    out.append(_Got(src, path, commit, None))
                    continue
                pin = pinned.get((src.id, path, commit))
                if pin is not None and pin.get("checked") == "git blob" and pin.get("blob") != tree[path]:
                    raise UserError("hash_mismatch",
                                    f"{local} at {commit[:12]} has git blob {tree[path][:12]} upstream, the lock pins "
                                    f"{pin['blob'][:12]}. Nothing was written; check {src.repo} or update "
                                    f"corpus/sources.lock.json.",
                                    f"{local}（提交 {commit[:12]}）上游的 git blob 为 {tree[path][:12]}，锁文件记录为 "
                                    f"{pin['blob'][:12]}。未写入任何文件。", status=502)
                if e is not None and e.get("origin", "").startswith("mirror"):
                    report.differs.append(f"{local}: upstream differs from the mirror copy in the cache")
                todo.append(path)
            if todo:
                (work / ".git" / "info").mkdir(parents=True, exist_ok=True)
                (work / ".git" / "info" / "sparse-checkout").write_text(
                    "".join(_sparse_pattern(p) + "\n" for p in todo), encoding="utf-8")
                _git(work, "config", "core.sparseCheckout", "true", timeout=timeout, src=src)
                _git(work, "checkout", "-q", commit, timeout=timeout, src=src)
                for path in todo:
                    data = (work / path).read_bytes()
                    if git_blob_id(data) != tree[path]:  # e.g. a smudge filter changed the bytes
                        raise UserError("hash_mismatch", f"{src.id}/{path}: the checked-out bytes are not the blob "
                                        f"{tree[path][:12]} of {commit[:12]}. Nothing was written.",
                                        f"{src.id}/{path}：检出的内容与提交 {commit[:12]} 的 blob 不符，未写入任何文件。",
                                        status=502)
                    _check_pinned(src, path, commit, sha256(data), tree[path], pinned, report, strict=True)
                    out.append(_Got(src, path, commit, data))
        except _GitFailed as e:
            raise _unreachable(src, str(e)) from None
        finally:
            shutil.rmtree(work, ignore_errors=True)
    return out


# ---- writing -------------------------------------------------------------------------------------------------
def _commit(got: list[_Got], sources: list[Source], old: dict[str, Any], root: Path, report: SyncReport,
            manifest_ids: set[str] | None) -> None:
    """Move the new files in (temp file + os.replace each), drop what the manifest no longer lists, then
    replace the cache lock: the lock changes last, so an interrupted move is re-done by the next sync."""
    files = dict(old["files"])
    srcs = dict(old["sources"])
    synced = {s.id for s in sources}
    wanted = {f"{g.source.id}/{g.path}" for g in got}
    for g in got:
        local = f"{g.source.id}/{g.path}"
        if g.data is None:
            prev = files[local]
            data_sha, blob, size = prev["sha256"], prev["blob"], prev["bytes"]
            report.unchanged += 1
        else:
            dest = root / local
            private_dir(dest.parent)
            tmp = dest.with_name(f".{dest.name}.tmp")
            tmp.write_bytes(g.data)
            os.replace(tmp, dest)
            data_sha, blob, size = sha256(g.data), git_blob_id(g.data), len(g.data)
            report.fetched.append(local)
            report.bytes += size
        # an unchanged file keeps its origin, except that an upstream sync has just verified it against the blob
        origin = report.origin if g.data is not None or report.origin == "upstream" else files[local]["origin"]
        files[local] = {"local": local, "id": g.source.id, "path": g.path, "commit": g.commit, "sha256": data_sha,
                        "blob": blob, "bytes": size, "licence": g.source.licence,
                        "url": g.source.web_url(g.commit, g.path), "lines_url": g.source.lines_url(g.commit, g.path),
                        "origin": origin}
    for s in sources:
        srcs[s.id] = {"repo": s.repo, "framework": s.framework, "licence": s.licence, "attribution": s.attribution,
                      "specs": _specs_key(s), "origin": report.origin}
    gone = {i for i in srcs if manifest_ids is not None and i not in manifest_ids}
    for i in gone:
        srcs.pop(i)
    stale = [k for k in files if (k.split("/", 1)[0] in synced and k not in wanted) or k.split("/", 1)[0] in gone]
    for k in stale:
        files.pop(k, None)
        (root / k).unlink(missing_ok=True)
        report.removed.append(k)
    if report.nothing_changed and old["files"] == files and old["sources"] == srcs:
        return
    replace_durably(root / CACHE_LOCK, json.dumps(
        {"about": "What `assistant corpus sync` put in this folder (see assistant/corpus/sync.py).",
         "sources": srcs, "files": [files[k] for k in sorted(files)]}, indent=1, ensure_ascii=False) + "\n")


# ---- provenance for the loader -------------------------------------------------------------------------------
_PROVENANCE: dict[tuple[str, int], dict[str, Any]] = {}


def provenance(path: Path, root: Path) -> dict[str, str]:
    """Where a file of a synced docs folder comes from (url, lines_url, licence, attribution, commit), from the
    folder's cache lock; {} for any other file."""
    f = Path(root) / CACHE_LOCK
    try:
        key = (str(f), f.stat().st_mtime_ns)
    except OSError:
        return {}
    if key not in _PROVENANCE:
        _PROVENANCE.clear()
        _PROVENANCE[key] = read_cache_lock(Path(root))
    lock = _PROVENANCE[key]
    try:
        e = lock["files"].get(Path(path).resolve().relative_to(Path(root).resolve()).as_posix())
    except ValueError:
        return {}
    if not e:
        return {}
    src = lock["sources"].get(e["id"], {})
    return {k: str(v) for k, v in {"url": e.get("url", ""), "lines_url": e.get("lines_url", ""),
                                   "licence": e.get("licence", ""), "attribution": src.get("attribution", ""),
                                   "commit": e.get("commit", "")}.items() if v}
