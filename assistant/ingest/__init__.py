"""Document ingestion: find files, load them into `Document`s (sections with real line ranges), chunk them.

    from assistant.ingest import load_all, chunk_document
    docs, skipped = load_all([Path("corpus")])
    chunks = [c for d in docs for c in chunk_document(d)]

Modules: loader (dispatch, metadata, errors), markdown, rst, formats (ipynb, sphinx-gallery .py,
HTML, PDF, text), sections (line-mapped sections), chunker. Token estimates are assistant/text.py.
"""
from __future__ import annotations

from .chunker import DEFAULT_CHUNK_TOKENS, MIN_TOKENS, chunk_document, chunk_id
from .loader import SUFFIXES, LoadError, discover, load_all, load_document

__all__ = ["DEFAULT_CHUNK_TOKENS", "MIN_TOKENS", "SUFFIXES", "LoadError", "chunk_document", "chunk_id", "discover",
           "load_all", "load_document"]
