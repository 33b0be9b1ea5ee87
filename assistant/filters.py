"""Retrieval filters: one typed value, parsed once where a request comes in, and one meaning.

`Filters.parse` turns what an adapter received (the HTTP body, CLI options, a dict from a Python caller) into
`Filters`, or raises a UserError in both languages. `Filters.accepts(chunk)` is what a filter means; the vector
store pushes the same conditions into its own query (index/store.py `where_clause`) only so that its top
candidates are taken among the chunks that pass, and every candidate is checked with `accepts` anyway.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, Literal

from .errors import UserError
from .frameworks import canonical
from .types import Chunk, SourceKind

Language = Literal["zh", "en"]
_KEYS = frozenset({"framework", "frameworks", "language", "source", "kind"})


def _bad(en: str, zh: str) -> UserError:
    return UserError("bad_filter", en, zh, 422)


@dataclass(frozen=True)
class Filters:
    """No field set means no restriction; set fields must all hold."""

    framework: tuple[str, ...] = ()  # canonical names (frameworks.canonical); a chunk about any of them passes
    language: Language | None = None  # the chunk's language
    source: str | None = None  # a substring of the chunk's source path or of its URL
    kind: SourceKind | None = None  # the collection: "upload" (only the user's documents) or "corpus" (leave them out)

    def __bool__(self) -> bool:
        return bool(self.framework or self.language or self.source or self.kind)

    @classmethod
    def parse(cls, raw: Filters | Mapping[str, Any] | None) -> Filters:
        """Filters from {"framework": name or [names] (alias "frameworks"), "language": "zh"|"en",
        "source": "substring", "kind": "upload"|"corpus"}; unknown keys and framework names, or another language, are a 422 UserError."""
        if isinstance(raw, Filters):
            return raw
        if not raw:
            return cls()
        unknown = sorted(set(raw) - _KEYS)
        if unknown:
            raise _bad(f"Unknown filter: {', '.join(unknown)} (use framework, language, source, kind).",
                               f"未知的过滤条件：{', '.join(unknown)}（可用 framework、language、source、kind）。")
        fws = raw.get("framework") or raw.get("frameworks") or ()
        names: list[str] = []
        for f in [fws] if isinstance(fws, str) else list(fws):
            c = canonical(str(f))
            if c is None:
                raise _bad(f"Unknown framework in filter: {f}", f"过滤条件中的框架未知：{f}")
            names.append(c)
        language = raw.get("language")
        if language not in (None, "zh", "en"):
            raise _bad("language filter must be 'zh' or 'en'.", "语言过滤只能是 zh 或 en。")
        source = raw.get("source")
        if source is not None and not isinstance(source, str):
            raise _bad("source filter must be text (part of a source path).", "来源过滤（source）必须是文本（来源路径的一部分）。")
        kind = raw.get("kind")
        if kind not in (None, "upload", "corpus"):
            raise _bad("kind filter must be 'upload' (only uploaded documents) or 'corpus' (leave them out).",
                       "kind 过滤只能是 upload（只用上传的文档）或 corpus（不用上传的文档）。")
        return cls(framework=tuple(names), language=language, source=source or None, kind=kind)

    def accepts(self, chunk: Chunk) -> bool:
        """Whether chunk passes every condition that is set."""
        if self.framework and not set(self.framework) & set(chunk.frameworks):
            return False
        if self.language and chunk.language != self.language:
            return False
        if self.kind and chunk.kind != self.kind:
            return False
        return not (self.source and self.source not in chunk.source and self.source not in chunk.url)

    def only(self, framework: str) -> Filters:
        """The same filters restricted to one framework (one side of a comparison)."""
        return replace(self, framework=(framework,))
