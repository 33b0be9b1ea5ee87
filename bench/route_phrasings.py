"""Write the router's labelled phrasings (assistant/route_phrasings.jsonl) from the dev question sets in eval/.

    python bench/route_phrasings.py [--eval-dir eval] [--out assistant/route_phrasings.jsonl]

Each line is one dev question with the kind the router should give it ("selection" or "fact"; an out-of-scope
question counts as "fact" here: the refusal policy, not the classifier, turns it away) and the case it came from.
Selection: gold_selection*.jsonl, gold_recommend.jsonl, the Advisor's scenarios (advisor.jsonl) and parser cases
(advisor_parse.jsonl), the first turn of gold_selection_followup.jsonl. Fact: gold_fact, gold_article_en(_2),
gold_near_domain, gold_out_of_scope, gold_adversarial, every turn of gold_followup and the follow-up turns of
gold_selection_followup but for those of kind selection ("Why not PyTorch?" is one only after a recommendation: the
router reads the turn before, not the words). The blind split (eval/test/) is never read.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SELECTION = ("gold_selection.jsonl", "gold_selection_2.jsonl", "gold_selection_blind1.jsonl", "gold_recommend.jsonl")
FACT = ("gold_fact.jsonl", "gold_article_en.jsonl", "gold_article_en_2.jsonl", "gold_near_domain.jsonl", "gold_out_of_scope.jsonl",
        "gold_adversarial.jsonl", "gold_followup.jsonl", "gold_selection_followup.jsonl")


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def phrasings(eval_dir: Path) -> list[dict]:
    """The labelled dev phrasings, in file order."""
    assert "test" not in eval_dir.parts, "the blind split is not training data"
    out: list[dict] = []

    def add(text: str, kind: str, lang: str, case: str) -> None:
        if text.strip():
            out.append({"text": text.strip(), "kind": kind, "lang": lang, "case": case})

    for name in SELECTION:
        for r in _rows(eval_dir / name):
            add(r["question"], "selection", r["lang"], r["id"])
    for r in _rows(eval_dir / "advisor.jsonl"):
        add(r["scenario"].get("text", ""), "selection", r["lang"], r["id"])
    for r in _rows(eval_dir / "advisor_parse.jsonl"):
        for i, t in enumerate(r.get("turns") or [r["text"]]):
            add(t, "selection", r["lang"], f"{r['id']}#{i}" if r.get("turns") else r["id"])
    for name in FACT:
        for r in _rows(eval_dir / name):
            turns = r.get("turns") or [r["question"]]
            for i, t in enumerate(turns):
                first_of_selection = name == "gold_selection_followup.jsonl" and i == 0
                if i and i == len(turns) - 1 and r["kind"] == "selection":
                    continue  # "Why not PyTorch?" is a selection only after one: the turn before decides, not its words
                add(t, "selection" if first_of_selection else "fact", r["lang"], f"{r['id']}#{i}" if len(turns) > 1 else r["id"])
    seen: set[str] = set()
    return [p for p in out if not (p["text"] in seen or seen.add(p["text"]))]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--eval-dir", default=str(REPO / "eval"))
    ap.add_argument("--out", default=str(REPO / "assistant" / "route_phrasings.jsonl"))
    args = ap.parse_args()
    rows = phrasings(Path(args.eval_dir))
    Path(args.out).write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    kinds = {k: sum(r["kind"] == k for r in rows) for k in ("selection", "fact")}
    print(f"{len(rows)} phrasings -> {args.out}: {kinds}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
