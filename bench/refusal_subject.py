"""The refusal decision alone (assistant/answer/policy.py `decide`, no model) over each question's retrieved
passages, per question set: how many are refused, and how many of them only by the subject check (a near-domain
question: another framework, another product of a vendor, a device the documents never name).

    python bench/refusal_subject.py --index-dir DIR [--known] [--list] FILE.jsonl [FILE.jsonl ...]

The passages and the pinned article's closeness to the question are the answer path's (`Answerer.retrieve`, then
`Retrieval.closeness`): with the twin's reading once its translations are on disk (as the product reads it; the
chat model is loaded for its tokenizer and name, nothing is generated), with pinned context on (the default);
--no-pinned decides on the retrieved passages alone.
--known gives the decision the index's vocabulary (Retriever.knows: a name the documents hold anywhere is not a
missing subject). --list prints the questions whose decision the subject check changed: do not use it on the blind
split (eval/test/), which is run only to report a figure.
The question of a multi-turn case is its last turn, rewritten as the router rewrites follow-ups (from the earlier
user turns; no stored turn here), its kind by the router's wording rules (no classifier).
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from assistant.answer.policy import RefusalThresholds, decide, strip_injection  # noqa: E402
from assistant.lang import detect_language  # noqa: E402
from assistant.route import SELECTION, kind_of, standalone_question  # noqa: E402
from assistant.service import AssistantService  # noqa: E402
from assistant.settings import load_settings  # noqa: E402


def question_of(row: dict) -> str:
    turns = row.get("turns") or [row["question"]]
    q = strip_injection(turns[-1]) or turns[-1]
    return standalone_question(q, None, list(turns[:-1]))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("files", nargs="+")
    ap.add_argument("--index-dir", required=True, help="an index of corpus/ + ../shared/framework-docs")
    ap.add_argument("--k", type=int, default=5)
    ap.add_argument("--known", action="store_true", help="give the decision the index's vocabulary")
    ap.add_argument("--list", action="store_true", help="print the questions the subject check refused")
    ap.add_argument("--no-pinned", action="store_true", help="ignore the pinned article (pinned_context off)")
    ap.add_argument("--json", help="write the figures to this JSON file")
    args = ap.parse_args()
    svc = AssistantService(load_settings(index_dir=Path(args.index_dir), pinned_context=not args.no_pinned))
    retriever = svc.retriever
    known = retriever.knows if args.known else None
    out = {}
    for f in args.files:
        rows = [json.loads(line) for line in Path(f).read_text(encoding="utf-8").splitlines() if line.strip()]
        refused = by_scores = 0
        ms: list[float] = []
        for row in rows:
            q = question_of(row)
            found = svc.answerer.retrieve(q, detect_language(q), k=args.k)
            hits = found.hits
            t = time.perf_counter()
            close = max(found.closeness(q), default=0.0)
            d = decide(q, hits, known=known, choosing=kind_of(q, q, detect_language(q))[0] == SELECTION, pinned_dense=close)
            ms.append((time.perf_counter() - t) * 1000)
            base = decide(q, hits, RefusalThresholds(subject_check=False), pinned_dense=close)
            refused += d.refuse
            by_scores += base.refuse
            if args.list and d.refuse and not base.refuse:
                print(f"  {row['id']}: missing {list(d.missing)} | {q}")
        out[Path(f).name] = {"n": len(rows), "refused": refused, "refused_by_scores_alone": by_scores,
                             "decide_p50_ms": round(statistics.median(ms), 2)}
        print(f"{Path(f).name}: {len(rows)} questions, refused {refused} (by the scores alone {by_scores}); "
              f"decision p50 {statistics.median(ms):.2f} ms", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps({"known": args.known, "pinned": not args.no_pinned, "k": args.k, "sets": out}, indent=1),
                                   encoding="utf-8")
    svc.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
