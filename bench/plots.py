"""Plots of the measured benchmark results: reads bench/results/*.json and writes the SVGs in docs/img/.

This script owns docs/img/speed-ttft.svg, speed-decode.svg, evidence-budget.svg and growth.svg; it measures
nothing, it only draws figures already kept in bench/results/ (docs/performance.md shows the plots).

    python bench/plots.py        (or: make plots)

Output is deterministic (fixed SVG hash salt, no date in the metadata, text kept as text rather than glyph
paths), so re-running it on unchanged results gives byte-identical files. Labels are English only: the machine
may have no CJK font.
"""
from __future__ import annotations

import json
import statistics
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench/results"
OUT = REPO / "docs/img"

SPEED_RUN = RESULTS / "speed-default-2026-11-30-g.json"
SPEED_QUESTIONS = REPO / "bench/data/speed.jsonl"
# (result file, what the run measured): the legend names the run by what it measured, not by its file
BUDGET_RUNS = [(RESULTS / "evidence-budget-2026-11-30.json", "first check"),
               (RESULTS / "evidence-budget-2026-11-30-s3.json", "stricter check")]
GROWTH_RUN = RESULTS / "growth-2026-11-30.json"

PRODUCT, RAW, TUTORIAL = "tab:blue", "tab:orange", "tab:gray"

plt.rcParams.update({
    "svg.fonttype": "none",  # text stays text: no embedded glyph paths, small files
    "svg.hashsalt": "fixed",  # stable clip-path ids
    "font.size": 9,
    "axes.spines.top": False,
})


def save(fig: plt.Figure, name: str, bottom: float = 0.0) -> None:
    path = OUT / name
    fig.tight_layout(rect=(0, bottom, 1, 1))
    fig.savefig(path, format="svg", metadata={"Date": None})
    plt.close(fig)
    print(f"wrote {path.relative_to(REPO)} ({path.stat().st_size / 1024:.1f} KB)")


def values(rows: list[dict], key: str) -> list[float | None]:
    return [r.get(key) for r in rows]


def p50(xs: list[float | None]) -> float:
    return statistics.median(x for x in xs if x is not None)


def question_ids(n: int) -> list[str]:
    ids = [json.loads(x)["id"] for x in SPEED_QUESTIONS.read_text(encoding="utf-8").splitlines() if x.strip()]
    if len(ids) != n:
        raise SystemExit(f"{SPEED_QUESTIONS} has {len(ids)} questions, the run has {n}")
    return [i.removeprefix("speed-") for i in ids]


def speed_ttft(run: dict) -> None:
    series = [("product (API)", run["product"], PRODUCT), ("raw llama.cpp, product prompt (no prompt cache)", run["raw"], RAW),
              ("tutorial pipeline", run["tutorial"], TUTORIAL)]
    ids = question_ids(len(run["product"]))
    width = 0.27
    fig, ax = plt.subplots(figsize=(10, 4))
    for k, (label, rows, color) in enumerate(series):
        ys = values(rows, "ttft_s")
        xs = [i + (k - 1) * width for i, y in enumerate(ys) if y is not None]
        ax.bar(xs, [y for y in ys if y is not None], width, color=color, label=label)
        med = p50(ys)
        ax.axhline(med, color=color, linestyle="--", linewidth=1)
        ax.annotate(f"p50 {med:.2f} s", (len(ids) - 0.5, med), xytext=(2, 2), textcoords="offset points",
                    color=color, fontsize=8)
    ax.set_xticks(range(len(ids)), ids, rotation=60, ha="right")
    ax.set_xlim(-0.6, len(ids) + 1.4)
    ax.set_ylabel("time to first token (s)")
    ax.set_title("Time to first token, run g (1.5B, 2 threads)")
    ax.legend(loc="upper left", frameon=False, ncols=3)
    ax.set_ylim(0, max(y for _, rows, _ in series for y in values(rows, "ttft_s") if y is not None) * 1.15)
    save(fig, "speed-ttft.svg")


def speed_decode(run: dict) -> None:
    ids = question_ids(len(run["product"]))
    fig, ax = plt.subplots(figsize=(10, 4))
    for label, rows, color, marker, dx in [("product (API)", run["product"], PRODUCT, "o", -0.12),
                                           ("raw llama.cpp, product prompt", run["raw"], RAW, "s", 0.12)]:
        pts = [(i + dx, y) for i, y in enumerate(values(rows, "decode_tps")) if y is not None]
        ax.plot([x for x, _ in pts], [y for _, y in pts], marker, color=color, label=f"{label}, p50 {p50([y for _, y in pts]):.2f}")
    bound = run["summary"].get("decode_bound_tps")
    if bound is not None:
        ax.axhline(bound, color="black", linestyle=":", linewidth=1,
                   label=f"memory-bandwidth bound (crude): {bound:.1f}")
    ax.set_xticks(range(len(ids)), ids, rotation=60, ha="right")
    ax.set_ylim(0, None)
    ax.set_ylabel("decode tokens/s")
    ax.set_title("Decode speed per question, run g (1.5B, 2 threads)")
    ax.legend(loc="lower left", frameon=False, ncols=3)
    save(fig, "speed-decode.svg")


BUDGET_KEYS = {"budget", "prompt_tokens_p50", "ttft_s_p50", "fact_recall", "citation_recall", "false_refusals"}


def evidence_budget() -> None:
    fig, left = plt.subplots(figsize=(7, 4))
    right = left.twinx()
    right.spines["top"].set_visible(False)
    drawn = 0
    for (path, tag), style in zip(BUDGET_RUNS, ["-", "--"], strict=True):
        if not path.exists():
            continue
        rows = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(rows, list) or not all(BUDGET_KEYS <= set(r) for r in rows):
            print(f"skipped {path.relative_to(REPO)}: not a list of budget rows")
            continue
        rows = sorted(rows, key=lambda r: r["budget"])
        drawn += 1
        xs = [r["budget"] for r in rows]
        left.plot(xs, values(rows, "fact_recall"), style, marker="o", color="tab:blue", label=f"key-fact recall, {tag}")
        left.plot(xs, values(rows, "citation_recall"), style, marker="^", color="tab:green",
                  label=f"citation recall, {tag}")
        right.plot(xs, values(rows, "ttft_s_p50"), style, marker="s", color="tab:red",
                   label=f"first token p50 (s), {tag}")
    left.set_xlabel("evidence budget (tokens)")
    left.set_ylabel("recall")
    left.set_ylim(0, 1.05)
    right.set_ylabel("first token p50 (s)", color="tab:red")
    right.set_ylim(0, None)
    left.set_title("Evidence budget: recall and first token (35 questions, 1.5B)")
    handles = left.get_legend_handles_labels()
    more = right.get_legend_handles_labels()
    left.legend(handles[0] + more[0], handles[1] + more[1], loc="lower right", frameon=False, fontsize=8)
    if drawn > 1:
        fig.text(0.01, 0.01, "stricter check: the stricter support check at 200 and 250 tokens, on a ~1.5 x slower "
                 "machine:\nits citation recall and first token are not comparable with the first check's", fontsize=7,
                 color="dimgray")
    save(fig, "evidence-budget.svg", bottom=0.07 if drawn > 1 else 0.0)


def growth() -> None:
    rows = sorted(json.loads(GROWTH_RUN.read_text(encoding="utf-8"))["rows"], key=lambda r: r["chunks"])
    xs = [r["chunks"] for r in rows]
    fig, ax = plt.subplots(figsize=(6, 4))
    for key, label, marker in [("query_p50_ms", "query p50", "o"), ("query_p95_ms", "query p95", "s")]:
        ys = values(rows, key)
        ax.plot(xs, ys, marker=marker, label=label)
        for x, y in zip(xs, ys, strict=True):
            ax.annotate(f"{y:.1f}", (x, y), xytext=(4, 4), textcoords="offset points", fontsize=8)
    ax.set_xscale("log")
    ax.set_xticks(xs, [f"{x:,}" for x in xs])
    ax.minorticks_off()
    ax.set_xlim(xs[0] / 1.6, xs[-1] * 1.6)
    ax.set_ylim(0, max(r["query_p95_ms"] for r in rows) * 1.1)
    ax.set_xlabel("index size (chunks, log scale)")
    ax.set_ylabel("hybrid retrieval query latency (ms)")
    ax.set_title("Retrieval latency vs index size (2 cores)")
    ax.legend(frameon=False)
    save(fig, "growth.svg")


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    run = json.loads(SPEED_RUN.read_text(encoding="utf-8"))
    speed_ttft(run)
    speed_decode(run)
    evidence_budget()
    growth()


if __name__ == "__main__":
    main()
