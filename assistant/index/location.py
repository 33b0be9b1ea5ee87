"""Where the index lives: a local directory (LocalIndex, the default) or a Chroma server (server.ServerIndex,
when settings.chroma_url is set). Both answer the same questions, so the service, the CLI, `assistant doctor` and
the HTTP adapter have one code path: which generation is live, its meta, a snapshot of it, where it is.
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from .server import ServerIndex
from .snapshot import IndexMeta, IndexSnapshot, current_generation, read_meta, require_generation

if TYPE_CHECKING:
    from ..settings import Settings


class IndexLocation(Protocol):
    def live(self, fresh: bool = False) -> str | None: ...

    def require(self) -> str:
        """The live generation's name, or the "build it first" UserError."""
        ...

    def meta(self, gen: str) -> IndexMeta | None: ...

    def current_meta(self) -> IndexMeta | None: ...

    def snapshot(self, gen: str) -> IndexSnapshot: ...

    def location(self, gen: str) -> str:
        """Names one build of one index: the generation's directory, or <chroma url>/<prefix>/<gen>."""
        ...

    def describe(self) -> str: ...

    def ping(self) -> None:
        """Raises a UserError when the index's storage does not answer (a Chroma server that is down)."""
        ...


class LocalIndex:
    """The index directory (snapshot.py's layout)."""

    def __init__(self, index_dir: Path) -> None:
        self.index_dir = Path(index_dir)

    def live(self, fresh: bool = False) -> str | None:
        gen = current_generation(self.index_dir)
        return gen.name if gen is not None else None

    def require(self) -> str:
        return require_generation(self.index_dir).name

    def meta(self, gen: str) -> IndexMeta | None:
        path = self.index_dir / gen
        return read_meta(path) if (path / "meta.json").is_file() else None

    def current_meta(self) -> IndexMeta | None:
        gen = self.live()
        return self.meta(gen) if gen else None

    def snapshot(self, gen: str) -> IndexSnapshot:
        return IndexSnapshot(self.index_dir / gen)

    def location(self, gen: str) -> str:
        return str((self.index_dir / gen).resolve())

    def describe(self) -> str:
        return str(self.index_dir)

    def ping(self) -> None:
        return None


def open_index(settings: Settings) -> IndexLocation:
    """The index the settings name: the Chroma server of settings.chroma_url, else settings.index_dir."""
    if settings.chroma_url:
        return ServerIndex(settings.chroma_url, settings.chroma_prefix)
    return LocalIndex(Path(settings.index_dir))
