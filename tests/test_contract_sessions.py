"""One contract for every session store (assistant/sessions/ `SessionStorage`): SQLite in a temp dir, and a
real PostgreSQL that the tests start themselves (tests/pgserver.py; skipped only when its binaries are not
installed). Turns round trip, owners are isolated, a delete takes its messages and feedback, history keeps to
its token budget, retention prunes by age and count, concurrent turns from threads (and from two stores on one
database, as two replicas) lose nothing, ids are checked, an old schema is migrated, import is idempotent. Then
what is PostgreSQL's own: `assistant db copy`, connection errors without the password, a dropped connection,
and the HTTP API end to end with ASSISTANT_DATABASE_URL."""
from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from assistant.errors import UserError
from assistant.sessions import SCHEMA_VERSION, SessionStorage, SessionStore, open_store, valid_id
from assistant.settings import load_settings
from assistant.text import rough_tokens

Factory = Callable[..., SessionStorage]


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The settings' way to name a store: '' (SQLite in tmp_path/state) or a fresh PostgreSQL database's URL."""
    return request.getfixturevalue("pg_url") if request.param == "postgres" else ""


@pytest.fixture()
def make(backend: str, tmp_path: Path):
    """Opens stores on the one database of this test, as the service does (open_store); closes them after."""
    opened: list[SessionStorage] = []

    def open_one(**retention) -> SessionStorage:
        settings = load_settings(state_dir=tmp_path / "state", database_url=backend,
                                 session_max_age_days=retention.get("max_age_days", 0),
                                 session_max_count=retention.get("max_sessions", 0))
        store = open_store(settings)
        opened.append(store)
        return store

    yield open_one
    for s in opened:
        s.close()


def counts(store: SessionStorage) -> dict[str, int]:
    return {table: len(rows) for table, rows in store.export_rows().items()}


# ---- the contract ------------------------------------------------------------------------------------------------
def test_a_turn_round_trips_and_survives_a_reopen(make: Factory) -> None:
    store = make()
    sid = store.ensure(None, "owner-a")
    assert valid_id(sid) and len(sid) == 32 and store.exists(sid, "owner-a")
    mid = store.add_turn(sid, "什么是 ZeRO？", "ZeRO 切分优化器状态 [1]。", {"citations": [{"n": 1}], "refused": False})
    store.add_feedback(sid, mid, "up", "清楚")
    again = make()  # another connection to the same database: what a restart or a second replica sees
    sess = again.get(sid, "owner-a")
    assert sess is not None and sess["id"] == sid and sess["updated"] >= sess["created"]
    assert [(m["role"], m["content"]) for m in sess["messages"]] == [
        ("user", "什么是 ZeRO？"), ("assistant", "ZeRO 切分优化器状态 [1]。")]
    assert sess["messages"][1]["id"] == mid and sess["messages"][1]["citations"] == [{"n": 1}]
    assert sess["messages"][1]["refused"] is False
    assert [(f["message_id"], f["rating"], f["comment"]) for f in sess["feedback"]] == [(mid, "up", "清楚")]
    assert again.ensure(sid, "owner-a") == sid
    assert again.schema_version() == SCHEMA_VERSION
    again.ping()


def test_owners_are_isolated(make: Factory) -> None:
    store = make()
    sid = store.ensure(None, "owner-a")
    mid = store.add_turn(sid, "q", "a")
    keyless = store.ensure(None)  # the single local user's session (no keys)
    assert not store.exists(sid, "owner-b") and store.get(sid, "owner-b") is None
    assert not store.has_message(sid, mid, "owner-b") and store.has_message(sid, mid, "owner-a")
    assert not store.delete(sid, "owner-b")
    with pytest.raises(UserError) as info:
        store.ensure(sid, "owner-b")
    assert info.value.status == 404 and info.value.zh.startswith("未找到该会话")
    assert store.get(sid) is not None  # the keyless local user sees every session
    assert store.get(keyless, "owner-a") is None  # and no key sees the keyless user's
    assert store.get(sid, "owner-a") is not None  # still there after the failed delete


def test_delete_takes_messages_and_feedback(make: Factory) -> None:
    store = make()
    keep, doomed = store.ensure(None, "a"), store.ensure(None, "a")
    for sid in (keep, doomed):
        for i in range(2):
            store.add_feedback(sid, store.add_turn(sid, f"q{i}", f"a{i}"), "down", "x")
    assert counts(store) == {"sessions": 2, "messages": 8, "feedback": 4}
    assert store.delete(doomed, "a") and not store.delete(doomed, "a")
    assert store.get(doomed, "a") is None and store.history(doomed, 10_000) == []
    rows = store.export_rows()
    assert {r[1] for r in rows["messages"]} == {keep} and {r[0] for r in rows["feedback"]} == {keep}
    assert len(store.get(keep, "a")["messages"]) == 4


def test_history_keeps_to_its_token_budget(make: Factory) -> None:
    store = make()
    sid = store.ensure(None)
    turns = [(f"question {i} " + "x" * 40 * i, f"答案 {i} " + "字" * 10 * i) for i in range(1, 6)]
    for q, a in turns:
        store.add_turn(sid, q, a)
    flat = [m for q, a in turns for m in (("user", q), ("assistant", a))]
    assert [(m["role"], m["content"]) for m in store.history(sid, 100_000)] == flat
    budget = rough_tokens(flat[-1][1]) + rough_tokens(flat[-2][1]) + rough_tokens(flat[-3][1])
    assert [(m["role"], m["content"]) for m in store.history(sid, budget)] == flat[-3:]  # latest first, oldest out
    assert [m["content"] for m in store.history(sid, budget - 1)] == [flat[-2][1], flat[-1][1]]
    assert store.history(sid, 0) == []


def test_retention_prunes_by_age_and_by_count(make: Factory) -> None:
    store = make(max_age_days=30, max_sessions=3)
    ids = []
    for i in range(5):
        sid = store.ensure(None)
        store.add_feedback(sid, store.add_turn(sid, f"q{i}", f"a{i}"), "up")
        ids.append(sid)
        time.sleep(0.01)
    assert store.prune() == 2  # by count: the two least recently updated go, with their rows
    assert [store.get(s) is not None for s in ids] == [False, False, True, True, True]
    assert counts(store) == {"sessions": 3, "messages": 6, "feedback": 3}
    store.add_turn(ids[2], "again", "again")  # a turn makes a session recent
    sid = store.ensure(None)
    store.add_turn(sid, "new", "new")
    assert store.prune() == 1 and store.get(ids[3]) is None and store.get(ids[2]) is not None
    assert store.prune(now=time.time() + 29 * 86400) == 0
    assert store.prune(now=time.time() + 31 * 86400) == 3  # by age
    assert counts(store) == {"sessions": 0, "messages": 0, "feedback": 0}
    for i in range(4):
        store.add_turn(store.ensure(None), f"q{i}", f"a{i}")
    assert counts(make(max_sessions=1))["sessions"] == 1  # pruned when a store opens, too


def test_concurrent_turns_lose_nothing(make: Factory) -> None:
    stores = [make(), make()]  # two stores on one database: two replicas
    sids = [stores[0].ensure(None, "a"), stores[1].ensure(None, "a")]
    errors: list[BaseException] = []
    ids: list[str] = []

    def writer(n: int) -> None:
        try:
            for i in range(30):
                store, sid = stores[n % 2], sids[(n + i) % 2]
                ids.append(store.add_turn(sid, f"q{n}.{i}", f"a{n}.{i}", {"n": n, "i": i}))
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors
    assert len(set(ids)) == 180
    msgs = [m for sid in sids for m in stores[0].get(sid, "a")["messages"]]
    assert len(msgs) == 360 and {m["id"] for m in msgs if m["role"] == "assistant"} == set(ids)
    for sid in sids:  # every question is followed by its own answer
        pairs = stores[1].get(sid, "a")["messages"]
        for q, a in zip(pairs[::2], pairs[1::2], strict=True):
            assert (q["role"], a["role"]) == ("user", "assistant") and q["content"][1:] == a["content"][1:]


@pytest.mark.parametrize("bad", ["", "nope", "../etc/passwd", "x' OR '1'='1", "A" * 32, "0" * 31, "0" * 33, None, 7])
def test_ids_are_checked(make: Factory, bad) -> None:
    store = make()
    sid = store.ensure(None)
    mid = store.add_turn(sid, "q", "a")
    assert not store.exists(bad) and store.get(bad) is None and not store.delete(bad)
    assert not store.has_message(bad, mid) and not store.has_message(sid, bad)
    if bad is not None:  # None asks for a new session
        with pytest.raises(UserError) as info:
            store.ensure(bad)
        assert info.value.status == 404
    made_up = "ab" * 16  # well formed, never issued
    assert store.get(made_up) is None and not store.has_message(sid, made_up)
    assert counts(store) == {"sessions": 1, "messages": 2, "feedback": 0}


def test_import_is_idempotent(make: Factory, tmp_path: Path) -> None:
    source = SessionStore(tmp_path / "source" / "assistant.db")
    sid = source.ensure(None, "a")
    mid = source.add_turn(sid, "q", "a", {"refused": True})
    source.add_feedback(sid, mid, "up")
    source.add_feedback(sid, mid, "up")  # two identical ratings at two moments: both are kept
    store = make()
    mine = store.ensure(None)
    assert store.import_rows(source.export_rows()) == {"sessions": 1, "messages": 2, "feedback": 2}
    assert store.import_rows(source.export_rows()) == {"sessions": 0, "messages": 0, "feedback": 0}
    assert store.get(sid, "a") == source.get(sid, "a") and store.get(mine) is not None
    source.close()


def _old_sqlite(path: Path, versioned: bool) -> None:
    """A sessions file as it was: no owner column, and (versioned) schema_version at 1, else no such table."""
    db = sqlite3.connect(path)
    db.executescript(
        "CREATE TABLE sessions (id TEXT PRIMARY KEY, created REAL NOT NULL, updated REAL NOT NULL);"
        "CREATE TABLE messages (id TEXT PRIMARY KEY, session_id TEXT NOT NULL, role TEXT NOT NULL, content TEXT NOT "
        "NULL, extra TEXT NOT NULL DEFAULT '{}', created REAL NOT NULL);"
        "CREATE TABLE feedback (id INTEGER PRIMARY KEY AUTOINCREMENT, session_id TEXT NOT NULL, message_id TEXT NOT "
        "NULL, rating TEXT NOT NULL, comment TEXT NOT NULL DEFAULT '', created REAL NOT NULL);"
        "INSERT INTO sessions VALUES ('0123456789abcdef', 1, 1);"
        "INSERT INTO messages VALUES ('fedcba9876543210', '0123456789abcdef', 'user', 'old', '{}', 1);")
    if versioned:
        db.executescript("CREATE TABLE schema_version (version INTEGER PRIMARY KEY, applied REAL NOT NULL);"
                         "INSERT INTO schema_version VALUES (1, 1);")
    db.commit()
    db.close()


def _old_postgres(url: str) -> None:
    import psycopg

    with psycopg.connect(url, autocommit=True) as db:
        db.execute("CREATE TABLE sessions (id TEXT PRIMARY KEY, created DOUBLE PRECISION NOT NULL, "
                   "updated DOUBLE PRECISION NOT NULL)")
        db.execute("CREATE TABLE messages (id TEXT PRIMARY KEY, session_id TEXT NOT NULL, role TEXT NOT NULL, "
                   "content TEXT NOT NULL, extra TEXT NOT NULL DEFAULT '{}', created DOUBLE PRECISION NOT NULL)")
        db.execute("CREATE TABLE feedback (id BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY, session_id TEXT "
                   "NOT NULL, message_id TEXT NOT NULL, rating TEXT NOT NULL, comment TEXT NOT NULL DEFAULT '', "
                   "created DOUBLE PRECISION NOT NULL)")
        db.execute("CREATE TABLE schema_version (version INTEGER PRIMARY KEY, applied DOUBLE PRECISION NOT NULL)")
        db.execute("INSERT INTO schema_version VALUES (1, 1)")
        db.execute("INSERT INTO sessions VALUES ('0123456789abcdef', 1, 1)")
        db.execute("INSERT INTO messages VALUES ('fedcba9876543210', '0123456789abcdef', 'user', 'old', '{}', 1)")


def _check_migrated(make: Factory) -> None:
    store = make()
    assert store.schema_version() == SCHEMA_VERSION == 3
    old = store.get("0123456789abcdef")
    assert old is not None and old["messages"][0]["content"] == "old"  # the keyless local user still has it
    assert store.get("0123456789abcdef", "owner-a") is None  # no key does
    sid = store.ensure(None, "owner-a")
    store.add_feedback(sid, store.add_turn(sid, "q", "a"), "up")
    assert store.get(sid, "owner-a")["feedback"][0]["rating"] == "up"
    assert make().schema_version() == SCHEMA_VERSION  # opening again runs no step twice


def test_a_version_1_database_is_migrated(make: Factory, backend: str, tmp_path: Path) -> None:
    if backend:
        _old_postgres(backend)
    else:
        (tmp_path / "state").mkdir()
        _old_sqlite(tmp_path / "state" / "assistant.db", versioned=True)
    _check_migrated(make)


@pytest.mark.parametrize("backend", [""], ids=["sqlite"])  # PostgreSQL databases always had schema_version
def test_a_sqlite_file_from_before_versions_is_migrated(make: Factory, tmp_path: Path) -> None:
    (tmp_path / "state").mkdir()
    _old_sqlite(tmp_path / "state" / "assistant.db", versioned=False)
    _check_migrated(make)


def test_a_newer_schema_is_refused(make: Factory) -> None:
    store = make()
    with store._write() as db:  # type: ignore[attr-defined]
        db.execute("INSERT INTO schema_version (version, applied) VALUES (?, ?)", (SCHEMA_VERSION + 1, 0.0))
    with pytest.raises(UserError) as info:
        make()
    assert info.value.code == "schema_too_new" and "升级" in info.value.zh


def test_the_history_list_is_newest_first_per_owner_and_client_and_searchable(make: Factory) -> None:
    store = make()
    a = store.ensure(None, "owner-a", "browser-aaaa")
    store.add_turn(a, "  DeepSpeed   的 ZeRO 是什么？" + "长" * 200, "ZeRO 切分优化器状态 [1]。")
    time.sleep(0.01)
    b = store.ensure(None, "owner-a", "browser-aaaa")
    store.add_turn(b, "What is JAX good for?", "Research on TPUs, 100% functional_style [1].")
    store.add_turn(b, "And PyTorch?", "Eager mode [2].")
    other_browser = store.ensure(None, "owner-a", "browser-bbbb")
    store.add_turn(other_browser, "飞桨？", "国产框架。")
    other_key = store.ensure(None, "owner-b", "browser-aaaa")
    store.add_turn(other_key, "MindSpore?", "Ascend.")
    store.ensure(None, "owner-a", "browser-aaaa")  # no turn yet: not listed
    listed = store.list_sessions("owner-a", "browser-aaaa")
    assert [s["id"] for s in listed] == [b, a]  # newest first; other browsers, other keys and empty ones left out
    assert listed[0]["title"] == "What is JAX good for?" and listed[0]["turns"] == 2  # the first question
    assert listed[1]["title"].startswith("DeepSpeed 的 ZeRO") and len(listed[1]["title"]) == 80
    assert {s["id"] for s in store.list_sessions("owner-a")} == {a, b, other_browser}
    assert len(store.list_sessions(None)) == 4  # the keyless local user sees all
    assert [s["id"] for s in store.list_sessions("owner-a", "browser-aaaa", "eager MODE")] == [b]  # message text
    assert [s["id"] for s in store.list_sessions("owner-a", text="zero")] == [a]  # title, case-insensitive
    assert [s["id"] for s in store.list_sessions("owner-a", text="100%")] == [b]  # wildcards are literal
    assert store.list_sessions("owner-a", text="1_0") == [] and store.list_sessions("owner-a", text="_") != []
    assert store.list_sessions("owner-a", text="MindSpore") == []  # another key's text is not searched
    # one session by id: the browser its list shows it to, or no browser named; never another browser or key
    assert store.exists(a, "owner-a", "browser-aaaa") and store.exists(a, "owner-a") and store.exists(a, None)
    assert not store.exists(a, "owner-a", "browser-bbbb") and not store.exists(a, None, "browser-bbbb")
    assert not store.exists(other_key, "owner-a", "browser-aaaa")
    assert store.rename(a, "  ZeRO  notes ", "owner-a") and not store.rename(a, "x", "owner-b")
    assert store.get(a, "owner-a")["title"] == "ZeRO notes"
    assert store.list_sessions("owner-a", text="notes")[0]["id"] == a
    assert not store.rename("zz", "x", "owner-a")
    assert store.delete(a, "owner-a") and [s["id"] for s in store.list_sessions("owner-a", "browser-aaaa")] == [b]


def test_the_last_turn_is_replaced_in_place(make: Factory) -> None:
    store = make()
    sid = store.ensure(None, "owner-a")
    store.add_turn(sid, "first?", "one [1].")
    mid = store.add_turn(sid, "second?", "two [1].", {"citations": [{"n": 1}]})
    last = store.last_turn(sid)
    assert last is not None and last["answer_id"] == mid and last["question"] == "second?"
    assert last["answer"] == "two [1]." and last["extra"] == {"citations": [{"n": 1}]}
    store.replace_turn(sid, mid, "second, edited?", "deux [2].", {"alternatives": [{"answer": "two [1]."}]})
    msgs = store.get(sid, "owner-a")["messages"]
    assert [m["content"] for m in msgs] == ["first?", "one [1].", "second, edited?", "deux [2]."]
    assert msgs[-1]["id"] == mid and msgs[-1]["alternatives"] == [{"answer": "two [1]."}]
    assert store.history(sid, 1000)[-1] == {"role": "assistant", "content": "deux [2]."}
    with pytest.raises(UserError):
        store.replace_turn(sid, msgs[0]["id"], "q", "a", {})  # a question is no answer
    assert store.last_turn(store.ensure(None, "owner-a")) is None
    reopened = make()
    assert reopened.last_turn(sid)["question"] == "second, edited?"  # type: ignore[index]


# ---- PostgreSQL's own --------------------------------------------------------------------------------------------
def _sqlite_state(tmp_path: Path) -> tuple[Path, str, str]:
    state = tmp_path / "old-state"
    store = SessionStore(state / "assistant.db")
    sid = store.ensure(None, "owner-a")
    mid = store.add_turn(sid, "DeepSpeed 还是 FSDP？", "看规模 [1]。", {"citations": [{"n": 1}]})
    store.add_feedback(sid, mid, "down", "太短")
    store.add_turn(store.ensure(None), "q", "a")
    store.close()
    return state, sid, mid


def test_db_copy_command_is_idempotent(pg_url: str, tmp_path: Path, capsys) -> None:
    from assistant.cli import main
    from assistant.sessions.postgres import PostgresSessionStore

    state, sid, mid = _sqlite_state(tmp_path)
    password = pg_url.split(":")[2].split("@")[0]
    assert main(["db", "copy", "--from-sqlite", str(state), "--to", pg_url]) == 0
    out = capsys.readouterr().out
    assert "2 sessions, 4 messages, 1 feedback rows added" in out and password not in out and ":***@" in out
    assert main(["db", "copy", "--from-sqlite", str(state), "--to", pg_url, "--json"]) == 0
    assert '"sessions": 0' in capsys.readouterr().out
    pg = PostgresSessionStore(pg_url)
    src = SessionStore(state / "assistant.db")
    try:
        assert counts(pg) == {"sessions": 2, "messages": 4, "feedback": 1}
        assert pg.get(sid, "owner-a") == src.get(sid, "owner-a") and pg.get(sid, "owner-b") is None
        assert pg.has_message(sid, mid, "owner-a")
        later = pg.add_turn(sid, "再问", "再答")  # the copied session goes on in PostgreSQL
        pg.add_feedback(sid, later, "up")
        assert len(pg.get(sid, "owner-a")["feedback"]) == 2
    finally:
        pg.close()
        src.close()
    assert main(["db", "copy", "--from-sqlite", str(tmp_path / "nothing-here"), "--to", pg_url]) == 2
    assert "No sessions database" in capsys.readouterr().err


def test_connection_errors_name_the_server_not_the_password(pg_server) -> None:
    from assistant.sessions.postgres import PostgresSessionStore, redact

    wrong = pg_server.url().replace(pg_server.password, "Wrong-Secret-123")
    with pytest.raises(UserError) as info:
        PostgresSessionStore(wrong)
    err = info.value
    assert err.code == "database_unavailable" and err.status == 503
    assert "Wrong-Secret-123" not in err.en + err.zh and ":***@127.0.0.1" in err.en and "无法使用会话数据库" in err.zh
    assert "password authentication failed" in err.en
    closed = f"postgresql://advisor:Secret-456@127.0.0.1:{pg_server.port + 1}/x"  # nothing listens there
    t0 = time.monotonic()
    with pytest.raises(UserError) as info:
        PostgresSessionStore(closed)
    assert time.monotonic() - t0 < 5 and "Secret-456" not in info.value.en and info.value.code == "database_unavailable"
    with pytest.raises(UserError) as info:
        open_store(load_settings(database_url="mysql://u:p@h/db"))
    assert info.value.code == "bad_database_url" and "p@h" not in info.value.en
    assert redact("postgresql://u:s3cret@h:5/d") == "postgresql://u:***@h:5/d"
    assert redact("postgresql://h/d") == "postgresql://h/d"
    assert "s3cret" not in repr(load_settings(database_url="postgresql://u:s3cret@h/d"))


def test_a_dropped_connection_is_reopened(pg_server, pg_url: str) -> None:
    import psycopg

    from assistant.sessions.postgres import PostgresSessionStore

    store = PostgresSessionStore(pg_url)
    sid = store.ensure(None)
    with psycopg.connect(pg_server.url(user="postgres"), autocommit=True) as admin:
        dbname = pg_url.rsplit("/", 1)[1]
        n = admin.execute("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE datname = %s",
                          (dbname,)).fetchone()[0]
    assert n == 1
    try:
        store.exists(sid)  # may notice the dead connection: a 503 UserError, never a stack trace
    except UserError as exc:
        assert exc.status == 503 and pg_server.password not in exc.en
    assert store.exists(sid)  # the next call connects again
    store.close()


def test_the_api_on_postgresql(scripted_service, pg_server, pg_url: str, monkeypatch) -> None:
    """Ask, continue the session, give feedback, read it back, through the in-process HTTP API, with
    ASSISTANT_DATABASE_URL naming the test PostgreSQL; /readyz is 503 while the database refuses connections;
    a second service (a restart) reads the same rows."""
    import psycopg
    from fastapi.testclient import TestClient

    from assistant.sessions.postgres import PostgresSessionStore
    from ui.server import create_app

    monkeypatch.setenv("ASSISTANT_DATABASE_URL", pg_url)
    svc = scripted_service()
    try:
        assert isinstance(svc.sessions, PostgresSessionStore)
        http = TestClient(create_app(svc, with_ui=False, load=False), base_url="http://127.0.0.1")
        first = http.post("/api/ask", json={"question": "What does DeepSpeed ZeRO partition across GPUs?"})
        assert first.status_code == 200, first.text
        sid = first.json()["session_id"]
        second = http.post("/api/ask", json={"question": "And what does stage 3 add?", "session_id": sid})
        assert second.status_code == 200 and second.json()["session_id"] == sid
        mid = second.json()["message_id"]
        assert http.post("/api/feedback", json={"session_id": sid, "message_id": mid, "rating": "up",
                                                "comment": "good"}).status_code == 200
        sess = http.get(f"/api/sessions/{sid}").json()
        assert [m["role"] for m in sess["messages"]] == ["user", "assistant"] * 2
        assert sess["messages"][2]["content"] == "And what does stage 3 add?" and sess["messages"][3]["id"] == mid
        assert sess["feedback"][0]["message_id"] == mid and sess["feedback"][0]["comment"] == "good"
        # /readyz follows the database: refuse new connections and drop this one, then allow them again
        assert http.get("/readyz").json() == {"status": "ready"}
        dbname = pg_url.rsplit("/", 1)[1]
        with psycopg.connect(pg_server.url(user="postgres"), autocommit=True) as admin:
            admin.execute(f"ALTER DATABASE {dbname} ALLOW_CONNECTIONS false")
            admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s", (dbname,))
            r = http.get("/readyz", headers={"accept-language": "zh"})
            assert r.status_code == 503 and r.json()["error"]["code"] == "database_unavailable", r.text
            assert "无法使用会话数据库" in r.json()["error"]["message"] and pg_server.password not in r.text
            admin.execute(f"ALTER DATABASE {dbname} ALLOW_CONNECTIONS true")
        assert http.get("/readyz").json() == {"status": "ready"}
        assert len(http.get(f"/api/sessions/{sid}").json()["messages"]) == 4
    finally:
        svc.close()
    with psycopg.connect(pg_url) as db:  # the rows are in PostgreSQL, not in a SQLite file
        assert db.execute("SELECT count(*) FROM messages WHERE session_id = %s", (sid,)).fetchone()[0] == 4
    assert not (Path(svc.settings.state_dir) / "assistant.db").exists()
    again = scripted_service()
    try:
        http = TestClient(create_app(again, with_ui=False, load=False), base_url="http://127.0.0.1")
        assert http.get(f"/api/sessions/{sid}").json()["feedback"][0]["rating"] == "up"
        assert http.delete(f"/api/sessions/{sid}").json() == {"deleted": sid}
    finally:
        again.close()
