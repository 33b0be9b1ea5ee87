"""`corpus/sources.yaml` -> `Source`s, and what follows from a pin: the upstream link of a file at its commit.

A source is one upstream repository: an id (the folder name in the docs cache and in ../shared/framework-docs),
the repository URL, a default commit, the paths or globs to take (each may pin its own commit: today's pages
come from several commits of one repository), the licence id and its attribution. The committed lock
(`corpus/sources.lock.json`) holds the sha256 and git blob id each pinned file must have.
"""
from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import UserError
from .layout import MANIFEST, PINNED_LOCK

_ID = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,63}$")
_COMMIT = re.compile(r"^[0-9a-f]{7,40}$")


@dataclass(frozen=True)
class PathSpec:
    pattern: str  # a path in the repository, or a glob (*, ?, [...]) matched against the tree at the commit
    commit: str

    @property
    def is_glob(self) -> bool:
        return any(ch in self.pattern for ch in "*?[")


@dataclass(frozen=True)
class Source:
    id: str
    repo: str  # clone URL: https://github.com/<org>/<repo> (or file:// in tests)
    commit: str
    licence: str
    attribution: str
    paths: tuple[PathSpec, ...]
    framework: str = ""
    web: str = ""  # the repository's page on GitHub when `repo` is not one (a mirror, a file:// test repository)

    def web_url(self, commit: str, path: str) -> str:
        """The file at the commit on GitHub (a blob URL a user can open), or '' for a repository elsewhere."""
        m = re.match(r"^https://github\.com/([^/]+)/([^/]+?)(?:\.git)?/?$", self.web or self.repo)
        return f"https://github.com/{m.group(1)}/{m.group(2)}/blob/{commit}/{path}" if m else ""

    def lines_url(self, commit: str, path: str) -> str:
        """web_url with a `{start}`/`{end}` line anchor to fill in (plain view: GitHub renders .md/.rst/.ipynb
        otherwise, and a rendered page has no line anchors)."""
        url = self.web_url(commit, path)
        return url + "?plain=1#L{start}-L{end}" if url else ""


def _bad(what: str, where: Path) -> UserError:
    return UserError("bad_manifest", f"{where}: {what}", f"{where}：清单格式错误：{what}")


def load_manifest(path: Path = MANIFEST) -> list[Source]:
    """The `sources:` list of the manifest, checked (ids, commits, paths)."""
    import yaml

    try:
        data = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
    except FileNotFoundError:
        raise UserError("manifest_missing", f"Sources manifest not found: {path}", f"找不到来源清单：{path}",
                        status=404) from None
    except yaml.YAMLError as e:
        raise _bad(f"not valid YAML ({e})", path) from None
    out: list[Source] = []
    for raw in data.get("sources") or []:
        sid = str(raw.get("id", ""))
        if not _ID.match(sid):
            raise _bad(f"bad source id {sid!r}", path)
        commit = str(raw.get("commit", ""))
        specs: list[PathSpec] = []
        for p in raw.get("paths") or []:
            spec = PathSpec(str(p), commit) if isinstance(p, str) else PathSpec(str(p.get("path", "")),
                                                                                 str(p.get("commit") or commit))
            if not spec.pattern or spec.pattern.startswith("/") or ".." in Path(spec.pattern).parts:
                raise _bad(f"source {sid}: bad path {spec.pattern!r}", path)
            if not _COMMIT.match(spec.commit):
                raise _bad(f"source {sid}: bad commit {spec.commit!r} for {spec.pattern}", path)
            specs.append(spec)
        if not raw.get("repo") or not specs:
            raise _bad(f"source {sid}: needs a repo and paths", path)
        out.append(Source(sid, str(raw["repo"]), commit, str(raw.get("licence", "")),
                          str(raw.get("attribution", "")).strip(), tuple(specs), str(raw.get("framework", "")),
                          str(raw.get("web", ""))))
    if len({s.id for s in out}) != len(out):
        raise _bad("duplicate source ids", path)
    return out


def select(sources: list[Source], ids: list[str] | None) -> list[Source]:
    if not ids:
        return sources
    known = {s.id for s in sources}
    unknown = [i for i in ids if i not in known]
    if unknown:
        raise UserError("unknown_source", f"Unknown source id(s): {', '.join(unknown)} (known: {', '.join(sorted(known))})",
                        f"未知的来源 id：{', '.join(unknown)}（可用：{', '.join(sorted(known))}）", status=404)
    return [s for s in sources if s.id in ids]


def git_blob_id(data: bytes) -> str:
    """Git's object id of a blob with these bytes (what `git ls-tree` lists), to compare without downloading."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def read_pinned(path: Path = PINNED_LOCK) -> dict[tuple[str, str, str], dict[str, Any]]:
    """(source id, path, commit) -> {sha256, blob, bytes, checked} of the committed lock (empty when absent)."""
    if not Path(path).is_file():
        return {}
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    return {(e["id"], e["path"], e["commit"]): e for e in data.get("files", [])}
