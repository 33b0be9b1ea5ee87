"""CI gate: compare a summary.json with eval/thresholds.json and exit non-zero naming every metric out of bounds.

Thresholds file: {"min": {"metric": value, ...}, "max": {"metric": value, ...}}; a metric name may be dotted
to reach into the summary ("by_lang.zh.fact_recall", "advisor.top1_accuracy"). A metric that is missing or null
in the summary fails (a gate that silently passes on a broken run is no gate).

    python -m assistant.evaluate.gate --summary DIR/summary.json --thresholds eval/thresholds.json
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any


def lookup(summary: dict[str, Any], dotted: str) -> Any:
    cur: Any = summary
    for part in dotted.split("."):
        if not isinstance(cur, dict) or part not in cur:
            return None
        cur = cur[part]
    return cur


def check(summary: dict[str, Any], thresholds: dict[str, Any]) -> list[str]:
    """One message per failing metric; empty when the summary passes."""
    failures = []
    for bound, op in (("min", "below"), ("max", "above")):
        for name, limit in thresholds.get(bound, {}).items():
            value = lookup(summary, name)
            if not isinstance(value, (int, float)):
                failures.append(f"{name}: missing from the summary (needs {bound} {limit})")
            elif (bound == "min" and value < limit) or (bound == "max" and value > limit):
                failures.append(f"{name}: {value} is {op} the {bound} threshold {limit}")
    return failures


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m assistant.evaluate.gate", description=__doc__.splitlines()[0])
    p.add_argument("--summary", required=True, help="summary.json of an eval run (or its directory)")
    p.add_argument("--thresholds", default="eval/thresholds.json")
    args = p.parse_args(argv)
    path = Path(args.summary)
    path = path / "summary.json" if path.is_dir() else path
    summary = json.loads(path.read_text(encoding="utf-8"))
    thresholds = json.loads(Path(args.thresholds).read_text(encoding="utf-8"))
    failures = check(summary, thresholds)
    for f in failures:
        print(f"FAIL {f}", file=sys.stderr)
    if not failures:
        n = sum(len(thresholds.get(b, {})) for b in ("min", "max"))
        print(f"gate passed: {n} thresholds checked")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
