"""Sessions, messages and feedback in SQLite (survive a restart). History is bounded by tokens.

Owns who may see a session. Only the store issues ids (128-bit random, 32 hex digits; rows from before
carry 16); an id it never issued names nothing. Each session row has an `owner`: the owner id of the API key
that created it (assistant/keys.py), or NULL when the server has no keys (the single local user). Every read
and write takes `owner`: a key sees only its own sessions; `owner=None` (no keys: one local user, loopback
only, or the CLI on its own files) sees all. Files from before the owner column are migrated on open; their
sessions have no owner, so no key can see them.

The database is in WAL mode with full syncs, private (0600 in a 0700 directory), and a turn (the question and
its answer) is written in one transaction. Sessions older than the retention age, and the oldest beyond the
retention count, are pruned when the store opens and every PRUNE_EVERY turns."""
from __future__ import annotations

import json
import re
import secrets
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

from .errors import UserError
from .private import private_dir, private_file
from .text import rough_tokens

PRUNE_EVERY = 50  # turns written between two prunings

_SCHEMA = """
CREATE TABLE IF NOT EXISTS sessions (id TEXT PRIMARY KEY, created REAL NOT NULL, updated REAL NOT NULL, owner TEXT);
CREATE TABLE IF NOT EXISTS messages (
    id TEXT PRIMARY KEY, session_id TEXT NOT NULL, role TEXT NOT NULL, content TEXT NOT NULL,
    extra TEXT NOT NULL DEFAULT '{}', created REAL NOT NULL);
CREATE INDEX IF NOT EXISTS messages_session ON messages(session_id, created);
CREATE TABLE IF NOT EXISTS feedback (
    id INTEGER PRIMARY KEY AUTOINCREMENT, session_id TEXT NOT NULL, message_id TEXT NOT NULL,
    rating TEXT NOT NULL, comment TEXT NOT NULL DEFAULT '', created REAL NOT NULL);
"""


ID_PATTERN = r"^[0-9a-f]{16}([0-9a-f]{16})?$"  # 32 hex digits; 16 in files from before
_ID = re.compile(ID_PATTERN)
# the owner matches, or the caller is the keyless local user (owner NULL), who sees every session
_MINE = "(? IS NULL OR owner = ?)"


def new_id() -> str:
    """A session or message id: 128 random bits as 32 hex digits."""
    return secrets.token_hex(16)


def valid_id(value: object) -> bool:
    return isinstance(value, str) and _ID.match(value) is not None


def unknown_session() -> UserError:
    return UserError("not_found", "Unknown session: start a new one (omit session_id) or use an id this server "
                     "returned (32 hex digits).", "未找到该会话：请开始新会话（不传 session_id），或使用本服务返回的会话 id"
                     "（32 位十六进制）。", 404)


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
        self._migrate()
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

    def _migrate(self) -> None:
        """Files from before sessions had owners get the column (NULL: the keyless local user's)."""
        cols = {row[1] for row in self._db.execute("PRAGMA table_info(sessions)")}
        if "owner" not in cols:
            with self._db:
                self._db.execute("ALTER TABLE sessions ADD COLUMN owner TEXT")

    def ensure(self, session_id: str | None, owner: str | None = None) -> str:
        """A new session for `owner` (session_id None), or `session_id` when it exists and is the owner's;
        anything else is a 404 UserError (a client never chooses an id)."""
        if session_id is None:
            sid, now = new_id(), time.time()
            with self._lock, self._db:
                self._db.execute("INSERT INTO sessions (id, created, updated, owner) VALUES (?, ?, ?, ?)",
                                 (sid, now, now, owner))
            return sid
        if not self.exists(session_id, owner):
            raise unknown_session()
        return session_id

    def exists(self, session_id: str, owner: str | None = None) -> bool:
        if not valid_id(session_id):
            return False
        with self._lock:
            return self._db.execute(f"SELECT 1 FROM sessions WHERE id = ? AND {_MINE}",
                                    (session_id, owner, owner)).fetchone() is not None

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

    def get(self, session_id: str, owner: str | None = None) -> dict[str, Any] | None:
        if not valid_id(session_id):
            return None
        with self._lock:
            s = self._db.execute(f"SELECT id, created, updated FROM sessions WHERE id = ? AND {_MINE}",
                                 (session_id, owner, owner)).fetchone()
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

    def delete(self, session_id: str, owner: str | None = None) -> bool:
        if not valid_id(session_id):
            return False
        with self._lock, self._db:
            n = self._db.execute(f"DELETE FROM sessions WHERE id = ? AND {_MINE}", (session_id, owner, owner)).rowcount
            if n == 0:
                return False
            self._db.execute("DELETE FROM messages WHERE session_id = ?", (session_id,))
            self._db.execute("DELETE FROM feedback WHERE session_id = ?", (session_id,))
        return n > 0

    def has_message(self, session_id: str, message_id: str, owner: str | None = None) -> bool:
        """True when the message is in the session and the session is the owner's."""
        if not (valid_id(session_id) and valid_id(message_id)):
            return False
        with self._lock:
            return self._db.execute(
                "SELECT 1 FROM messages m JOIN sessions s ON s.id = m.session_id WHERE m.id = ? AND m.session_id = ?"
                " AND (? IS NULL OR s.owner = ?)", (message_id, session_id, owner, owner)
            ).fetchone() is not None

    def add_feedback(self, session_id: str, message_id: str, rating: str, comment: str = "") -> None:
        with self._lock, self._db:
            self._db.execute(
                "INSERT INTO feedback (session_id, message_id, rating, comment, created) VALUES (?, ?, ?, ?, ?)",
                (session_id, message_id, rating, comment, time.time()),
            )

    def close(self) -> None:
        self._db.close()
