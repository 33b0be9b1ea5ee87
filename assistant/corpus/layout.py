"""Where the corpus lies on disk: the project's `corpus/` folder with the manifest and its pinned lock, and the
layout of the synced docs cache (`<corpus_cache>/framework-docs/`, its cache lock). Paths only: the settings
read it to add a synced cache to the indexed folders, `manifest` and `sync` to find their files."""
from __future__ import annotations

from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[2]
MANIFEST = PROJECT_ROOT / "corpus" / "sources.yaml"
PINNED_LOCK = PROJECT_ROOT / "corpus" / "sources.lock.json"
DOCS_FOLDER = "framework-docs"
CACHE_LOCK = ".sources.lock.json"


def docs_root(corpus_cache: Path) -> Path:
    """The folder the index takes the synced pages from."""
    return Path(corpus_cache) / DOCS_FOLDER


def has_synced_docs(corpus_cache: Path) -> bool:
    return (docs_root(corpus_cache) / CACHE_LOCK).is_file()
