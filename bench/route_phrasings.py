"""Write the router's labelled phrasings (assistant/route_phrasings.jsonl) from the dev question sets in eval/.

    python bench/route_phrasings.py [--eval-dir eval] [--out assistant/route_phrasings.jsonl]

Each line is one dev question with the kind the router should give it ("selection" or "fact"; an out-of-scope
question counts as "fact" here: the refusal policy, not the classifier, turns it away) and the case it came from.
Selection: gold_selection*.jsonl, gold_recommend.jsonl, the Advisor's scenarios (advisor.jsonl) and parser cases
(advisor_parse.jsonl), the first turn of gold_selection_followup.jsonl. Fact: gold_fact, gold_article_en(_2),
gold_near_domain, gold_out_of_scope, gold_adversarial, every turn of gold_followup and the follow-up turns of
gold_selection_followup, and the dev rows of bench/data/retrieval.jsonl. The blind split (eval/test/) is never read.

A single-turn fact question also says what answers it (`answered_by`, for the classifier's second head, which decides
whether passages of other documents follow the pinned article): "article" when every fact it asks for
(`answer_facts`) is in the reference article's text, or, for a retrieval row, when the article is among its
`source_files`; "documents" otherwise.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from assistant.evaluate.metrics import fact_present  # noqa: E402

ARTICLE = "corpus/article/ai-training-support-guide.md"
SELECTION = ("gold_selection.jsonl", "gold_selection_2.jsonl", "gold_selection_blind1.jsonl", "gold_recommend.jsonl")
FACT = ("gold_fact.jsonl", "gold_article_en.jsonl", "gold_article_en_2.jsonl", "gold_near_domain.jsonl", "gold_out_of_scope.jsonl",
        "gold_adversarial.jsonl", "gold_followup.jsonl", "gold_selection_followup.jsonl")


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def phrasings(eval_dir: Path) -> list[dict]:
    """The labelled dev phrasings, in file order."""
    assert "test" not in eval_dir.parts, "the blind split is not training data"
    out: list[dict] = []

    article = (REPO / ARTICLE).read_text(encoding="utf-8")

    def add(text: str, kind: str, lang: str, case: str, answered_by: str | None = None) -> None:
        if text.strip():
            row = {"text": text.strip(), "kind": kind, "lang": lang, "case": case}
            if answered_by:
                row["answered_by"] = answered_by
            out.append(row)

    def answered_by(r: dict) -> str | None:
        if r.get("kind") != "fact" or not r.get("answer_facts") or len(r.get("turns") or [1]) > 1:
            return None
        return "article" if all(fact_present(f, article) for f in r["answer_facts"]) else "documents"

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
                add(t, "selection" if first_of_selection else "fact", r["lang"],
                    f"{r['id']}#{i}" if len(turns) > 1 else r["id"], answered_by(r))
    for r in _rows(REPO / "bench" / "data" / "retrieval.jsonl"):
        if r.get("split") == "dev":
            add(r["question"], "fact", r["lang"], r["id"],
                "article" if any(f.endswith(ARTICLE) for f in r["source_files"]) else "documents")
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
    sources = {k: sum(r.get("answered_by") == k for r in rows) for k in ("article", "documents")}
    print(f"{len(rows)} phrasings -> {args.out}: {kinds}, answered by {sources}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
