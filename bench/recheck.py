"""Replay an evaluation run's drafts through the citation check as the code stands: the check stage measured without
the model.

    python bench/recheck.py RUN_DIR GOLD.jsonl [GOLD.jsonl ...] [--index-dir index] [--list]

RUN_DIR is an `assistant eval --out` folder (its results.jsonl keeps each answer's draft, `raw_answer`). Each
single-turn fact case of the gold files that the model answered is planned again on the index as an answer plans it
(`Answerer.check_draft`: the Route, the evidence, the pinned context) and its recorded draft checked again. Printed:
how many answers come out as recorded (the replay's fidelity: all of them on the code that made the run), how many
changed, the key facts in the answers before and after (the evaluator's matcher), and the quote fallbacks. Run it on
the code that made the run first, then with a change to the check (assistant/answer/citations.py, pipeline.check,
evidence.best_sentence). The same index as the run's; the drafts were written for the prompts of the run's code, so
a change to retrieval or evidence makes the replay meaningless. --list prints the changed answers (dev sets only:
eval/test/ is run for its figures).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from assistant.evaluate.dataset import load_set  # noqa: E402
from assistant.evaluate.metrics import fact_present  # noqa: E402
from assistant.service import AssistantService  # noqa: E402
from assistant.settings import load_settings  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run_dir")
    ap.add_argument("gold", nargs="+")
    ap.add_argument("--index-dir", default="index")
    ap.add_argument("--list", action="store_true", help="print the answers that changed (dev sets only)")
    args = ap.parse_args()
    if args.list and any("test" in Path(g).parts for g in args.gold):
        ap.error("--list is for the dev sets: the blind split is run for its figures only")
    facts = {case.id: case.answer_facts for g in args.gold for case in load_set(Path(g)).cases}
    svc = AssistantService(load_settings(index_dir=Path(args.index_dir)))
    same = changed = before = after = total = quotes = 0
    try:
        for line in (Path(args.run_dir) / "results.jsonl").read_text(encoding="utf-8").splitlines():
            r = json.loads(line)
            if r["id"] not in facts or len(r["turns"]) > 1 or r["refused"] or not r.get("raw_answer"):
                continue
            result = svc.answerer.check_draft(r["question"], r["raw_answer"])
            if result is None:
                continue
            wanted = facts[r["id"]]
            b = sum(fact_present(f, r["answer"]) for f in wanted)
            a = sum(fact_present(f, result.text) for f in wanted)
            before, after, total = before + b, after + a, total + len(wanted)
            quotes += result.diagnostics.get("fallback") == "quote"
            if result.text.strip() == r["answer"].strip():
                same += 1
                continue
            changed += 1
            if args.list:
                print(f"{r['id']}: facts {b} -> {a}\n  was: {r['answer']!r}\n  now: {result.text!r}")
    finally:
        svc.close()
    print(f"answers as recorded {same}, changed {changed}; key facts {before} -> {after} of {total}; "
          f"quote fallbacks {quotes}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
