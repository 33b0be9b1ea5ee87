"""Sessions, messages and feedback: the store's contract and logic, and its default backend, SQLite (survive a
restart). History is bounded by tokens.

Owns who may see a session. Only the store issues ids (128-bit random, 32 hex digits; rows from before
carry 16); an id it never issued names nothing. Each session row has an `owner`: the owner id of the API key
that created it (assistant/keys.py), or NULL when the server has no keys (the single local user). Every read
and write takes `owner`: a key sees only its own sessions; `owner=None` (no keys: one local user, loopback
only, or the CLI on its own files) sees all. Files from before the owner column are migrated on open; their
sessions have no owner, so no key can see them.

The database is in WAL mode with full syncs, private (0600 in a 0700 directory), and a turn (the question and
its answer) is written in one transaction. Sessions older than the retention age, and the oldest beyond the
retention count, are pruned when the store opens and every PRUNE_EVERY turns.

`SessionStorage` is the contract every backend meets (tests/test_contract_sessions.py runs it over each);
`SqlSessions` holds the logic once, over a small dialect (placeholders, types, transactions); `SessionStore`
is SQLite, `postgres.PostgresSessionStore` PostgreSQL (ASSISTANT_DATABASE_URL); `open_store` (the package's
__init__) picks one from the settings. The schema is versioned: MIGRATIONS are ordered steps recorded in the
`schema_version` table, run when a store opens (each step is idempotent, so a file from before the table
existed, or a step cut short, is brought up to date)."""
from __future__ import annotations

import json
import re
import secrets
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from ..errors import UserError
from ..private import private_dir, private_file
from ..text import rough_tokens

PRUNE_EVERY = 50  # turns written between two prunings


ID_PATTERN = r"^[0-9a-f]{16}([0-9a-f]{16})?$"  # 32 hex digits; 16 in files from before
_ID = re.compile(ID_PATTERN)
# the owner matches, or the caller is the keyless local user (owner NULL), who sees every session
_MINE = "(CAST(? AS TEXT) IS NULL OR owner = ?)"
# the session is listed for that client (a browser id), or the caller names none (the CLI, an API client)
_CLIENTS = "(CAST(? AS TEXT) IS NULL OR client = ?)"
TITLE_CHARS = 80  # a title (the first question's start, or a rename) is cut to this many characters
CLIENT_PATTERN = r"^[A-Za-z0-9_-]{8,64}$"  # a browser's id (localStorage) or an API client's name
_CLIENT = re.compile(CLIENT_PATTERN)


def valid_client(value: object) -> bool:
    return isinstance(value, str) and _CLIENT.match(value) is not None


def _like(text: str) -> str:
    """A LIKE pattern matching `text` anywhere, lower-cased, its wildcards escaped with '!'."""
    return "%" + text.lower().replace("!", "!!").replace("%", "!%").replace("_", "!_") + "%"


def new_id() -> str:
    """A session or message id: 128 random bits as 32 hex digits."""
    return secrets.token_hex(16)


def valid_id(value: object) -> bool:
    return isinstance(value, str) and _ID.match(value) is not None


def unknown_session() -> UserError:
    """A session that does not exist, or is another key's or another browser's: the same 404 (no one learns
    that someone else's session exists)."""
    return UserError("not_found", "Unknown session: it does not exist or belongs to another browser or key; start a "
                     "new one (omit session_id) or use an id this server returned to you (32 hex digits).",
                     "未找到该会话：它不存在，或属于另一个浏览器或密钥；请开始新会话（不传 session_id），"
                     "或使用本服务返回给你的会话 id（32 位十六进制）。", 404)



class SessionStorage(Protocol):
    """What the service needs from a session store; every backend implements it (and the contract suite
    checks it). `owner` everywhere: the caller's owner id, None for the keyless local user, who sees all.
    `client` (exists, list_sessions): a browser's id; the session must be listed for it. None names no client."""

    max_age_days: float
    max_sessions: int

    def ensure(self, session_id: str | None, owner: str | None = None, client: str | None = None) -> str: ...

    def exists(self, session_id: str, owner: str | None = None, client: str | None = None) -> bool: ...

    def add_turn(self, session_id: str, question: str, answer: str, extra: dict[str, Any] | None = None) -> str: ...

    def history(self, session_id: str, token_budget: int) -> list[dict[str, str]]: ...

    def get(self, session_id: str, owner: str | None = None) -> dict[str, Any] | None: ...

    def delete(self, session_id: str, owner: str | None = None) -> bool: ...

    def has_message(self, session_id: str, message_id: str, owner: str | None = None) -> bool: ...

    def list_sessions(self, owner: str | None = None, client: str | None = None, text: str = "",
                      limit: int = 50) -> list[dict[str, Any]]: ...

    def rename(self, session_id: str, title: str, owner: str | None = None) -> bool: ...

    def last_turn(self, session_id: str) -> dict[str, Any] | None: ...

    def replace_turn(self, session_id: str, answer_id: str, question: str, answer: str,
                     extra: dict[str, Any]) -> None: ...

    def add_feedback(self, session_id: str, message_id: str, rating: str, comment: str = "") -> None: ...

    def prune(self, now: float | None = None) -> int: ...

    def schema_version(self) -> int: ...

    def ping(self) -> None:
        """Raise a UserError when the database cannot be reached (for /readyz)."""
        ...

    def export_rows(self) -> dict[str, list[tuple[Any, ...]]]: ...

    def import_rows(self, rows: dict[str, list[tuple[Any, ...]]]) -> dict[str, int]: ...

    def close(self) -> None: ...


class Db(Protocol):
    """The part of a DB-API connection the logic uses, with `?` placeholders whatever the driver."""

    def execute(self, sql: str, params: Sequence[Any] = ...) -> Any: ...

    def executemany(self, sql: str, params: Iterable[Sequence[Any]]) -> Any: ...


@dataclass(frozen=True)
class Migration:
    """One step of the schema; `apply` must be idempotent (files from before `schema_version` run it again)."""

    version: int
    what: str
    apply: Callable[[SqlSessions, Db], None]


def _create_tables(store: SqlSessions, db: Db) -> None:
    real, serial = store.REAL, store.SERIAL
    for sql in (
        f"CREATE TABLE IF NOT EXISTS sessions (id TEXT PRIMARY KEY, created {real} NOT NULL, updated {real} NOT NULL)",
        "CREATE TABLE IF NOT EXISTS messages (id TEXT PRIMARY KEY, session_id TEXT NOT NULL, role TEXT NOT NULL, "
        f"content TEXT NOT NULL, extra TEXT NOT NULL DEFAULT '{{}}', created {real} NOT NULL)",
        "CREATE INDEX IF NOT EXISTS messages_session ON messages(session_id, created)",
        f"CREATE TABLE IF NOT EXISTS feedback (id {serial}, session_id TEXT NOT NULL, message_id TEXT NOT NULL, "
        f"rating TEXT NOT NULL, comment TEXT NOT NULL DEFAULT '', created {real} NOT NULL)",
    ):
        db.execute(sql)


def _add_owner(store: SqlSessions, db: Db) -> None:
    store.add_column(db, "sessions", "owner", "TEXT")  # NULL: the keyless local user's


def _add_title_client(store: SqlSessions, db: Db) -> None:
    store.add_column(db, "sessions", "title", "TEXT")  # NULL until the first turn (its question) or a rename
    store.add_column(db, "sessions", "client", "TEXT")  # the browser (or API client) whose list shows it


MIGRATIONS: tuple[Migration, ...] = (
    Migration(1, "sessions, messages and feedback", _create_tables),
    Migration(2, "sessions.owner: the owner id of the API key that made the session", _add_owner),
    Migration(3, "sessions.title and sessions.client: the history list", _add_title_client),
)
SCHEMA_VERSION = MIGRATIONS[-1].version

# the copy's tables, their columns, and the columns that say two rows are one (feedback ids are the store's own)
COPY_TABLES: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "sessions": (("id", "created", "updated", "owner", "title", "client"), ("id",)),
    "messages": (("id", "session_id", "role", "content", "extra", "created"), ("id",)),
    "feedback": (("session_id", "message_id", "rating", "comment", "created"),
                 ("session_id", "message_id", "rating", "comment", "created")),
}


class SqlSessions:
    """The store's logic, once, in SQL both backends speak. A backend gives the dialect (column types,
    adding a column, a schema lock) and `_read` / `_write`: the lock, a transaction, and a `Db`."""

    REAL = "REAL"
    SERIAL = "INTEGER PRIMARY KEY AUTOINCREMENT"

    def __init__(self, *, max_age_days: float = 0, max_sessions: int = 0) -> None:
        """`max_age_days` / `max_sessions`: retention (0 keeps everything). The backend connects first."""
        self._lock = threading.Lock()
        self.max_age_days = max_age_days
        self.max_sessions = max_sessions
        self._writes = 0
        self._migrate()
        self.prune()

    # ---- the dialect --------------------------------------------------------------------------
    @contextmanager
    def _write(self) -> Iterator[Db]:
        """Under the lock, in one transaction (committed when the block ends, rolled back on error)."""
        raise NotImplementedError
        yield

    @contextmanager
    def _read(self) -> Iterator[Db]:
        with self._write() as db:
            yield db

    def add_column(self, db: Db, table: str, column: str, decl: str) -> None:
        raise NotImplementedError

    def _lock_schema(self, db: Db) -> None:
        """Keep two processes from migrating at once (inside the migration's transaction)."""

    # ---- the schema ---------------------------------------------------------------------------
    def _migrate(self) -> None:
        with self._write() as db:
            self._lock_schema(db)
            db.execute(f"CREATE TABLE IF NOT EXISTS schema_version (version INTEGER PRIMARY KEY, "
                       f"applied {self.REAL} NOT NULL)")
            current = db.execute("SELECT COALESCE(MAX(version), 0) FROM schema_version").fetchone()[0]
            if current > SCHEMA_VERSION:
                raise UserError("schema_too_new", f"The sessions database has schema version {current}, newer than "
                                f"this program knows ({SCHEMA_VERSION}): upgrade the program.",
                                f"会话数据库的结构版本为 {current}，比本程序支持的（{SCHEMA_VERSION}）更新：请升级程序。", 500)
            for step in MIGRATIONS:
                if step.version > current:
                    step.apply(self, db)
                    db.execute("INSERT INTO schema_version (version, applied) VALUES (?, ?)",
                               (step.version, time.time()))

    def schema_version(self) -> int:
        with self._read() as db:
            return int(db.execute("SELECT COALESCE(MAX(version), 0) FROM schema_version").fetchone()[0])

    def ping(self) -> None:
        with self._read() as db:
            db.execute("SELECT 1").fetchone()

    # ---- retention ----------------------------------------------------------------------------
    def prune(self, now: float | None = None) -> int:
        """Delete the sessions (with their messages and feedback) beyond the retention age or count, least
        recently updated first; returns how many went."""
        now = time.time() if now is None else now
        with self._write() as db:
            doomed: set[str] = set()
            if self.max_age_days > 0:
                cutoff = now - self.max_age_days * 86400
                doomed.update(r[0] for r in db.execute("SELECT id FROM sessions WHERE updated < ?", (cutoff,)))
            if self.max_sessions > 0:
                doomed.update(r[0] for r in db.execute(
                    "SELECT id FROM sessions WHERE id NOT IN "
                    "(SELECT id FROM sessions ORDER BY updated DESC, id LIMIT ?)", (self.max_sessions,)))
            if doomed:
                for table, column in (("messages", "session_id"), ("feedback", "session_id"), ("sessions", "id")):
                    db.executemany(f"DELETE FROM {table} WHERE {column} = ?", [(i,) for i in doomed])
        return len(doomed)

    # ---- sessions and turns -------------------------------------------------------------------
    def ensure(self, session_id: str | None, owner: str | None = None, client: str | None = None) -> str:
        """A new session for `owner` (session_id None), listed for `client` (a browser id, see valid_client),
        or `session_id` when it exists and is the owner's; anything else is a 404 UserError (a client never
        chooses an id)."""
        if session_id is None:
            sid, now = new_id(), time.time()
            with self._write() as db:
                db.execute("INSERT INTO sessions (id, created, updated, owner, client) VALUES (?, ?, ?, ?, ?)",
                           (sid, now, now, owner, client if valid_client(client) else None))
            return sid
        if not self.exists(session_id, owner):
            raise unknown_session()
        return session_id

    def exists(self, session_id: str, owner: str | None = None, client: str | None = None) -> bool:
        """The session is the owner's and, when `client` is given, that client's (the one its list shows it to)."""
        if not valid_id(session_id):
            return False
        with self._read() as db:
            return db.execute(f"SELECT 1 FROM sessions WHERE id = ? AND {_MINE} AND {_CLIENTS}",
                              (session_id, owner, owner, client, client)).fetchone() is not None

    def add_turn(self, session_id: str, question: str, answer: str, extra: dict[str, Any] | None = None) -> str:
        """Write a question and its answer in one transaction (both or neither); returns the answer's id."""
        qid, mid = new_id(), new_id()
        now = time.time()
        insert = "INSERT INTO messages (id, session_id, role, content, extra, created) VALUES (?, ?, ?, ?, ?, ?)"
        with self._write() as db:
            db.execute(insert, (qid, session_id, "user", question, "{}", now))
            db.execute(insert, (mid, session_id, "assistant", answer,
                                json.dumps(extra or {}, ensure_ascii=False), now + 1e-6))
            db.execute("UPDATE sessions SET updated = ?, title = COALESCE(title, ?) WHERE id = ?",
                       (now, " ".join(question.split())[:TITLE_CHARS], session_id))
            self._writes += 1
            due = self._writes % PRUNE_EVERY == 0
        if due:
            self.prune()
        return mid

    def history(self, session_id: str, token_budget: int) -> list[dict[str, str]]:
        """The latest turns that fit in token_budget, oldest first (role/content pairs)."""
        with self._read() as db:
            rows = db.execute(
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
        with self._read() as db:
            s = db.execute(f"SELECT id, created, updated, title FROM sessions WHERE id = ? AND {_MINE}",
                           (session_id, owner, owner)).fetchone()
            if not s:
                return None
            msgs = db.execute(
                "SELECT id, role, content, extra, created FROM messages WHERE session_id = ? ORDER BY created",
                (session_id,),
            ).fetchall()
            fb = db.execute(
                "SELECT message_id, rating, comment, created FROM feedback WHERE session_id = ? ORDER BY id",
                (session_id,),
            ).fetchall()
        return {
            "id": s[0], "created": s[1], "updated": s[2], "title": s[3] or "",
            "messages": [{"id": m[0], "role": m[1], "content": m[2], **json.loads(m[3]), "created": m[4]} for m in msgs],
            "feedback": [{"message_id": f[0], "rating": f[1], "comment": f[2], "created": f[3]} for f in fb],
        }

    def delete(self, session_id: str, owner: str | None = None) -> bool:
        if not valid_id(session_id):
            return False
        with self._write() as db:
            n = db.execute(f"DELETE FROM sessions WHERE id = ? AND {_MINE}", (session_id, owner, owner)).rowcount
            if n == 0:
                return False
            db.execute("DELETE FROM messages WHERE session_id = ?", (session_id,))
            db.execute("DELETE FROM feedback WHERE session_id = ?", (session_id,))
        return n > 0

    def has_message(self, session_id: str, message_id: str, owner: str | None = None) -> bool:
        """True when the message is in the session and the session is the owner's."""
        if not (valid_id(session_id) and valid_id(message_id)):
            return False
        with self._read() as db:
            return db.execute(
                "SELECT 1 FROM messages m JOIN sessions s ON s.id = m.session_id WHERE m.id = ? AND m.session_id = ?"
                " AND (CAST(? AS TEXT) IS NULL OR s.owner = ?)", (message_id, session_id, owner, owner)
            ).fetchone() is not None

    # ---- the history list --------------------------------------------------------------------
    def list_sessions(self, owner: str | None = None, client: str | None = None, text: str = "",
                      limit: int = 50) -> list[dict[str, Any]]:
        """The owner's sessions that have a turn, newest first: {id, title, created, updated, turns}. `client`
        (a browser id) keeps that client's only; `text` keeps those whose title or a message contains it
        (case-insensitive)."""
        where = [_MINE, _CLIENTS]
        params: list[Any] = [owner, owner, client, client]
        if text.strip():
            where.append("(LOWER(COALESCE(title, '')) LIKE ? ESCAPE '!' OR EXISTS (SELECT 1 FROM messages m "
                         "WHERE m.session_id = sessions.id AND LOWER(m.content) LIKE ? ESCAPE '!'))")
            params += [_like(text.strip())] * 2
        with self._read() as db:
            rows = db.execute(
                "SELECT id, title, created, updated, (SELECT COUNT(*) FROM messages m WHERE m.session_id = "
                f"sessions.id AND m.role = 'user') AS turns FROM sessions WHERE {' AND '.join(where)} "
                "ORDER BY updated DESC, id LIMIT ?", (*params, max(1, min(limit, 500)))).fetchall()
        return [{"id": r[0], "title": r[1] or "", "created": r[2], "updated": r[3], "turns": int(r[4])}
                for r in rows if int(r[4]) > 0]

    def rename(self, session_id: str, title: str, owner: str | None = None) -> bool:
        """Give the owner's session a title (spaces collapsed, cut to TITLE_CHARS); False when not theirs."""
        if not valid_id(session_id):
            return False
        with self._write() as db:
            return db.execute(f"UPDATE sessions SET title = ? WHERE id = ? AND {_MINE}",
                              (" ".join(title.split())[:TITLE_CHARS], session_id, owner, owner)).rowcount > 0

    def last_turn(self, session_id: str) -> dict[str, Any] | None:
        """The session's last question and answer: {question_id, question, answer_id, answer, extra}."""
        with self._read() as db:
            rows = db.execute("SELECT id, role, content, extra FROM messages WHERE session_id = ? "
                              "ORDER BY created DESC LIMIT 2", (session_id,)).fetchall()
        if len(rows) < 2 or rows[0][1] != "assistant" or rows[1][1] != "user":
            return None
        return {"question_id": rows[1][0], "question": rows[1][2], "answer_id": rows[0][0], "answer": rows[0][2],
                "extra": json.loads(rows[0][3])}

    def replace_turn(self, session_id: str, answer_id: str, question: str, answer: str,
                     extra: dict[str, Any]) -> None:
        """Rewrite the answer `answer_id` (content and extra) and the question before it, in one transaction:
        a regenerated answer or an edited question keeps its place and its id."""
        with self._write() as db:
            row = db.execute("SELECT created FROM messages WHERE id = ? AND session_id = ? AND role = 'assistant'",
                             (answer_id, session_id)).fetchone()
            if row is None:
                raise UserError("not_found", "No such message in this session.", "该会话中没有这条消息。", 404)
            db.execute("UPDATE messages SET content = ?, extra = ? WHERE id = ?",
                       (answer, json.dumps(extra, ensure_ascii=False), answer_id))
            db.execute("UPDATE messages SET content = ? WHERE id = (SELECT id FROM messages WHERE session_id = ? "
                       "AND role = 'user' AND created < ? ORDER BY created DESC LIMIT 1)",
                       (question, session_id, row[0]))
            db.execute("UPDATE sessions SET updated = ? WHERE id = ?", (time.time(), session_id))

    def add_feedback(self, session_id: str, message_id: str, rating: str, comment: str = "") -> None:
        with self._write() as db:
            db.execute(
                "INSERT INTO feedback (session_id, message_id, rating, comment, created) VALUES (?, ?, ?, ?, ?)",
                (session_id, message_id, rating, comment, time.time()),
            )

    # ---- copying between stores (assistant db copy) -------------------------------------------
    def export_rows(self) -> dict[str, list[tuple[Any, ...]]]:
        """Every row of sessions, messages and feedback (the columns of COPY_TABLES), in one snapshot."""
        with self._read() as db:
            return {table: [tuple(r) for r in db.execute(f"SELECT {', '.join(cols)} FROM {table} ORDER BY id")]
                    for table, (cols, _key) in COPY_TABLES.items()}

    def import_rows(self, rows: dict[str, list[tuple[Any, ...]]]) -> dict[str, int]:
        """Add the rows another store exported, in one transaction, skipping those already here (by id, and
        feedback by all its columns): importing twice adds nothing. Returns the rows added per table."""
        added: dict[str, int] = {}
        with self._write() as db:
            for table, (cols, key) in COPY_TABLES.items():
                before = db.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
                match = " AND ".join(f"t.{k} = ?" for k in key)
                db.executemany(
                    f"INSERT INTO {table} ({', '.join(cols)}) SELECT {', '.join('?' for _ in cols)} "
                    f"WHERE NOT EXISTS (SELECT 1 FROM {table} t WHERE {match})",
                    [(*row, *(row[cols.index(k)] for k in key)) for row in rows.get(table, [])])
                added[table] = db.execute(f"SELECT count(*) FROM {table}").fetchone()[0] - before
        return added

    def close(self) -> None:
        raise NotImplementedError


class SessionStore(SqlSessions):
    """The default backend: one SQLite file in the state directory (WAL, full syncs, 0600)."""

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
        super().__init__(max_age_days=max_age_days, max_sessions=max_sessions)

    @contextmanager
    def _write(self) -> Iterator[Db]:
        with self._lock, self._db:
            yield self._db

    @contextmanager
    def _read(self) -> Iterator[Db]:
        with self._lock:
            yield self._db

    def add_column(self, db: Db, table: str, column: str, decl: str) -> None:
        if column not in {row[1] for row in db.execute(f"PRAGMA table_info({table})")}:
            db.execute(f"ALTER TABLE {table} ADD COLUMN {column} {decl}")

    def close(self) -> None:
        self._db.close()

