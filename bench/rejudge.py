"""Judge an evaluation run's recorded answers again with the evaluator as it stands: the citation recall and
precision (ALCE, the support judge) of every answer, without the model.

    python bench/rejudge.py RUN_DIR [--index-dir index]

RUN_DIR is an `assistant eval --out` folder; the index must be the run's (each citation's passage is read by its
chunk id, as the run read it). Printed: the answers scored, the mean citation recall and precision as recorded and as
judged now, and how many answers' scores changed. Run it when the judge or the way an answer is cut into claims
changes (assistant/evaluate/judge.py, runner.answer_sentences), so runs made before and after compare.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from assistant.embed import create_embedder  # noqa: E402
from assistant.evaluate import metrics as M  # noqa: E402
from assistant.evaluate.judge import SupportJudge  # noqa: E402
from assistant.evaluate.runner import answer_sentences, premise  # noqa: E402
from assistant.index.snapshot import IndexSnapshot  # noqa: E402
from assistant.settings import load_settings  # noqa: E402


def _mean(xs: list[float]) -> float:
    return sum(xs) / len(xs) if xs else float("nan")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run_dir")
    ap.add_argument("--index-dir", default="index")
    args = ap.parse_args()
    settings = load_settings(index_dir=Path(args.index_dir))
    snap = IndexSnapshot.open(settings.index_dir)
    judge = SupportJudge(create_embedder(settings.embedder, settings.threads))
    was: dict[str, list[float]] = {"recall": [], "precision": []}
    now: dict[str, list[float]] = {"recall": [], "precision": []}
    changed = missing = 0
    for line in (Path(args.run_dir) / "results.jsonl").read_text(encoding="utf-8").splitlines():
        r = json.loads(line)
        before = (r["metrics"].get("citation_recall"), r["metrics"].get("citation_precision"))
        if r["refused"] or before[0] is None:
            continue
        chunks = {c["n"]: snap.by_id.get(c["chunk_id"]) for c in r["citations"]}
        if any(c is None for c in chunks.values()):
            missing += 1  # a passage the index no longer holds: not this run's index
            continue
        passages = {n: premise(c.text) for n, c in chunks.items() if c is not None}
        after = M.alce_citation_scores(answer_sentences(r["answer"]), passages, judge)
        for key, b, a in (("recall", before[0], after[0]), ("precision", before[1], after[1])):
            if b is not None and a is not None:
                was[key].append(b)
                now[key].append(a)
        changed += before != after
    print(f"answers scored {len(was['recall'])} ({missing} skipped: passage not in the index); changed {changed}; "
          f"citation recall {_mean(was['recall']):.3f} -> {_mean(now['recall']):.3f}, "
          f"precision {_mean(was['precision']):.3f} -> {_mean(now['precision']):.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
