"""Sessions, messages and feedback in SQLite (survive a restart). History is bounded by tokens."""
from __future__ import annotations

import json
import sqlite3
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from .text import rough_tokens

_SCHEMA = """
CREATE TABLE IF NOT EXISTS sessions (id TEXT PRIMARY KEY, created REAL NOT NULL, updated REAL NOT NULL);
CREATE TABLE IF NOT EXISTS messages (
    id TEXT PRIMARY KEY, session_id TEXT NOT NULL, role TEXT NOT NULL, content TEXT NOT NULL,
    extra TEXT NOT NULL DEFAULT '{}', created REAL NOT NULL);
CREATE INDEX IF NOT EXISTS messages_session ON messages(session_id, created);
CREATE TABLE IF NOT EXISTS feedback (
    id INTEGER PRIMARY KEY AUTOINCREMENT, session_id TEXT NOT NULL, message_id TEXT NOT NULL,
    rating TEXT NOT NULL, comment TEXT NOT NULL DEFAULT '', created REAL NOT NULL);
"""


def new_id() -> str:
    return uuid.uuid4().hex[:16]


class SessionStore:
    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(str(path), check_same_thread=False)
        self._db.executescript(_SCHEMA)
        self._lock = threading.Lock()

    def ensure(self, session_id: str | None) -> str:
        sid = session_id or new_id()
        now = time.time()
        with self._lock, self._db:
            self._db.execute("INSERT OR IGNORE INTO sessions (id, created, updated) VALUES (?, ?, ?)", (sid, now, now))
        return sid

    def add_message(self, session_id: str, role: str, content: str, extra: dict[str, Any] | None = None) -> str:
        mid = new_id()
        now = time.time()
        with self._lock, self._db:
            self._db.execute(
                "INSERT INTO messages (id, session_id, role, content, extra, created) VALUES (?, ?, ?, ?, ?, ?)",
                (mid, session_id, role, content, json.dumps(extra or {}, ensure_ascii=False), now),
            )
            self._db.execute("UPDATE sessions SET updated = ? WHERE id = ?", (now, session_id))
        return mid

    def history(self, session_id: str, token_budget: int) -> list[dict[str, str]]:
        """The latest turns that fit in token_budget, oldest first (role/content pairs)."""
        with self._lock:
            rows = self._db.execute(
                "SELECT role, content FROM messages WHERE session_id = ? ORDER BY created DESC", (session_id,)
            ).fetchall()
        out: list[dict[str, str]] = []
        used = 0
        for role, content in rows:
            t = rough_tokens(content)
            if used + t > token_budget:
                break
            used += t
            out.append({"role": role, "content": content})
        return out[::-1]

    def get(self, session_id: str) -> dict[str, Any] | None:
        with self._lock:
            s = self._db.execute("SELECT id, created, updated FROM sessions WHERE id = ?", (session_id,)).fetchone()
            if not s:
                return None
            msgs = self._db.execute(
                "SELECT id, role, content, extra, created FROM messages WHERE session_id = ? ORDER BY created",
                (session_id,),
            ).fetchall()
            fb = self._db.execute(
                "SELECT message_id, rating, comment, created FROM feedback WHERE session_id = ? ORDER BY id",
                (session_id,),
            ).fetchall()
        return {
            "id": s[0], "created": s[1], "updated": s[2],
            "messages": [{"id": m[0], "role": m[1], "content": m[2], **json.loads(m[3]), "created": m[4]} for m in msgs],
            "feedback": [{"message_id": f[0], "rating": f[1], "comment": f[2], "created": f[3]} for f in fb],
        }

    def delete(self, session_id: str) -> bool:
        with self._lock, self._db:
            n = self._db.execute("DELETE FROM sessions WHERE id = ?", (session_id,)).rowcount
            self._db.execute("DELETE FROM messages WHERE session_id = ?", (session_id,))
            self._db.execute("DELETE FROM feedback WHERE session_id = ?", (session_id,))
        return n > 0

    def has_message(self, session_id: str, message_id: str) -> bool:
        with self._lock:
            return self._db.execute(
                "SELECT 1 FROM messages WHERE id = ? AND session_id = ?", (message_id, session_id)
            ).fetchone() is not None

    def add_feedback(self, session_id: str, message_id: str, rating: str, comment: str = "") -> None:
        with self._lock, self._db:
            self._db.execute(
                "INSERT INTO feedback (session_id, message_id, rating, comment, created) VALUES (?, ?, ?, ?, ?)",
                (session_id, message_id, rating, comment, time.time()),
            )

    def close(self) -> None:
        self._db.close()
