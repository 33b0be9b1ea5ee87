"""Sessions, messages and feedback in SQLite (survive a restart). History is bounded by tokens.

The database is in WAL mode with full syncs, private (0600 in a 0700 directory), and a turn (the question and
its answer) is written in one transaction. Sessions older than the retention age, and the oldest beyond the
retention count, are pruned when the store opens and every PRUNE_EVERY turns."""
from __future__ import annotations

import json
import sqlite3
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from .private import private_dir, private_file
from .text import rough_tokens

PRUNE_EVERY = 50  # turns written between two prunings

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
    def __init__(self, path: Path, *, max_age_days: float = 0, max_sessions: int = 0) -> None:
        """`max_age_days` / `max_sessions`: retention (0 keeps everything)."""
        private_dir(path.parent)
        for suffix in ("", "-wal", "-shm"):  # SQLite gives its side files the database's mode; be sure anyway
            p = path.with_name(path.name + suffix)
            if suffix == "" or p.exists():
                private_file(p)
        self._db = sqlite3.connect(str(path), check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")  # a committed turn survives a power cut, not only a crash
        self._db.executescript(_SCHEMA)
        self._lock = threading.Lock()
        self.max_age_days = max_age_days
        self.max_sessions = max_sessions
        self._writes = 0
        self.prune()

    def prune(self, now: float | None = None) -> int:
        """Delete the sessions (with their messages and feedback) beyond the retention age or count, least
        recently updated first; returns how many went."""
        now = time.time() if now is None else now
        with self._lock, self._db:
            doomed: set[str] = set()
            if self.max_age_days > 0:
                cutoff = now - self.max_age_days * 86400
                doomed.update(r[0] for r in self._db.execute("SELECT id FROM sessions WHERE updated < ?", (cutoff,)))
            if self.max_sessions > 0:
                doomed.update(r[0] for r in self._db.execute(
                    "SELECT id FROM sessions ORDER BY updated DESC, id LIMIT -1 OFFSET ?", (self.max_sessions,)))
            for table, column in (("messages", "session_id"), ("feedback", "session_id"), ("sessions", "id")):
                self._db.executemany(f"DELETE FROM {table} WHERE {column} = ?", [(i,) for i in doomed])
        return len(doomed)

    def ensure(self, session_id: str | None) -> str:
        sid = session_id or new_id()
        now = time.time()
        with self._lock, self._db:
            self._db.execute("INSERT OR IGNORE INTO sessions (id, created, updated) VALUES (?, ?, ?)", (sid, now, now))
        return sid

    def add_turn(self, session_id: str, question: str, answer: str, extra: dict[str, Any] | None = None) -> str:
        """Write a question and its answer in one transaction (both or neither); returns the answer's id."""
        qid, mid = new_id(), new_id()
        now = time.time()
        insert = "INSERT INTO messages (id, session_id, role, content, extra, created) VALUES (?, ?, ?, ?, ?, ?)"
        with self._lock, self._db:
            self._db.execute(insert, (qid, session_id, "user", question, "{}", now))
            self._db.execute(insert, (mid, session_id, "assistant", answer,
                                      json.dumps(extra or {}, ensure_ascii=False), now + 1e-6))
            self._db.execute("UPDATE sessions SET updated = ? WHERE id = ?", (now, session_id))
            self._writes += 1
        if self._writes % PRUNE_EVERY == 0:
            self.prune()
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
