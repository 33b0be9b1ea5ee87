"""Uploaded documents through the real HTTP API (issue 19 items 3 and 4): the real app around a real service (real
embedder, real Chroma, real incremental builds in a copy of the corpus index in a temp dir) whose chat model is
ScriptedChatModel (it quotes its sources with [n]). Upload -> job done -> searched, filtered, used and cited ->
listed -> survives `assistant index build` -> deleted -> gone; the refusals (type, size, count, a broken PDF, no
key when keys are on) and a job that fails leave the index as it was; /api/search?explain=true."""
from __future__ import annotations

import json
import shutil
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from httpkit import error_of

from assistant.index.snapshot import current_generation
from ui.server import create_app

REPO = Path(__file__).resolve().parents[1]
DOC = """# Zorblax cluster guide

Our Zorblax cluster trains with DeepSpeed ZeRO-3 on 64 nodes. Jobs go to the queue named quasar-7, and
checkpoints are written to the shared volume every 30 minutes.

## Requesting GPUs

Ask the platform team in the #zorblax-help channel; a request for more than 16 nodes needs a quasar-7 reservation.
"""
QUESTION = "Which queue do Zorblax cluster jobs go to?"


def make_service(index_dir: Path, state_dir: Path, **over):
    from assistant.llm.scripted import ScriptedChatModel, quote_sources
    from assistant.service import AssistantService
    from assistant.settings import load_settings

    settings = load_settings(index_dir=index_dir, state_dir=state_dir, model="scripted", backend="scripted",
                             docs=[str(REPO / "corpus")], **over)
    svc = AssistantService(settings, chat_model=ScriptedChatModel(quote_sources))
    svc.load(warm=True)
    return svc


@pytest.fixture(scope="module")
def own_index(corpus_index: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the session's corpus index: the uploads here must not reach the other modules' index."""
    dst = tmp_path_factory.mktemp("doc-index") / "index"
    shutil.copytree(corpus_index, dst)
    return dst


@pytest.fixture(scope="module")
def service(own_index: Path, tmp_path_factory: pytest.TempPathFactory):
    svc = make_service(own_index, tmp_path_factory.mktemp("doc-state"), max_upload_bytes=50_000, max_uploads=3)
    yield svc
    svc.close()


@pytest.fixture(scope="module")
def http(service) -> Iterator[TestClient]:
    yield TestClient(create_app(service, with_ui=False, load=False), base_url="http://127.0.0.1")


def wait_job(http: TestClient, job_id: str, timeout: float = 120) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        job = http.get(f"/api/jobs/{job_id}").json()
        assert job["status"] in ("queued", "running", "done", "failed"), job
        if job["status"] in ("done", "failed"):
            return job
        time.sleep(0.1)
    raise AssertionError(f"job {job_id} not finished in {timeout} s")


def upload(http: TestClient, name: str, data: bytes, **kw):
    return http.post("/api/documents", files={"file": (name, data)}, **kw)


def test_upload_search_cite_list_delete(http: TestClient, service, own_index: Path) -> None:
    before = current_generation(own_index)
    chunks_before = len(service.retriever.snap.chunks)
    # a searcher running through the job: every answer sees none or all of the document's chunks
    seen: list[int] = []
    stop = threading.Event()

    def searcher() -> None:
        while not stop.is_set():
            hits = service.search("Zorblax cluster quasar-7", k=50, filters={"kind": "upload"})
            seen.append(len({h.chunk.id for h in hits}))

    t = threading.Thread(target=searcher)
    t.start()
    try:
        r = upload(http, "zorblax-guide.md", DOC.encode())
        assert r.status_code == 202, r.text
        doc_id, job_id = r.json()["document_id"], r.json()["job_id"]
        job = wait_job(http, job_id)
        time.sleep(0.3)
    finally:
        stop.set()
        t.join()
    assert set(seen) <= {0, job["total"]} and seen[-1] == job["total"], seen
    assert job["status"] == "done" and job["reason"] == "", job
    assert job["total"] >= 1 and job["done"] == job["total"] and job["document_id"] == doc_id
    assert current_generation(own_index) != before  # a new generation went live

    # searched: the top passage, and the only kind "only my documents" gives
    res = http.post("/api/search", json={"query": "Zorblax cluster quasar-7 queue", "k": 5}).json()["results"]
    assert res[0]["path"].startswith(f"uploads/{doc_id}/zorblax-guide.md"), res[0]
    assert res[0]["date"], "an uploaded passage says when it was added"
    mine = http.post("/api/search", json={"query": "DeepSpeed ZeRO", "k": 5, "filters": {"kind": "upload"}}).json()
    assert mine["results"] and all(x["path"].startswith("uploads/") for x in mine["results"])
    corpus = http.post("/api/search", json={"query": "Zorblax cluster quasar-7 queue", "k": 5,
                                            "filters": {"kind": "corpus"}}).json()["results"]
    assert corpus and not any(x["path"].startswith("uploads/") for x in corpus)

    # used and cited by an answer
    ans = http.post("/api/ask", json={"question": QUESTION}).json()
    assert not ans["refused"], ans
    assert any(c["source"].startswith(f"uploads/{doc_id}/") for c in ans["citations"]), ans["citations"]
    from ui.web import sources_html  # the chat's sources panel marks the passages from the user's documents

    hits = service.search(QUESTION, k=3)
    assert hits[0].chunk.kind == "upload" and sources_html(hits, "zh").count("我的文档") == sum(
        h.chunk.kind == "upload" for h in hits)

    # listed, with the corpus files beside it
    docs = http.get("/api/documents").json()["documents"]
    mine_listed = [d for d in docs if d["id"] == doc_id]
    assert len(mine_listed) == 1
    d = mine_listed[0]
    assert d["name"] == "zorblax-guide.md" and d["kind"] == "upload" and d["chunks"] == job["total"]
    assert d["size"] == len(DOC.encode()) and d["added"] and d["status"] == "indexed"
    assert any(x["kind"] == "corpus" and x["name"].startswith("corpus/") for x in docs)
    assert [x["id"] for x in http.get("/api/documents?kind=upload").json()["documents"]] == [doc_id]
    assert len(service.retriever.snap.chunks) == chunks_before + job["total"]

    # survives `assistant index build` (the CLI over the same index and state dirs)
    from assistant.cli import main

    mp = pytest.MonkeyPatch()
    mp.setenv("ASSISTANT_STATE_DIR", str(service.settings.state_dir))
    mp.setenv("ASSISTANT_DOCS", str(REPO / "corpus"))
    try:
        assert main(["index", "build", "--index-dir", str(own_index), "--no-progress"]) == 0
    finally:
        mp.undo()
    res = http.post("/api/search", json={"query": "Zorblax cluster quasar-7 queue", "k": 3}).json()["results"]
    assert res[0]["path"].startswith(f"uploads/{doc_id}/")

    # deleted: gone from the index, the list and the disk
    r = http.delete(f"/api/documents/{doc_id}")
    assert r.status_code == 200 and r.json()["deleted"] == doc_id, r.text
    res = http.post("/api/search", json={"query": "Zorblax cluster quasar-7 queue", "k": 10}).json()["results"]
    assert not any(x["path"].startswith("uploads/") for x in res)
    assert http.get("/api/documents?kind=upload").json()["documents"] == []
    assert len(service.retriever.snap.chunks) == chunks_before
    assert not (Path(service.settings.state_dir) / "uploads" / doc_id).exists()
    assert http.delete(f"/api/documents/{doc_id}").status_code == 404


def test_refusals_in_the_users_language(http: TestClient, service, own_index: Path) -> None:
    gen = current_generation(own_index)
    r = upload(http, "model.bin", b"\x00\x01binary", headers={"accept-language": "zh-CN"})
    assert r.status_code == 415 and "不支持该文件类型" in error_of(r)["message"]
    r = upload(http, "huge.md", b"# big\n" + b"x" * 60_000)
    assert r.status_code == 413 and error_of(r)["code"] == "upload_too_large" and "huge.md" in error_of(r)["message"]
    r = upload(http, "huger.md", b"x" * 300_000)  # over the body limit itself: refused before it is read
    assert r.status_code == 413 and error_of(r)["code"] == "upload_too_large"
    r = upload(http, "broken.pdf", b"%PDF-1.4\n1 0 obj << /Type /Catalog >>\ngarbage")
    err = error_of(r)
    assert r.status_code == 422 and err["code"] == "unreadable_upload", r.text
    assert "broken.pdf" in err["message"] and "PDF" in err["message"]
    r = upload(http, "broken.pdf", b"%PDF-1.4 garbage", headers={"accept-language": "zh"})
    assert "broken.pdf 无法读取" in error_of(r)["message"]
    r = upload(http, "empty.txt", b"  \n")
    assert r.status_code == 422 and error_of(r)["code"] == "empty_upload"
    r = http.post("/api/documents", json={"file": "x"})
    assert r.status_code == 422
    assert http.get("/api/jobs/" + "0" * 32).status_code == 404
    assert http.delete("/api/documents/" + "0" * 32).status_code == 404
    bad = http.post("/api/search", json={"query": "ZeRO", "filters": {"kind": "mine"}})
    assert bad.status_code == 422
    assert current_generation(own_index) == gen  # nothing refused reached the index
    assert http.get("/api/documents?kind=upload").json()["documents"] == []


def test_count_limit_and_duplicates(http: TestClient, service) -> None:
    ids = []
    for i in range(3):
        r = upload(http, f"note-{i}.txt", f"Team note {i}: the Velkor rack {i} has eight accelerators.".encode())
        assert r.status_code == 202, r.text
        ids.append(r.json()["document_id"])
        if i == 0:
            dup = upload(http, "again.txt", b"Team note 0: the Velkor rack 0 has eight accelerators.")
            assert dup.status_code == 409 and error_of(dup)["code"] == "duplicate_upload"
    r = upload(http, "one-more.txt", b"Team note: one more than allowed.")
    assert r.status_code == 409 and error_of(r)["code"] == "too_many_uploads"
    deadline = time.monotonic() + 120
    while service.documents.pending() and time.monotonic() < deadline:
        time.sleep(0.1)
    for i in ids:
        assert http.delete(f"/api/documents/{i}").status_code == 200


class _FailingEmbedder:
    """The real embedder for queries, failing for passages: an indexing job that breaks half way."""

    def __init__(self, real) -> None:
        self._real = real

    def __getattr__(self, name: str):
        return getattr(self._real, name)

    def passages(self, texts):
        raise OSError(28, "No space left on device")


def test_a_failed_upload_leaves_the_index_as_it_was(http: TestClient, service, own_index: Path) -> None:
    gen = current_generation(own_index)
    real = service.embedder
    service.engines._embedder = _FailingEmbedder(real)
    try:
        r = upload(http, "doomed.md", b"# Doomed\n\nThe Hexapod storage array keeps nine replicas of every shard.")
        assert r.status_code == 202
        job = wait_job(http, r.json()["job_id"])
    finally:
        service.engines._embedder = real
    assert job["status"] == "failed" and "disk" in job["reason"].lower(), job
    assert current_generation(own_index) == gen
    assert http.get("/api/documents?kind=upload").json()["documents"] == []
    assert not any(p.is_dir() for p in (Path(service.settings.state_dir) / "uploads").iterdir())
    res = http.post("/api/search", json={"query": "Hexapod storage array replicas", "k": 5}).json()["results"]
    assert not any(x["path"].startswith("uploads/") for x in res)


def test_reindex_on_demand(http: TestClient) -> None:
    r = http.post("/api/documents/reindex")
    assert r.status_code == 202
    assert wait_job(http, r.json()["job_id"])["status"] == "done"


def test_search_explain(http: TestClient) -> None:
    r = http.post("/api/search?explain=true", json={"query": "ZeRO optimizer state partitioning", "k": 3})
    assert r.status_code == 200, r.text
    body = r.json()
    assert "zero" in body["terms"] and "optimizer" in body["terms"]
    for x in body["results"]:
        e = x["explain"]
        assert set(e["matched_terms"]) <= set(body["terms"])
        assert e["dense_weight"] in (0.2, 0.5)  # RetrievalParams: same language, other language
        assert abs(e["keyword_saturated"] - x["keyword"] / (x["keyword"] + 8.0)) < 1e-5
        assert abs(e["adjustment"]) <= 0.17  # the framework boost/penalty and the article boost at most
        fused = e["dense_weight"] * x["dense"] + (1 - e["dense_weight"]) * e["keyword_saturated"] + e["adjustment"]
        assert abs(fused - x["score"]) < 1e-4
        assert bool(e["matched_terms"]) == (x["keyword"] > 0)  # a keyword score means some term matched
    assert any(e for x in body["results"] for e in x["explain"]["matched_terms"])
    plain = http.post("/api/search", json={"query": "ZeRO optimizer state partitioning", "k": 3}).json()
    assert "explain" not in plain["results"][0] or plain["results"][0]["explain"] is None
    assert [x["chunk_id"] for x in plain["results"]] == [x["chunk_id"] for x in body["results"]]


def test_uploads_need_a_key_when_keys_are_on(own_index: Path, tmp_path: Path) -> None:
    key = "k-" + "7" * 30
    svc = make_service(own_index, tmp_path, api_keys=key)
    try:
        http = TestClient(create_app(svc, with_ui=False, load=False), base_url="http://127.0.0.1")
        r = upload(http, "team.md", DOC.encode())
        assert r.status_code == 401 and error_of(r)["code"] == "unauthorized"
        assert http.get("/api/documents").status_code == 401
        ok = upload(http, "bad.exe", b"MZ", headers={"authorization": f"Bearer {key}"})
        assert ok.status_code == 415  # the key lets it through to the checks
    finally:
        svc.close()


def test_cli_documents_add_list_delete(own_index: Path, tmp_path: Path, capsys, monkeypatch) -> None:
    from assistant.cli import main

    for k, v in {"ASSISTANT_BACKEND": "scripted", "ASSISTANT_MODEL": "scripted", "ASSISTANT_DOCS": str(REPO / "corpus")}.items():
        monkeypatch.setenv(k, v)
    f = tmp_path / "velkor.txt"
    f.write_text("Velkor rack notes\n\nThe Velkor rack has eight accelerators and a 400G fabric.\n", encoding="utf-8")
    common = ["--index-dir", str(own_index), "--state-dir", str(tmp_path / "state")]
    assert main(["documents", *common, "add", str(f)]) == 0
    doc_id = capsys.readouterr().out.split()[0]
    assert main(["documents", *common, "list", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [(d["id"], d["name"], d["kind"]) for d in listed] == [(doc_id, "velkor.txt", "upload")]
    assert main(["documents", *common, "add", str(tmp_path / "missing.md")]) == 2
    assert main(["documents", *common, "delete", doc_id]) == 0
    capsys.readouterr()
    assert main(["documents", *common, "list", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == []
