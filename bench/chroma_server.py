"""Retrieval latency with the index on a Chroma server against embedded Chroma, at the current index size and
at grown sizes (100k chunks), on one machine.

For each size the same chunks and vectors (no re-embedding: the real index's, grown for larger sizes by
bench/growth.py's `grow`, copies with perturbed re-normalised vectors) are written as one generation to both
backends: an embedded generation directory, and a generation on a `chroma run` server started here on a free
loopback port (tests/chromaserver.py) and stopped by PID. Measured for each: writing the generation, opening it
(snapshot: chunks, BM25, all vectors into memory), the dense candidate query alone (`VectorStore.query`, 40
candidates, the one call a search makes to Chroma), the whole hybrid search (query embedding included), whether both return the same top 5, and on
the server the live-pointer read a replica makes at most once a second.

    nice -n 19 python bench/chroma_server.py --index-dir DIR [--sizes current,100000] [--queries 40] [--json OUT]
"""
from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))
sys.path.insert(0, str(REPO / "tests"))

from chromaserver import ChromaServer, chroma_cli  # noqa: E402
from growth import build_gen, grow  # noqa: E402

from assistant.embed import create_embedder  # noqa: E402
from assistant.index.server import ServerIndex  # noqa: E402
from assistant.index.snapshot import IndexSnapshot  # noqa: E402
from assistant.retrieval import Retriever  # noqa: E402


def percentiles(ms: list[float]) -> dict[str, float]:
    ms = sorted(ms)
    return {"p50": round(statistics.median(ms), 2), "p95": round(ms[min(len(ms) - 1, int(0.95 * (len(ms) - 1) + 0.5))], 2)}


def timed(fn: Any, items: list[Any]) -> dict[str, float]:
    fn(items[0])  # warm-up
    out = []
    for x in items:
        t = time.perf_counter()
        fn(x)
        out.append(1000 * (time.perf_counter() - t))
    return percentiles(out)


def measure(r: Retriever, questions: list[str], qvecs: list[np.ndarray]) -> dict[str, Any]:
    return {"dense_query_ms": timed(lambda v: r.snap.store.query(v, r.params.candidates), qvecs),
            "hybrid_search_ms": timed(lambda q: r.search(q, k=5), questions),
            "top5": [[h.chunk.id for h in r.search(q, k=5)] for q in questions]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--index-dir", required=True)
    ap.add_argument("--sizes", default="current,100000")
    ap.add_argument("--queries", type=int, default=40)
    ap.add_argument("--json")
    args = ap.parse_args()
    base = IndexSnapshot.open(Path(args.index_dir))
    emb = create_embedder(base.embedder_name, 2)
    questions = [json.loads(x)["question"] for x in (REPO / "bench/data/retrieval.jsonl").read_text().splitlines()
                 if x.strip()][: args.queries]
    qvecs = [emb.query(q) for q in questions]
    cli = chroma_cli()
    if cli is None:
        print("the `chroma` CLI is not beside this Python", file=sys.stderr)
        return 2
    srv = ChromaServer(cli).start()
    print(f"Chroma server on port {srv.port}, started in {srv.start_seconds:.1f} s; {len(questions)} queries")
    results: list[dict[str, Any]] = []
    rng = np.random.default_rng(0)
    try:
        for size in args.sizes.split(","):
            n = len(base.chunks) if size == "current" else int(size)
            chunks, vecs = grow(base, n, rng)
            row: dict[str, Any] = {"chunks": n}
            gen, built = build_gen(chunks, vecs, base.meta)
            row["embedded_write_s"] = round(n / built["store_add_per_s"] + built["bm25_build_s"], 1)
            t = time.perf_counter()
            r = Retriever(IndexSnapshot(gen), emb)
            row["embedded_open_s"] = round(time.perf_counter() - t, 1)
            row["embedded"] = measure(r, questions, qvecs)
            r.snap.close()
            shutil.rmtree(gen, ignore_errors=True)

            index = ServerIndex(srv.url, f"bench{n}")
            t = time.perf_counter()
            name, store = index.new_generation()
            for i in range(0, n, 1000):
                store.add(chunks[i : i + 1000], vecs[i : i + 1000], with_texts=True, first_row=i)
            index.publish(name, base.meta)
            row["server_write_s"] = round(time.perf_counter() - t, 1)
            t = time.perf_counter()
            r = Retriever(index.snapshot(name), emb)
            row["server_open_s"] = round(time.perf_counter() - t, 1)
            row["server"] = measure(r, questions, qvecs)
            row["server"]["pointer_read_ms"] = timed(lambda _x, ix=index: ix.live(fresh=True), list(range(40)))
            a, b = row["embedded"].pop("top5"), row["server"].pop("top5")
            row["same_top5"] = f"{sum(x == y for x, y in zip(a, b, strict=True))}/{len(a)}"  # the same ranked ids
            index.drop(name)
            results.append(row)
            print(json.dumps(row), flush=True)
    finally:
        srv.stop()
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
