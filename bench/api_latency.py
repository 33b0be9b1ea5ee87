"""Latency through the HTTP API with streaming: time from sending POST /api/ask (stream=true) to the `sources`
event and to the first `token` event, per question, then p50/p90 overall and by language.

By default the stream is closed after the first token (the server then stops that generation and frees the
model), so 20 questions take minutes, not tens of minutes; --full reads every answer to `done`.

    python bench/api_latency.py --base-url http://127.0.0.1:7860 [--limit 20] [--full] [--json out.json]
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import httpx

DATA = Path(__file__).resolve().parent / "data" / "speed.jsonl"


def measure(client: httpx.Client, question: str, full: bool) -> dict[str, float | str | None]:
    t0 = time.perf_counter()
    row: dict[str, float | str | None] = {"sources_s": None, "first_token_s": None, "done_s": None, "error": None}
    event = ""
    with client.stream("POST", "/api/ask", json={"question": question, "stream": True}) as r:
        if r.status_code != 200:
            r.read()
            row["error"] = f"HTTP {r.status_code}: {r.text[:200]}"
            return row
        for line in r.iter_lines():
            if line.startswith("event:"):
                event = line[6:].strip()
            elif line.startswith("data:"):
                now = time.perf_counter() - t0
                if event == "sources" and row["sources_s"] is None:
                    row["sources_s"] = now
                elif event == "token" and row["first_token_s"] is None:
                    row["first_token_s"] = now
                    if not full:
                        break
                elif event == "done":
                    row["done_s"] = now
                elif event == "error":
                    row["error"] = line[5:].strip()
    return row


def fmt(v: object) -> str:
    return f"{v:7.2f}" if isinstance(v, float) else "      -"


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[int(q) - 1]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base-url", default="http://127.0.0.1:7860")
    ap.add_argument("--data", default=str(DATA))
    ap.add_argument("--limit", type=int, default=20)
    ap.add_argument("--full", action="store_true", help="read each answer to the end (also reports done time)")
    ap.add_argument("--json", help="write per-question rows and the summary here")
    args = ap.parse_args(argv)

    rows = [json.loads(line) for line in Path(args.data).read_text(encoding="utf-8").splitlines() if line.strip()]
    rows = rows[: args.limit]
    results = []
    with httpx.Client(base_url=args.base_url, timeout=900) as client:
        if client.get("/readyz").status_code != 200:
            print("server not ready (GET /readyz != 200)", file=sys.stderr)
            return 2
        for row in rows:
            m = measure(client, row["question"], args.full)
            results.append({"id": row["id"], "lang": row.get("lang", ""), "question": row["question"], **m})
            print(f"{row['id']:<14} sources {fmt(m['sources_s'])} s  first token {fmt(m['first_token_s'])} s"
                  + (f"  done {fmt(m['done_s'])} s" if args.full else "") + (f"  ERROR {m['error']}" if m["error"] else ""),
                  file=sys.stderr, flush=True)

    summary = {}
    print(f"\n{'group':<8}{'n':>4}{'sources p50':>14}{'sources p90':>14}{'1st token p50':>16}{'1st token p90':>16}")
    for group in ("all", "zh", "en"):
        sel = [r for r in results if group == "all" or r["lang"] == group]
        src = [r["sources_s"] for r in sel if isinstance(r["sources_s"], float)]
        tok = [r["first_token_s"] for r in sel if isinstance(r["first_token_s"], float)]
        summary[group] = {"n": len(sel), "sources_p50_s": pct(src, 50), "sources_p90_s": pct(src, 90),
                          "first_token_p50_s": pct(tok, 50), "first_token_p90_s": pct(tok, 90)}
        s = summary[group]
        print(f"{group:<8}{len(sel):>4}{s['sources_p50_s']:>13.2f}s{s['sources_p90_s']:>13.2f}s"
              f"{s['first_token_p50_s']:>15.2f}s{s['first_token_p90_s']:>15.2f}s")
    errors = [r for r in results if r["error"]]
    if errors:
        print(f"{len(errors)} error(s): " + "; ".join(f"{r['id']}: {r['error']}" for r in errors))
    if args.json:
        Path(args.json).write_text(json.dumps({"summary": summary, "rows": results}, ensure_ascii=False, indent=2),
                                   encoding="utf-8")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
