"""Two replicas: two real `assistant serve` processes sharing one Chroma server (the index) and one PostgreSQL
(sessions and feedback), each with its own empty index and state directories, so nothing is shared through the
filesystem. A session started on one is continued on the other, both turns are stored and read the same from
both; feedback posted through each lands; `/readyz` follows the remote parts: a replica whose database or Chroma
server stops answering is 503 with a reason naming it, and ready again when Chroma is back.

The index is the two notes of tests/storekit.py (their vectors come from the session's seeded cache, so the build
embeds nothing); the chat model is the plumbing engine (ASSISTANT_BACKEND=scripted: it quotes the first sources
with their [n]), since what is tested is the shared state, not the model. Every process is stopped by its PID."""
from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from chromaserver import ChromaServer, chroma_cli
from httpkit import ServerProcess
from pgserver import PgServer, postgres_bindir
from storekit import Backend, seed

pytestmark = pytest.mark.slow  # three serve processes, a Chroma server and a PostgreSQL of its own (~100 s)


@dataclass
class Cluster:
    chroma: ChromaServer  # halted and restarted by the last test
    backend: Backend
    database_url: str
    a: ServerProcess
    b: ServerProcess
    c: ServerProcess  # on the same Chroma index, but on a PostgreSQL of its own (c_pg), which a test stops
    c_pg: PgServer


def replica(root: Path, name: str, backend: Backend, database_url: str) -> ServerProcess:
    """One `assistant serve` on the shared Chroma index and the given database, with directories of its own."""
    home = root / name
    (home / "docs").mkdir(parents=True)
    return ServerProcess(home / "index", home / "state", root / f"{name}.log",
                         ASSISTANT_BACKEND="scripted", ASSISTANT_MODEL="scripted", ASSISTANT_THREADS="2",
                         ASSISTANT_DOCS=str(home / "docs"), ASSISTANT_CHROMA_URL=backend.url,
                         ASSISTANT_CHROMA_PREFIX=backend.prefix, ASSISTANT_DATABASE_URL=database_url)


def log_tail(srv: ServerProcess) -> str:
    return srv.log_path.read_text(errors="replace")[-3000:] if srv.log_path.is_file() else ""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, seeded_cache: Path, pg_server) -> Iterator[Cluster]:
    cli, bindir = chroma_cli(), postgres_bindir()
    assert bindir is not None  # else pg_server skipped
    if cli is None:
        pytest.skip("the `chroma` CLI is not beside this Python (pip install chromadb)")
    root = tmp_path_factory.mktemp("replicas")
    chroma, own_pg = ChromaServer(cli), PgServer(bindir)  # the module's own: tests stop them
    procs: list[ServerProcess] = []
    try:
        chroma.start()
        own_pg.start()
        backend = Backend("server", root / "builder", chroma.url, "replicas")
        backend.build(seed(backend, seeded_cache))
        url = pg_server.create_database()
        procs = [replica(root, "a", backend, url), replica(root, "b", backend, url),
                 replica(root, "c", backend, own_pg.create_database())]
        for p in procs:
            p.launch()  # all three load side by side
        for p in procs:
            try:
                p.wait_ready()
            except RuntimeError as exc:
                raise RuntimeError(f"{exc}\n{log_tail(p)}") from None
        yield Cluster(chroma, backend, url, *procs, own_pg)
    finally:
        for p in procs:
            p.stop()
        own_pg.stop()
        chroma.stop()


def ask(srv: ServerProcess, question: str, session_id: str | None = None) -> dict:
    body = {"question": question} | ({"session_id": session_id} if session_id else {})
    r = httpx.post(srv.base + "/api/ask", json=body, timeout=120)
    assert r.status_code == 200, r.text
    return r.json()


def session(srv: ServerProcess, session_id: str) -> dict:
    r = httpx.get(f"{srv.base}/api/sessions/{session_id}", timeout=30)
    assert r.status_code == 200, r.text
    return r.json()


def readyz(srv: ServerProcess, lang: str = "en") -> httpx.Response:
    return httpx.get(srv.base + "/readyz", headers={"accept-language": lang}, timeout=30)


def test_both_replicas_are_ready_on_the_shared_index(cluster: Cluster) -> None:
    for srv in (cluster.a, cluster.b):
        r = readyz(srv)
        assert r.status_code == 200 and r.json() == {"status": "ready"}, r.text
        hits = httpx.post(srv.base + "/api/search", json={"query": "ZeRO stage 3 partitions parameters", "k": 2},
                          timeout=60).json()["results"]
        assert hits and hits[0]["source"].endswith("deepspeed.md"), hits
    # neither replica wrote an index of its own: the vectors are in the Chroma server only
    root = cluster.a.log_path.parent
    assert not list((root / "a" / "index").glob("gen-*")) and not list((root / "b" / "index").glob("gen-*"))


def test_a_session_started_on_one_replica_is_continued_on_the_other(cluster: Cluster) -> None:
    first = ask(cluster.a, "What does DeepSpeed ZeRO partition?")
    sid = first["session_id"]
    assert first["citations"], first
    second = ask(cluster.b, "And what does JAX use to compile it?", sid)
    assert second["session_id"] == sid and second["message_id"] != first["message_id"]

    seen = [session(srv, sid) for srv in (cluster.a, cluster.b)]
    assert seen[0] == seen[1]  # the same rows, read through each replica
    msgs = seen[0]["messages"]
    assert [m["role"] for m in msgs] == ["user", "assistant", "user", "assistant"]
    assert msgs[0]["content"] == "What does DeepSpeed ZeRO partition?"
    assert msgs[2]["content"] == "And what does JAX use to compile it?"
    assert [msgs[1]["id"], msgs[3]["id"]] == [first["message_id"], second["message_id"]]
    assert [msgs[1]["content"], msgs[3]["content"]] == [first["answer"], second["answer"]]

    # feedback through each replica, on the other one's answer
    for srv, answer, rating in ((cluster.a, second, "up"), (cluster.b, first, "down")):
        r = httpx.post(srv.base + "/api/feedback", json={"session_id": sid, "message_id": answer["message_id"],
                                                         "rating": rating, "comment": f"via {srv.port}"}, timeout=30)
        assert r.status_code == 200 and r.json() == {"ok": True}, r.text
    want = [(second["message_id"], "up", f"via {cluster.a.port}"), (first["message_id"], "down", f"via {cluster.b.port}")]
    for srv in (cluster.a, cluster.b):
        fb = session(srv, sid)["feedback"]
        assert [(f["message_id"], f["rating"], f["comment"]) for f in fb] == want, fb

    # and it is in PostgreSQL, read through the store's own API (not a replica's)
    from assistant.sessions.postgres import PostgresSessionStore

    store = PostgresSessionStore(cluster.database_url)
    try:
        stored = store.get(sid)
        assert stored is not None and [m["id"] for m in stored["messages"]] == [m["id"] for m in msgs]
        assert len(stored["feedback"]) == 2
    finally:
        store.close()


def test_a_replica_whose_database_goes_away_is_not_ready(cluster: Cluster) -> None:
    """The third replica's own PostgreSQL is stopped: that replica is 503 naming the sessions database (in the
    client's language, without the password), while the replicas on the shared database stay ready."""
    c, pg = cluster.c, cluster.c_pg
    assert readyz(c).status_code == 200
    pg.stop()
    r = readyz(c)
    assert r.status_code == 503, r.text
    body = r.json()
    assert body["status"] == "unavailable" and body["error"]["code"] == "database_unavailable", body
    assert "sessions database" in body["error"]["message"] and pg.password not in r.text
    assert "会话数据库" in readyz(c, "zh").json()["error"]["message"]
    r = httpx.post(c.base + "/api/ask", json={"question": "What does DeepSpeed ZeRO partition?"}, timeout=60)
    assert r.status_code == 503 and r.json()["error"]["code"] == "database_unavailable", r.text
    for srv in (cluster.a, cluster.b):
        assert readyz(srv).status_code == 200


def test_replicas_whose_chroma_server_goes_away_are_not_ready_until_it_is_back(cluster: Cluster) -> None:
    """Last in the module: it stops the shared Chroma server, then starts it again on the same port and data."""
    cluster.chroma.halt()
    try:
        for srv in (cluster.a, cluster.b):
            r = readyz(srv)
            assert r.status_code == 503, r.text
            assert r.json()["error"]["code"] == "chroma_unreachable", r.text
            assert "Chroma server" in r.json()["error"]["message"]
            assert "Chroma 服务没有响应" in readyz(srv, "zh").json()["error"]["message"]
    finally:
        cluster.chroma.start()
    deadline = time.monotonic() + 30
    for srv in (cluster.a, cluster.b):
        while readyz(srv).status_code != 200:
            assert time.monotonic() < deadline, "a replica was not ready again after Chroma came back"
            time.sleep(0.2)
    assert ask(cluster.b, "What does DeepSpeed ZeRO partition?")["citations"]
