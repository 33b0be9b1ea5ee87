"""The uploads folder as the loader reads it: where it lies (`<state_dir>/uploads`), its registry
(`uploads/.documents.json`: id, name, size, sha256, added, owner) and the date a page was added (`upload_meta`).
assistant/documents.py adds, removes and records the documents; this module only reads."""
from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from ..types import UPLOADS_FOLDER

REGISTRY = ".documents.json"


def uploads_dir(state_dir: Path) -> Path:
    return Path(state_dir) / UPLOADS_FOLDER


def read_registry(root: Path) -> dict[str, dict[str, Any]]:
    f = Path(root) / REGISTRY
    try:
        data = json.loads(f.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return {d["id"]: d for d in data.get("documents", []) if isinstance(d, dict) and "id" in d}


def upload_meta(path: Path, root: Path) -> dict[str, str]:
    """What the loader adds to a page of the uploads folder: the date it was added; {} for any other file."""
    root = Path(root)
    if root.name != UPLOADS_FOLDER or not (root / REGISTRY).is_file():
        return {}
    try:
        doc_id = Path(path).resolve().relative_to(root.resolve()).parts[0]
    except (ValueError, IndexError):
        return {}
    entry = read_registry(root).get(doc_id)
    if not entry:
        return {}
    return {"date": time.strftime("%Y-%m-%d %H:%M", time.localtime(float(entry["added"])))}
