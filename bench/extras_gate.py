"""Which retrieved passages follow the pinned article in the user's turn (answer/pipeline.py `extra_hits`), decided
without the model, per question: does the turn get passages of other documents, and do the facts the question asks
for need them?

    python bench/extras_gate.py [--margins 0,0.05,0.1] FILE.jsonl [FILE.jsonl ...]

A question "needs extras" when some fact it asks for (`answer_facts`, alternatives split by |) is not in the pinned
passages' text; it "is served" when the turn's extra passages hold every such fact. An extra passage the question
does not need is a distraction: the 1.5B model answers from the passage next to the question, and each one costs
prefill time. The rules:
  rank          passages ranked above the best pinned one: what answers use (pipeline.extra_hits), the pinned
                passages ranked as the better of their own words and their twin's in the question's language
                (Retriever.search `readings`)
  rank-own      the same, the pinned passages ranked on their own words alone
  rank+own@m    rank-own, and at most m less close to the question (cosine) than the closest pinned passage in the
                passage's language, the pinned ones read in their own words only
  rank+twin@m   the same, the pinned ones also read in the question's language through their twin (its
                translations are made on first use, as the product makes them: minutes with the default model)
  dense+m       closer than every pinned passage (either reading) by m, whatever the rank
The closeness rules were measured with the model and not kept: docs/pinned-context.md, item 2.
Columns: questions needing a fact the article lacks (`need`), those served, those needing one that get no passage
(`no extras`), questions given passages they do not need (`needless`), and questions whose turn gets no passage at all
(`none`: those skip the evidence's prefill, about 6 s with the 1.5B model on 2 cores).
It reads the index and the settings as the product does (ASSISTANT_* variables, default `make run`'s).
Use dev files only (eval/*.jsonl): with --list it prints the questions each rule gets wrong.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import numpy as np  # noqa: E402

from assistant.answer.pipeline import extra_hits  # noqa: E402
from assistant.answering.twin import LANGUAGES  # noqa: E402
from assistant.evaluate.metrics import fact_present  # noqa: E402
from assistant.lang import detect_language  # noqa: E402
from assistant.lexicon import refers_to_article  # noqa: E402
from assistant.service import AssistantService  # noqa: E402
from assistant.settings import load_settings  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("files", nargs="+")
    ap.add_argument("--k", type=int, default=5)
    ap.add_argument("--margins", default="0,0.05,0.1")
    ap.add_argument("--list", action="store_true", help="print the questions each rule gets wrong")
    args = ap.parse_args()
    svc = AssistantService(load_settings())
    retriever = svc.retriever
    ctx = svc.pinned_context(retriever.snap)
    pinned_text = "\n".join(c.text for c in ctx.chunks)
    rows = [json.loads(line) for f in args.files for line in Path(f).read_text(encoding="utf-8").splitlines()
            if line.strip()]
    rows = [r for r in rows if r.get("answer_facts") and r.get("question")]
    margins = [float(m) for m in args.margins.split(",")]
    rules = ["rank", "rank-own", *[f"rank+own@{m:g}" for m in margins], *[f"rank+twin@{m:g}" for m in margins],
             *[f"dense+{m:g}" for m in margins]]
    tally = {r: {"needless": 0, "missing": 0, "served": 0, "need": 0, "n": 0, "none": 0} for r in rules}
    twins = {lang: svc.pinned_context(retriever.snap, lang) for lang in LANGUAGES}
    vectors = {lang: svc.embedder.passages(list(t.texts)) for lang, t in twins.items() if t.lang}
    for row in rows:
        q = row["question"]
        lang = detect_language(q)
        hits_own = retriever.search(q, k=args.k)
        hits = svc.answer_hits(q, k=args.k)  # the answer path's ranking: the pinned passages' twin read too
        missing = [f for f in row["answer_facts"] if not fact_present(f, pinned_text)]
        own: dict[str, float] = {}  # the closest pinned passage in each language, in its own words
        for c, sim in zip(ctx.chunks, retriever.similarities(q, ctx.chunks), strict=True):
            own[c.language] = max(own.get(c.language, -1.0), sim)
        both = dict(own)
        if lang in vectors:  # and in the question's language, through the twin
            qvec = retriever.query_vector(q)
            both[lang] = max(both.get(lang, -1.0), float(np.max(vectors[lang] @ qvec)))
        ranked = extra_hits(hits, ctx, refers_to_article(q))
        ranked_own = extra_hits(hits_own, ctx, refers_to_article(q))
        closest_pinned = max(both.values())
        for rule in rules:
            if rule == "rank":
                extras = ranked
            elif rule == "rank-own":
                extras = ranked_own
            elif rule.startswith("rank+"):
                m = float(rule.split("@")[1])
                closest = own if rule.startswith("rank+own") else both
                extras = [h for h in ranked_own if h.dense > closest.get(h.chunk.language, -1.0) - m]
            else:
                m = float(rule.split("+")[1])
                extras = [h for h in hits_own if not ctx.holds(h.chunk) and h.dense > closest_pinned + m]
            text = "\n".join(h.chunk.text for h in extras)
            t = tally[rule]
            t["n"] += 1
            t["none"] += not extras
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
    print(f"{'rule':<15} {'questions':>9} {'need':>5} {'served':>7} {'no extras':>10} {'needless':>9} {'none':>5}")
    for rule, t in tally.items():
        print(f"{rule:<15} {t['n']:>9} {t['need']:>5} {t['served']:>7} {t['missing']:>10} {t['needless']:>9} "
              f"{t['none']:>5}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
