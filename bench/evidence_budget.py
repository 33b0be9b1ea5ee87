"""The evidence-budget curve: key-fact recall and time to first token against the prompt's evidence budget.

    python bench/evidence_budget.py --index-dir <index> --budgets 200 300 450 700 [--model default]

For each budget it runs the offline evaluator (`assistant eval`, deterministic support judge) with
ASSISTANT_CONTEXT_TOKEN_BUDGET set, on a fixed sweep set: every other case of eval/gold_fact.jsonl and
the first 6 of eval/gold_recommend.jsonl (35 in-domain questions, zh and en). It prints one row per
budget: prompt tokens p50, first token p50, key-fact recall, citation recall, false refusals. The default
budget in assistant/settings.py is chosen from this curve (docs/performance.md).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def sweep_set(out: Path) -> Path:
    facts = (REPO / "eval/gold_fact.jsonl").read_text(encoding="utf-8").splitlines()
    recs = (REPO / "eval/gold_recommend.jsonl").read_text(encoding="utf-8").splitlines()
    lines = [x for x in facts if x.strip()][::2] + [x for x in recs if x.strip()][:6]
    path = out / "sweep.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def run_budget(budget: int, cases: Path, out: Path, args: argparse.Namespace) -> dict:
    env = dict(os.environ, ASSISTANT_CONTEXT_TOKEN_BUDGET=str(budget), ASSISTANT_INDEX_DIR=args.index_dir)
    dest = out / f"budget-{budget}"
    cmd = [sys.executable, "-m", "assistant", "eval", "--set", str(cases), "--model", args.model,
           "--judge", "support", "--out", str(dest)]
    subprocess.run(cmd, check=True, env=env, cwd=REPO, stdout=subprocess.DEVNULL)
    rows = [json.loads(x) for x in (dest / "results.jsonl").read_text(encoding="utf-8").splitlines() if x.strip()]
    summary = json.loads((dest / "summary.json").read_text(encoding="utf-8"))
    answered = [r for r in rows if not r.get("refused")]
    return {
        "budget": budget, "n": len(rows),
        "prompt_tokens_p50": statistics.median([r["usage"]["prompt_tokens"] for r in answered if r.get("usage")]
                                               or [0]),
        "ttft_s_p50": summary["ttft_ms_p50"] / 1000,
        "fact_recall": summary["fact_recall"],
        "citation_recall": summary["citation_recall"],
        "false_refusals": sum(1 for r in rows if r.get("refused")),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--index-dir", default=os.environ.get("ASSISTANT_INDEX_DIR", str(REPO / "index")))
    ap.add_argument("--model", default="default")
    ap.add_argument("--budgets", type=int, nargs="+", default=[200, 300, 450, 700])
    ap.add_argument("--out", default=None, help="keep every run's evaluator output here")
    ap.add_argument("--json", help="write the curve to this file")
    args = ap.parse_args()
    out = Path(args.out or tempfile.mkdtemp(prefix="budget-"))
    out.mkdir(parents=True, exist_ok=True)
    cases = sweep_set(out)
    rows = []
    print(f"{'budget':>7} {'n':>3} {'prompt tok p50':>15} {'first token p50':>16} {'fact recall':>12} "
          f"{'citation recall':>16} {'refused':>8}", flush=True)
    for b in args.budgets:
        r = run_budget(b, cases, out, args)
        rows.append(r)
        print(f"{b:>7} {r['n']:>3} {r['prompt_tokens_p50']:>15.0f} {r['ttft_s_p50']:>14.1f} s "
              f"{r['fact_recall']:>12.3f} {r['citation_recall'] or 0:>16.3f} {r['false_refusals']:>8}", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
