"""Time to first token of selection questions against fact questions, through the real service.

Selection questions (eval/gold_selection.jsonl) take the Advisor path (assistant/answer/selection.py): the
situation line and the recommendation stream as soon as the Advisor has ranked, and the model then phrases the
reasons; fact questions (eval/gold_fact.jsonl) take the usual path, whose first token is the model's. Both kinds
run alternately in one process on one index with one model, after a warm-up that loads the model and resolves the
Advisor's facts (as the server does right after it is ready), so the figures compare like with like.

Printed per kind: n, p50/p90 of the first visible token (`ttft_ms`), of the model's first token where it applies
(`model_ttft_ms`), of the total time, and the ratio selection/fact of the p50s.

    python bench/selection_ttft.py [--n 8] [--model default] [--index-dir index] [--json out.json]
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def _rows(path: Path, n: int) -> list[str]:
    qs = [json.loads(x)["question"] for x in path.read_text(encoding="utf-8").splitlines() if x.strip()]
    return qs[:n]


def _pct(xs: list[float], q: float) -> float | None:
    if not xs:
        return None
    xs = sorted(xs)
    return round(xs[min(len(xs) - 1, int(round(q / 100 * (len(xs) - 1))))], 1)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=8, help="questions of each kind (default 8)")
    ap.add_argument("--model", default="default")
    ap.add_argument("--index-dir", default="index")
    ap.add_argument("--json", help="write the figures here")
    args = ap.parse_args()

    import tempfile

    from assistant.service import AssistantService
    from assistant.settings import load_settings

    state = tempfile.mkdtemp(prefix="fa-selttft-")
    svc = AssistantService(load_settings(index_dir=Path(args.index_dir), state_dir=Path(state), model=args.model))
    t = time.perf_counter()
    svc.load(warm=True)
    svc.warm_advisor()
    print(f"loaded and warmed in {time.perf_counter() - t:.1f} s")
    kinds = {"selection": _rows(REPO / "eval/gold_selection.jsonl", args.n),
             "fact": _rows(REPO / "eval/gold_fact.jsonl", args.n)}
    out: dict[str, dict[str, list[float]]] = {k: {"ttft_ms": [], "model_ttft_ms": [], "total_ms": []} for k in kinds}
    for i in range(args.n):
        for kind, qs in kinds.items():
            if i >= len(qs):
                continue
            ans = svc.ask(qs[i])
            tm = ans.timings
            for key in out[kind]:
                if key in tm and not ans.refused:
                    out[kind][key].append(float(tm[key]))
            if kind == "fact" and not ans.refused:
                out[kind]["model_ttft_ms"].append(float(tm["ttft_ms"]))
            print(f"{kind:9s} ttft {tm.get('ttft_ms', 0):8.0f} ms  total {tm.get('total_ms', 0):8.0f} ms  {qs[i][:50]}")
    svc.close()
    report: dict[str, Any] = {"model": args.model, "n": args.n}
    print(f"\n{'kind':10s} {'n':>3s} {'ttft p50':>9s} {'ttft p90':>9s} {'model ttft p50':>15s} {'total p50':>10s}")
    for kind, m in out.items():
        report[kind] = {"n": len(m["ttft_ms"]), "ttft_p50": _pct(m["ttft_ms"], 50), "ttft_p90": _pct(m["ttft_ms"], 90),
                        "model_ttft_p50": _pct(m["model_ttft_ms"], 50), "total_p50": _pct(m["total_ms"], 50)}
        r = report[kind]
        print(f"{kind:10s} {r['n']:3d} {r['ttft_p50']!s:>9s} {r['ttft_p90']!s:>9s} {r['model_ttft_p50']!s:>15s} "
              f"{r['total_p50']!s:>10s}")
    s, f = report["selection"]["ttft_p50"], report["fact"]["ttft_p50"]
    if s and f:
        report["ratio_ttft_p50"] = round(s / f, 3)
        report["ratio_total_p50"] = round(report["selection"]["total_p50"] / report["fact"]["total_p50"], 3)
        print(f"\nselection / fact: first token {report['ratio_ttft_p50']:.2f}x, total {report['ratio_total_p50']:.2f}x")
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
