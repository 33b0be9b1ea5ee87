"""Finding and loading documents: path -> `Document` (sections + title, language, frameworks, meta).

Owns the format dispatch by suffix, the `source` naming rule (relative to the parent of the
indexed root, so citations read `framework-docs/jax/docs/...` or `corpus/notes/...`), document
metadata (front matter first, then the path, then the text; a page of a synced docs folder gets its upstream
link and licence from that folder's cache lock, assistant/corpus/sync.py; an uploaded one the date it was
added, from the uploads registry, uploads.py) and the error policy: anything that
cannot be read becomes `LoadError(path, reason)`, which `load_all` collects and reports. Text that
leaves here is valid Unicode: a lone surrogate (a JSON or YAML escape such as "\\ud800" decodes to one)
becomes U+FFFD, since the index, the embedder and the HTTP responses cannot encode it.
"""
from __future__ import annotations

import dataclasses
import fnmatch
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from assistant.corpus.sync import provenance
from assistant.errors import UserError
from assistant.frameworks import canonical, framework_counts
from assistant.lang import detect_language
from assistant.text import valid_strings, valid_unicode
from assistant.types import Document

from . import formats
from .markdown import parse_markdown, split_front_matter
from .rst import parse_rst
from .sections import MappedSection
from .uploads import upload_meta

SUFFIXES = {".md": "md", ".markdown": "md", ".rst": "rst", ".ipynb": "ipynb", ".html": "html", ".htm": "html",
            ".pdf": "pdf", ".txt": "txt", ".py": "py"}
_SKIP_NAMES = re.compile(r"^(LICEN[CS]E|COPYING)", re.IGNORECASE)
_SKIP_FILES = {"SOURCES.md"}
# folder names of ../shared/framework-docs (and similar trees) -> canonical framework names
PATH_FRAMEWORKS = {"pytorch": "PyTorch", "tensorflow": "TensorFlow", "paddle": "PaddlePaddle",
                   "paddlepaddle": "PaddlePaddle", "jax": "JAX", "megatron-lm": "Megatron-LM",
                   "megatron": "Megatron-LM", "deepspeed": "DeepSpeed", "colossalai": "Colossal-AI"}
META_KEYS = ("url", "licence", "license", "date", "source", "language", "title")
# what a synced page's cache lock adds: its upstream link (and the line-anchored form), licence, attribution, commit
PROVENANCE_KEYS = ("url", "lines_url", "licence", "attribution", "commit")


class LoadError(Exception):
    """A file that cannot be turned into a Document; `reason` is short and human."""

    def __init__(self, path: Path | str, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = str(path)
        self.reason = reason


def _source_name(path: Path, root: Path | None) -> str:
    if root is not None:
        base = root.parent
        try:
            return path.resolve().relative_to(base.resolve()).as_posix()
        except ValueError:
            pass
    return path.as_posix()


def _parse(path: Path, kind: str, data: bytes) -> tuple[list[MappedSection], str, dict[str, Any]]:
    if kind == "pdf":
        return formats.load_pdf(data, formats.stem_title(path))
    text = formats.decode_text(data).replace("\r\n", "\n").replace("\r", "\n")
    if kind == "ipynb":
        return formats.load_notebook(text)
    if kind == "html":
        return formats.load_html(text)
    if kind == "txt":
        return formats.load_text(text, formats.stem_title(path))
    if kind == "py":
        return formats.load_gallery(text)
    lines = list(enumerate(text.split("\n"), start=1))
    if kind == "rst":
        sections, title = parse_rst(lines)
        return sections, title, {}
    meta, body = split_front_matter(lines)
    sections, title = parse_markdown(body)
    return sections, title, meta


def _frameworks(meta: dict[str, Any], path: Path, text: str) -> tuple[str, ...]:
    """Front matter wins; else the framework-docs folder name, plus frameworks the text dwells on."""
    declared = meta.get("frameworks")
    if isinstance(declared, str):
        declared = [declared]
    if isinstance(declared, list) and declared:
        names = [canonical(str(d)) for d in declared]
        return tuple(dict.fromkeys(n for n in names if n))
    found: list[str] = [PATH_FRAMEWORKS[p.lower()] for p in path.parts if p.lower() in PATH_FRAMEWORKS][:1]
    counts = framework_counts(text)
    top = max(counts.values(), default=0)
    # A passing mention ("unlike PyTorch, ...") does not make a document about a framework.
    found += [n for n, c in sorted(counts.items(), key=lambda kv: -kv[1]) if c >= 3 and c >= 0.2 * top]
    return tuple(dict.fromkeys(found))


def load_document(path: Path, root: Path | None = None) -> Document:
    """Load one file. Raises LoadError for unreadable, corrupt, binary or unsupported files."""
    path = Path(path)
    kind = SUFFIXES.get(path.suffix.lower())
    if kind is None:
        raise LoadError(path, f"unsupported file type '{path.suffix}'")
    try:
        data = path.read_bytes()
    except OSError as e:
        raise LoadError(path, f"cannot read file: {e.strerror or e}") from None
    try:
        sections, title, meta = _parse(path, kind, data)
    except ValueError as e:
        raise LoadError(path, str(e)) from None
    sections = [dataclasses.replace(s, text=valid_unicode(s.text), heading_path=tuple(valid_unicode(h) for h in s.heading_path))
                for s in sections]
    title = valid_unicode(title)
    meta = {k: valid_strings(v) for k, v in meta.items() if v is not None}
    text = "\n".join(s.text for s in sections)
    title = str(meta.get("title") or title or formats.stem_title(path)).strip()
    lang = str(meta.get("language", "")).lower()
    lang = "zh" if lang.startswith("zh") else "en" if lang.startswith("en") else detect_language(text[:20000])
    out_meta = {k: (v if isinstance(v, (str, int, float)) else str(v)) for k, v in meta.items()
                if k in META_KEYS and k not in ("title", "language")}
    if "license" in out_meta:
        out_meta.setdefault("licence", out_meta.pop("license"))
    if root is not None:
        out_meta.update({k: v for k, v in provenance(path, root).items() if k in PROVENANCE_KEYS})
        out_meta.update(upload_meta(path, root))  # an uploaded document: when it was added
    out_meta["path"] = str(path)
    out_meta["format"] = kind
    return Document(source=_source_name(path, root), title=title, language=lang, sections=list(sections),
                    frameworks=_frameworks(meta, path, title + "\n" + text), meta=out_meta)


def _skipped(p: Path) -> bool:
    return (p.name.startswith(".") or p.name == "__pycache__" or bool(_SKIP_NAMES.match(p.name))
            or p.name in _SKIP_FILES)


def _ignore_patterns(root: Path) -> list[str]:
    """Glob patterns (relative to root) from root/.assistantignore, e.g. a corpus README that is not a source."""
    f = root / ".assistantignore"
    if not f.is_file():
        return []
    return [ln.strip() for ln in f.read_text(encoding="utf-8").splitlines() if ln.strip() and not ln.startswith("#")]


def discover(paths: Iterable[Path]) -> list[tuple[Path, Path]]:
    """(file, root) for every supported file under the given files/folders, sorted, hidden files skipped."""
    found: list[tuple[Path, Path]] = []
    for given in paths:
        given = Path(given)
        if not given.exists():
            raise UserError("path_not_found", f"Path not found: {given}", f"路径不存在：{given}", status=404)
        if given.is_file():
            if given.suffix.lower() in SUFFIXES and not _skipped(given):
                found.append((given, given.parent))
            continue
        ignored = _ignore_patterns(given)
        for p in sorted(given.rglob("*")):
            rel = p.relative_to(given).parts
            if any(_skipped(Path(part)) for part in rel) or not p.is_file():
                continue
            if any(fnmatch.fnmatch(p.relative_to(given).as_posix(), pat) for pat in ignored):
                continue
            if p.suffix.lower() in SUFFIXES:
                found.append((p, given))
    return sorted(dict.fromkeys(found), key=lambda fr: fr[0].as_posix())


def load_all(paths: Iterable[Path]) -> tuple[list[Document], list[tuple[str, str]]]:
    """Load everything under paths; files that fail are returned as (path, reason) and skipped."""
    docs: list[Document] = []
    skipped: list[tuple[str, str]] = []
    for path, root in discover(list(paths)):
        try:
            docs.append(load_document(path, root))
        except LoadError as e:
            skipped.append((e.path, e.reason))
    return docs, skipped
