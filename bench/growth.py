"""Growth: retrieval latency and index build throughput at 1k, 10k and 100k chunks.

The corpus is grown synthetically from a real index (corpus + framework-docs): each real chunk is copied
with a variant tag in its text and a slightly perturbed, re-normalised vector, so the vector store and the
BM25 index see realistic data at every size without re-embedding 100k passages. The embedder's own
throughput is measured separately on real chunks (it does not depend on the index size).

    python bench/growth.py --index-dir DIR [--sizes 1000,10000,100000] [--queries 40]
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from assistant.embed import create_embedder  # noqa: E402
from assistant.index.builder import embed_text  # noqa: E402
from assistant.index.keyword import KeywordIndex  # noqa: E402
from assistant.index.snapshot import IndexMeta, IndexSnapshot, write_meta  # noqa: E402
from assistant.index.store import VectorStore  # noqa: E402
from assistant.retrieval import Retriever  # noqa: E402


def grow(base: IndexSnapshot, n: int, rng: np.random.Generator) -> tuple[list, np.ndarray]:
    got = base.store._col.get(include=["embeddings"])  # noqa: SLF001
    vec_of = dict(zip(got["ids"], got["embeddings"], strict=True))
    chunks, vecs = [], []
    i = 0
    while len(chunks) < n:
        c = base.chunks[i % len(base.chunks)]
        copy = i // len(base.chunks)
        v = np.asarray(vec_of[c.id], dtype=np.float32)
        if copy:
            c = replace(c, id=f"{c.id}-{copy}", text=f"{c.text} (variant {copy})")
            v = v + rng.normal(0, 0.02, v.shape).astype(np.float32)
            v /= np.linalg.norm(v)
        chunks.append(c)
        vecs.append(v)
        i += 1
    return chunks, np.vstack(vecs)


def build_gen(chunks: list, vecs: np.ndarray, base_meta: IndexMeta) -> tuple[Path, dict]:
    gen = Path(tempfile.mkdtemp(prefix="growth-"))
    t = time.perf_counter()
    store = VectorStore(gen / "chroma")
    store.add(chunks, vecs)
    store.close()
    t_store = time.perf_counter() - t
    t = time.perf_counter()
    KeywordIndex.build([" ".join([*c.heading_path, *c.frameworks, c.text]) for c in chunks]).save(gen / "bm25")
    t_bm25 = time.perf_counter() - t
    with (gen / "chunks.jsonl").open("w", encoding="utf-8") as f:
        for c in chunks:
            f.write(json.dumps(c.to_dict(), ensure_ascii=False) + "\n")
    write_meta(gen, replace(base_meta, chunks=len(chunks)))
    return gen, {"store_add_per_s": len(chunks) / t_store, "bm25_build_s": t_bm25}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--index-dir", required=True)
    ap.add_argument("--sizes", default="1000,10000,100000")
    ap.add_argument("--queries", type=int, default=40)
    args = ap.parse_args()
    base = IndexSnapshot.open(Path(args.index_dir))
    emb = create_embedder(base.embedder_name, 2)
    questions = [json.loads(x)["question"] for x in (REPO / "bench/data/retrieval.jsonl").read_text().splitlines()
                 if x.strip()][: args.queries]
    sample = base.chunks[:256]
    t = time.perf_counter()
    emb.passages([embed_text(c) for c in sample])
    embed_rate = len(sample) / (time.perf_counter() - t)
    print(f"embedder {emb.name}: {embed_rate:.1f} chunks/s on real chunks (independent of index size)")
    print(f"{'chunks':>8} {'store add/s':>12} {'bm25 build s':>13} {'open s':>7} {'p50 ms':>7} {'p95 ms':>7}")
    rng = np.random.default_rng(0)
    for n in (int(s) for s in args.sizes.split(",")):
        chunks, vecs = grow(base, n, rng)
        gen, build = build_gen(chunks, vecs, base.meta)
        t = time.perf_counter()
        r = Retriever(IndexSnapshot(gen), emb)
        t_open = time.perf_counter() - t
        r.search("warm up", k=5)
        lat = []
        for q in questions:
            t = time.perf_counter()
            r.search(q, k=5)
            lat.append(1000 * (time.perf_counter() - t))
        lat.sort()
        p95 = lat[min(len(lat) - 1, int(0.95 * (len(lat) - 1) + 0.5))]
        print(f"{n:8d} {build['store_add_per_s']:12.0f} {build['bm25_build_s']:13.1f} {t_open:7.1f} "
              f"{statistics.median(lat):7.1f} {p95:7.1f}", flush=True)
        r.snap.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
