"""Issue 33's lever 5, a reranker from the packaged chat model's yes/no logits, scored on the retrieval benchmark
(bench/data/retrieval.jsonl, dev and held-out test splits) against the hybrid ranking it would reorder.

For each question the hybrid's top N passages are read by the model, one at a time after the question (the
question's prefix is evaluated once per question and kept), with "Does this passage contain the answer to the
question? Answer yes or no."; a passage's relevance is log P(yes) - log P(no) at the answer's first token. Printed:
hit@1 / hit@5 per group (all, dev, test, cross-lingual, same-language) for the hybrid, the model's order of the top
N, the fused score mixed with the relevance, and the model's order only where the hybrid is unsure (a small gap
between its first two fused scores); and the model's time per question.

    python bench/llm_rerank.py --index-dir index [--model fast|default] [--top 5] [--chars 700] [--json OUT]
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from retrieval import load_questions, rank_of_hit  # noqa: E402

from assistant.embed import create_embedder  # noqa: E402
from assistant.index.snapshot import IndexSnapshot  # noqa: E402
from assistant.llm.models import prepare_model  # noqa: E402
from assistant.retrieval import Retriever  # noqa: E402
from assistant.settings import load_settings  # noqa: E402

PROMPT = ("<|im_start|>system\nYou judge whether a passage answers a question.<|im_end|>\n"
          "<|im_start|>user\nQuestion: {q}\n\n")
ASK = ("Passage ({head}): {text}\n\nDoes this passage contain the answer to the question? Answer yes or no."
       "<|im_end|>\n<|im_start|>assistant\n")


def answer_tokens(llm) -> tuple[list[int], list[int]]:
    """The first tokens of "yes"/"Yes" and of "no"/"No"."""
    first = [llm.tokenize(w.encode(), add_bos=False, special=False)[0] for w in ("yes", "Yes", "no", "No")]
    return first[:2], first[2:]


def relevance(llm, answers: tuple[list[int], list[int]], question: str, passages: list[tuple[str, str]]) -> list[float]:
    """log P(yes) - log P(no) for each (heading, text) after the question, the question's tokens evaluated once."""
    yes, no = answers
    prefix = llm.tokenize(PROMPT.format(q=question).encode(), add_bos=False, special=True)
    llm.reset()
    llm.eval(prefix)
    out = []
    for head, text in passages:
        llm.n_tokens = len(prefix)  # back to the question's prefix; its KV cells stay
        llm.eval(llm.tokenize(ASK.format(head=head, text=text).encode(), add_bos=False, special=True))
        logits = np.ctypeslib.as_array(llm._ctx.get_logits(), shape=(llm.n_vocab(),))
        out.append(float(np.logaddexp.reduce(logits[yes]) - np.logaddexp.reduce(logits[no])))
    return out


def report(name: str, order: Callable[[dict], list[str]], rows: list[dict]) -> dict:
    groups: dict[str, list[int]] = {}
    for r in rows:
        srcs = order(r)
        rank = rank_of_hit(srcs, r["targets"])
        hit = [rank is not None and rank <= k for k in (1, 5)]
        for g in ("all", r["split"], "cross" if r["cross"] else "same"):
            a = groups.setdefault(g, [0, 0, 0])
            a[0] += 1
            a[1] += hit[0]
            a[2] += hit[1]
    figures = {g: {"hit@1": round(a[1] / a[0], 3), "hit@5": round(a[2] / a[0], 3)} for g, a in sorted(groups.items())}
    print(f"{name:30s}", "  ".join(f"{g} {f['hit@1']:.3f}/{f['hit@5']:.3f}" for g, f in figures.items()))
    return figures


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--index-dir", default=str(REPO / "index"))
    ap.add_argument("--model", default="fast")
    ap.add_argument("--top", type=int, default=5)
    ap.add_argument("--chars", type=int, default=700)
    ap.add_argument("--json")
    args = ap.parse_args()
    from llama_cpp import Llama

    settings = load_settings()
    snap = IndexSnapshot.open(Path(args.index_dir))
    retriever = Retriever(snap, create_embedder(settings.embedder, 2))
    llm = Llama(model_path=str(prepare_model(args.model, settings.cache_dir)), n_ctx=2048, n_threads=2,
                n_batch=512, verbose=False)
    answers = answer_tokens(llm)
    rows = []
    for q in load_questions(REPO / "bench/data/retrieval.jsonl", "all"):
        hits = retriever.search(q["question"], k=max(args.top, 5))
        t0 = time.perf_counter()
        rel = relevance(llm, answers, q["question"], [(" > ".join(h.chunk.heading_path[-2:]),
                                                        " ".join(h.chunk.text.split())[:args.chars])
                                                       for h in hits[:args.top]])
        rows.append({"id": q["id"], "split": q["split"], "cross": bool(q.get("cross_lingual")),
                     "targets": q["source_files"], "sources": [h.chunk.source for h in hits],
                     "fused": [h.score for h in hits], "rel": rel, "s": time.perf_counter() - t0})
    n = args.top

    def by(score: Callable[[dict, int], float]) -> Callable[[dict], list[str]]:
        return lambda r: [r["sources"][i] for i in sorted(range(n), key=lambda i: -score(r, i))] + r["sources"][n:]

    result = {"hybrid": report("hybrid", lambda r: r["sources"], rows),
              "model order": report(f"model's order of the top {n}", by(lambda r, i: r["rel"][i]), rows)}
    for w in (5, 10, 20, 40):
        result[f"fused*{w}+rel"] = report(f"fused x {w} + relevance", by(lambda r, i, w=w: w * r["fused"][i] + r["rel"][i]), rows)
    unsure = by(lambda r, i: r["rel"][i])
    for gap in (0.01, 0.02, 0.05):
        result[f"gap<{gap}"] = report(f"model's order if gap < {gap}",
                                      lambda r, g=gap: r["sources"] if r["fused"][0] - r["fused"][1] >= g else unsure(r), rows)
    p50 = statistics.median(r["s"] for r in rows)
    print(f"model time per question p50 {p50:.2f} s, p95 {sorted(r['s'] for r in rows)[int(0.95 * len(rows)) - 1]:.2f} s "
          f"({args.model}, top {n}, {args.chars} characters a passage)")
    if args.json:
        Path(args.json).write_text(json.dumps({"figures": result, "seconds_p50": p50, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
