"""First-token and total times per kind of case from an `assistant eval` output directory (its results.jsonl):
the selection set's run holds selection answers (Advisor path) and fact answers (the follow-ups' last turn), so
one run compares the two under the same load. Usage: python bench/eval_timings.py DIR [--kinds selection followup]"""
from __future__ import annotations

import argparse
import json
from pathlib import Path


def percentile(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    k = (len(xs) - 1) * q / 100
    f = int(k)
    c = min(f + 1, len(xs) - 1)
    return xs[f] + (xs[c] - xs[f]) * (k - f)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("out_dir")
    ap.add_argument("--kinds", nargs="+", default=["selection", "followup"])
    args = ap.parse_args()
    rows = [json.loads(x) for x in (Path(args.out_dir) / "results.jsonl").read_text(encoding="utf-8").splitlines()]
    print("| kind | n | first visible token p50 / p95 | the model's first token p50 | total p50 / p95 |")
    print("|---|---|---|---|---|")
    for kind in args.kinds:
        rs = [r for r in rows if r["kind"] == kind and not r["refused"] and r.get("timings")]
        if not rs:
            continue
        ttft = [r["timings"]["ttft_ms"] / 1000 for r in rs]
        model = [r["timings"].get("model_ttft_ms", r["timings"]["ttft_ms"]) / 1000 for r in rs]
        total = [r["timings"]["total_ms"] / 1000 for r in rs]
        print(f"| {kind} | {len(rs)} | {percentile(ttft, 50):.2f} s / {percentile(ttft, 95):.2f} s | "
              f"{percentile(model, 50):.1f} s | {percentile(total, 50):.1f} s / {percentile(total, 95):.1f} s |")


if __name__ == "__main__":
    main()
