"""Evidence selection without the model's answers: prompt size against how often the expected facts are in it.

    python bench/evidence_tokens.py --index-dir <index> [--configs 0:250 0.3:225 0.3:225:450] [--json OUT]

For each configuration FLOOR:BUDGET[:SEVERAL] (assistant/answer/evidence.py: sentences scoring under FLOOR x the
best one stay out; BUDGET tokens of evidence at most; SEVERAL tokens and every retrieved passage for a question
that asks for a list or a comparison, lexicon.asks_for_several, the Route's `several`, with its hint in the prompt) it builds the product's prompt for every answerable question of
bench/data/speed.jsonl, eval/gold_fact.jsonl and eval/gold_recommend.jsonl and prints the user message's
tokens (the part of the prompt not in the KV cache: what the first token waits for), p50 over all questions and
over the 20 speed-benchmark questions, and "facts in evidence": the share of each question's expected key facts
(any of its `a|b` spellings, case-insensitive) present in the evidence text. It is a ceiling, not the key-fact
recall of the answers (the model still has to use the evidence); a full evaluation decides. Takes ~1 minute
(the model is loaded for its tokenizer only; no generation).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from assistant.answer.pipeline import evidence  # noqa: E402
from assistant.answer.policy import decide  # noqa: E402
from assistant.answer.prompt import SEVERAL_HINT, build_messages  # noqa: E402
from assistant.lang import detect_language  # noqa: E402
from assistant.lexicon import asks_for_several  # noqa: E402
from assistant.service import AssistantService  # noqa: E402
from assistant.settings import load_settings  # noqa: E402

SETS = ["bench/data/speed.jsonl", "eval/gold_fact.jsonl", "eval/gold_recommend.jsonl"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--index-dir", required=True)
    ap.add_argument("--configs", nargs="+", default=["0.3:225", "0.3:225:450"],
                    help="FLOOR:BUDGET[:SEVERAL] triples")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    svc = AssistantService(load_settings(index_dir=Path(args.index_dir)))
    count = svc.llm.count_tokens
    cases = []
    for f in SETS:
        for line in (REPO / f).read_text(encoding="utf-8").splitlines():
            if line.strip():
                q = json.loads(line)
                hits = svc.retriever.search(q["question"], k=svc.settings.top_k)
                if not decide(q["question"], hits).refuse:
                    cases.append((q, hits))
    rows = []
    print(f"{len(cases)} answerable questions")
    print("floor  budget  user tokens p50 (all / speed set)  mean  facts in evidence")
    for spec in args.configs:
        parts = spec.split(":")
        floor, budget, several = float(parts[0]), int(parts[1]), int(parts[2]) if len(parts) > 2 else 0
        toks, speed, present, present_several, toks_several = [], [], [], [], []
        config = dataclasses.replace(svc.pipeline_config, context_token_budget=budget, evidence_floor=floor,
                                     several_token_budget=several)
        for q, hits in cases:
            many = asks_for_several(q["question"])
            src = evidence(q["question"], hits, config, count, svc.embedder, several=many)
            text = " ".join(s.text for s in src).lower()
            facts = q.get("answer_facts") or []
            share = sum(any(a.lower() in text for a in f.split("|")) for f in facts) / len(facts) if facts else None
            user = build_messages(q["question"], src, detect_language(q["question"]), several=many)[-1]["content"]
            if not several:  # the baseline prompt has no hint
                user = user.replace("\n\n" + SEVERAL_HINT[detect_language(q["question"])], "")
            n = count(user)
            toks.append(n)
            if share is not None:
                present.append(share)
            if many:
                toks_several.append(n)
                if share is not None:
                    present_several.append(share)
            if q["id"].startswith("speed"):
                speed.append(n)
        row = {"floor": floor, "budget": budget, "several_budget": several, "user_tokens_p50": statistics.median(toks),
               "speed_set_user_tokens_p50": statistics.median(speed), "user_tokens_mean": statistics.mean(toks),
               "facts_in_evidence": statistics.mean(present), "questions": len(cases),
               "several_questions": len(toks_several),
               "several_user_tokens_p50": statistics.median(toks_several) if toks_several else None,
               "several_facts_in_evidence": statistics.mean(present_several) if present_several else None}
        rows.append(row)
        print(f"{floor:5.2f}  {budget:6d}:{several:<4d} {row['user_tokens_p50']:7.1f} / "
              f"{row['speed_set_user_tokens_p50']:6.1f}                {row['user_tokens_mean']:6.1f}  "
              f"{row['facts_in_evidence']:.3f}   list/comparison questions ({len(toks_several)}): tokens p50 "
              f"{row['several_user_tokens_p50']}, facts in evidence {row['several_facts_in_evidence']}", flush=True)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(rows, indent=1), encoding="utf-8")
    svc.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
