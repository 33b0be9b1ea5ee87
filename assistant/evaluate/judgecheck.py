"""Hand check of the entailment judge: sample (sentence, cited passage) pairs from an eval run, add mismatched
pairs (a sentence with a passage cited for another case), and record every judge's verdict next to them so a
person can label them and compute agreement (docs/evaluation.md holds the labelled table).

    python -m assistant.evaluate.judgecheck --results DIR/results.jsonl --out pairs.jsonl [--n 20]
        [--swapped 0.4] [--no-model]

With --swapped 0 every pair is a sentence with the passages its answer cited: labelling those by hand gives
the true share of factual sentences with a supported citation (docs/evaluation.md).
"""
from __future__ import annotations

import argparse
import json
import random
from pathlib import Path
from typing import Any

from .judge import CombinedJudge, ModelJudge, SupportJudge
from .runner import answer_sentences, premise


def extract_pairs(rows: list[dict[str, Any]], passage_text: Any, n: int, seed: int = 0,
                  swapped: float = 0.4) -> list[dict[str, Any]]:
    """Pairs as cited by the answer, and a share `swapped` of sentences paired with another case's passage."""
    cited: list[dict[str, Any]] = []
    pool: list[tuple[str, str]] = []  # (case id, chunk id)
    for r in rows:
        by_n = {c["n"]: c["chunk_id"] for c in r.get("citations", [])}
        for sent, refs in answer_sentences(r.get("answer", "")) if not r.get("refused") else []:
            ids = [by_n[x] for x in refs if x in by_n]
            if ids:
                cited.append({"case": r["id"], "sentence": sent, "chunk_ids": ids, "pair": "cited"})
                pool.extend((r["id"], i) for i in ids)
    rng = random.Random(seed)
    rng.shuffle(cited)
    pairs = cited[: max(1, round(n * (1 - swapped)))]
    for p in cited[len(pairs):] + pairs:
        if len(pairs) >= n:
            break
        others = [cid for case, cid in pool if case != p["case"]]
        if others:
            pairs.append({**p, "chunk_ids": [rng.choice(others)], "pair": "swapped"})
    for p in pairs:
        p["passage"] = "\n".join(premise(passage_text(c)) for c in p["chunk_ids"])
    return pairs[:n]


def judge_pairs(pairs: list[dict[str, Any]], llm: Any, embedder: Any) -> None:
    """Every judge's verdict on every pair (llm None: the support score only)."""
    support = SupportJudge(embedder)
    model = ModelJudge(llm) if llm is not None else None
    combined = CombinedJudge(model, support) if model is not None else None
    for p in pairs:
        p["support"] = round(support.score(p["passage"], p["sentence"]), 3)
        if model is not None and combined is not None:
            p["model"] = model(p["passage"], p["sentence"])
            p["combined"] = combined(p["passage"], p["sentence"])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m assistant.evaluate.judgecheck")
    ap.add_argument("--results", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--n", type=int, default=20)
    ap.add_argument("--swapped", type=float, default=0.4, help="share of mismatched pairs (0 for a hand check "
                    "of the supported-citation share)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-model", action="store_true", help="skip the chat-model judge (support score only)")
    args = ap.parse_args(argv)
    from ..service import AssistantService

    svc = AssistantService()
    rows = [json.loads(x) for x in Path(args.results).read_text(encoding="utf-8").splitlines() if x.strip()]
    pairs = extract_pairs(rows, lambda cid: svc.passage(cid).text, args.n, args.seed,  # type: ignore[union-attr]
                          args.swapped)
    judge_pairs(pairs, None if args.no_model else svc.llm, svc.embedder)
    with Path(args.out).open("w", encoding="utf-8") as f:
        for p in pairs:
            f.write(json.dumps(p, ensure_ascii=False) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
