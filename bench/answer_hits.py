"""The answer path's retrieval, without the model writing: hit@1, hit@5 and MRR of the passages an answer retrieves
(`AssistantService.answer_hits`: the pinned passages also read through their twin in the question's language), against
the same search with the pinned passages read in their own words alone (the ranking before the twin counted), per
question language, in one run on the live index.

    python bench/answer_hits.py [--json OUT] FILE.jsonl [FILE.jsonl ...]

A hit is a passage whose source path ends with one of the question's `source_files` (cases without them are skipped),
as `assistant eval` counts it. It reads the index and the settings as the product does (ASSISTANT_* variables, default
`make run`'s); the chat model is loaded for its tokenizer (the pinned context's budget), and the twin is read only
when its translations are on disk (as answers read it).
"""
from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from assistant.lang import detect_language  # noqa: E402
from assistant.service import AssistantService  # noqa: E402
from assistant.settings import load_settings  # noqa: E402


def rank(sources: list[str], targets: list[str]) -> int | None:
    for i, s in enumerate(sources, start=1):
        if any(s.endswith(t) for t in targets):
            return i
    return None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("files", nargs="+")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    svc = AssistantService(load_settings())
    rows = [json.loads(line) for f in args.files for line in Path(f).read_text(encoding="utf-8").splitlines()
            if line.strip()]
    rows = [r for r in rows if r.get("source_files") and r.get("question") and not r.get("history")]  # a follow-up needs its session
    ranks: dict[str, dict[str, list[int | None]]] = {"twin": defaultdict(list), "own": defaultdict(list)}
    for r in rows:
        q, lang = r["question"], detect_language(r["question"])
        for mode, hits in (("twin", svc.answer_hits(q, k=5)), ("own", svc.search(q, k=5))):
            got = rank([h.chunk.source for h in hits], r["source_files"])
            ranks[mode][lang].append(got)
            ranks[mode]["all"].append(got)
    out: dict[str, dict[str, dict[str, float]]] = {}
    print(f"{'reading':<6} {'lang':<4} {'n':>4} {'hit@1':>6} {'hit@5':>6} {'MRR':>6}")
    for mode, by in ranks.items():
        for lang in ("all", "zh", "en"):
            rs = by.get(lang, [])
            if not rs:
                continue
            m = {"n": len(rs), "hit@1": round(sum(x == 1 for x in rs) / len(rs), 3),
                 "hit@5": round(sum(x is not None for x in rs) / len(rs), 3),
                 "mrr": round(sum(1 / x for x in rs if x) / len(rs), 3)}
            out.setdefault(mode, {})[lang] = m
            print(f"{mode:<6} {lang:<4} {m['n']:>4} {m['hit@1']:>6} {m['hit@5']:>6} {m['mrr']:>6}")
    if args.json:
        args.json.write_text(json.dumps({"files": args.files, "modes": out}, indent=1), encoding="utf-8")
    svc.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
