"""report.html: one self-contained page (matplotlib PNGs embedded as base64, no external files).

Owns: the charts (metrics per language, per kind, latency distribution), the summary table, the fact-loss
table, the worst cases with their answers (and where their facts were lost), and the metric and loss-table
deltas against a baseline summary. Does not compute metrics.
"""
from __future__ import annotations

import base64
import html
import io
from pathlib import Path
from typing import Any

from .factloss import STAGES, loss_delta
from .metrics import CASE_METRICS, LATENCY_METRICS

SHOWN = ("fact_recall", "refusal_accuracy", "hit_at_1", "hit_at_5", "mrr", "citation_validity",
         "citation_source_hit", "citation_recall", "citation_precision")


def _png(fig: Any) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, bbox_inches="tight")
    import matplotlib.pyplot as plt

    plt.close(fig)
    return base64.b64encode(buf.getvalue()).decode("ascii")


def group_chart(groups: dict[str, dict[str, Any]], title: str) -> str:
    """Grouped bars: one group per metric, one bar per language/kind; base64 PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(groups)
    fig, ax = plt.subplots(figsize=(11, 3.8))
    width = 0.8 / max(1, len(names))
    for i, g in enumerate(names):
        vals = [groups[g].get(m) for m in SHOWN]  # None (metric does not apply) draws no bar and no label
        xs = [x + i * width for x in range(len(SHOWN))]
        ax.bar(xs, [float("nan") if v is None else v for v in vals], width, label=f"{g} (n={groups[g].get('n', 0)})")
        for x, v in zip(xs, vals, strict=True):
            if v is not None:
                ax.text(x, v + 0.01, f"{v:.2f}", ha="center", va="bottom", fontsize=6)
    ax.set_xticks([x + 0.4 - width / 2 for x in range(len(SHOWN))])
    ax.set_xticklabels(SHOWN, rotation=25, ha="right", fontsize=8)
    ax.set_ylim(0, 1.1)
    ax.set_title(title)
    ax.legend(fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    return _png(fig)


def latency_chart(rows: list[dict[str, Any]]) -> str:
    """Histograms of time to first token and total time of answered cases; base64 PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    answered = [r for r in rows if not r.get("refused") and r.get("timings")]
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.2))
    for ax, key in zip(axes, ("ttft_ms", "total_ms"), strict=True):
        vals = [r["timings"][key] / 1000 for r in answered if r["timings"].get(key) is not None]
        ax.hist(vals, bins=min(20, max(3, len(vals))), color="#4a7ab5")
        ax.set_title(f"{key} (s), answered cases n={len(vals)}")
        ax.set_xlabel("seconds")
        ax.grid(alpha=0.3)
    return _png(fig)


def case_score(r: dict[str, Any]) -> float:
    """Lower is worse: refusal correctness, then fact recall, then citation recall."""
    m = r.get("metrics", {})
    parts = [m.get("refusal_accuracy"), m.get("fact_recall"), m.get("citation_recall")]
    vals = [p for p in parts if p is not None]
    return sum(vals) / len(vals) if vals else 1.0


def _fmt(v: Any) -> str:
    if v is None:
        return "–"
    return f"{v:.3f}" if isinstance(v, float) and abs(v) < 10 else (f"{v:.0f}" if isinstance(v, float) else str(v))


def summary_table(summary: dict[str, Any]) -> str:
    groups = {"all": summary, **{f"lang={k}": v for k, v in summary.get("by_lang", {}).items()},
              **{f"kind={k}": v for k, v in summary.get("by_kind", {}).items()}}
    keys = ("n",) + CASE_METRICS + LATENCY_METRICS
    head = "".join(f"<th>{k}</th>" for k in keys)
    body = "".join(f"<tr><th>{html.escape(g)}</th>" + "".join(f"<td>{_fmt(s.get(k))}</td>" for k in keys) + "</tr>"
                   for g, s in groups.items())
    return f"<table><tr><th></th>{head}</tr>{body}</table>"


def delta_table(summary: dict[str, Any], base: dict[str, Any]) -> str:
    rows = []
    for k in ("n",) + CASE_METRICS + LATENCY_METRICS:
        a, b = summary.get(k), base.get(k)
        d = a - b if isinstance(a, (int, float)) and isinstance(b, (int, float)) else None
        better = d is not None and d != 0 and ((d > 0) != k.endswith(("_p50", "_p95")))
        cls = "" if not d else (" class='up'" if better else " class='down'")
        sign = "+" if d and d > 0 else ""
        rows.append(f"<tr><th>{k}</th><td>{_fmt(b)}</td><td>{_fmt(a)}</td><td{cls}>{sign}{_fmt(d)}</td></tr>")
    return "<table><tr><th>metric</th><th>baseline</th><th>this run</th><th>delta</th></tr>" + "".join(rows) + "</table>"


def loss_table_html(loss: dict[str, Any]) -> str:
    """Key facts per stage where they were lost: all facts, then per kind and per language."""
    groups = {"all": loss, **{f"kind={k}": v for k, v in loss.get("by_kind", {}).items()},
              **{f"lang={k}": v for k, v in loss.get("by_lang", {}).items()}}
    keys = ("facts",) + STAGES
    head = "".join(f"<th>{k}</th>" for k in keys)
    body = "".join(f"<tr><th>{html.escape(g)}</th>" + "".join(f"<td>{t.get(k, 0)}</td>" for k in keys) + "</tr>"
                   for g, t in groups.items())
    return f"<table><tr><th></th>{head}</tr>{body}</table>"


def loss_delta_html(loss: dict[str, Any], base: dict[str, Any]) -> str:
    """Facts per stage, baseline and this run; fewer losses (more kept) is green."""
    d = loss_delta(loss, base)
    rows = []
    for k in ("facts",) + STAGES:
        better = d[k] != 0 and k != "facts" and ((d[k] > 0) == (k == "kept"))
        cls = "" if not d[k] or k == "facts" else (" class='up'" if better else " class='down'")
        rows.append(f"<tr><th>{k}</th><td>{base.get(k, 0)}</td><td>{loss.get(k, 0)}</td>"
                    f"<td{cls}>{'+' if d[k] > 0 else ''}{d[k]}</td></tr>")
    return "<table><tr><th>stage</th><th>baseline</th><th>this run</th><th>delta</th></tr>" + "".join(rows) + "</table>"


def worst_cases(rows: list[dict[str, Any]], n: int = 10) -> str:
    out = []
    for r in sorted(rows, key=case_score)[:n]:
        m = {k: v for k, v in r.get("metrics", {}).items() if v is not None}
        metrics = ", ".join(f"{k}={_fmt(float(v))}" for k, v in m.items())
        turns = " → ".join(r.get("turns") or [r.get("question", "")])
        lost = "; ".join(f"{f['fact']}: {f['stage']}" for f in r.get("fact_loss") or [] if f["stage"] != "kept")
        out.append(f"<div class='case'><b>{html.escape(r['id'])}</b> ({r['lang']}, {r['kind']}"
                   f"{', refused' if r.get('refused') else ''}) <i>{html.escape(metrics)}</i>"
                   f"<p class='q'>Q: {html.escape(turns)}</p><p>A: {html.escape(r.get('answer') or r.get('error', ''))}</p>"
                   + (f"<p class='q'>lost: {html.escape(lost)}</p>" if lost else "") + "</div>")
    return "".join(out)


CSS = ("body{font-family:sans-serif;max-width:1150px;margin:1em auto;color:#222}table{border-collapse:collapse;"
       "font-size:12px;margin:.5em 0}td,th{border:1px solid #ccc;padding:2px 6px;text-align:right}"
       ".case{border-left:3px solid #c55;padding:2px 8px;margin:8px 0;font-size:13px}.q{color:#555}"
       ".up{color:#080}.down{color:#c00}img{max-width:100%}")


def write_report(path: Path, rows: list[dict[str, Any]], summary: dict[str, Any],
                 baseline: dict[str, Any] | None = None) -> None:
    parts = [(f"<!doctype html><html><head><meta charset='utf-8'><title>Evaluation report</title><style>{CSS}</style>"
             f"</head><body><h1>Evaluation report</h1><p>Sets: {html.escape(', '.join(summary.get('sets', [])))}; "
             f"judge: {html.escape(str(summary.get('judge', '')))}</p>"), "<h2>Summary</h2>", summary_table(summary)]
    loss = summary.get("fact_loss")
    if loss:
        parts += ["<h2>Where key facts are lost</h2>",
                  "<p>Each key fact counted once, at the first stage of the answer chain that no longer holds it "
                  "(docs/evaluation.md).</p>", loss_table_html(loss)]
    if baseline is not None:
        parts += ["<h2>Difference from the baseline</h2>", delta_table(summary, baseline)]
        if loss and baseline.get("fact_loss"):
            parts += ["<h3>Where key facts are lost: difference</h3>", loss_delta_html(loss, baseline["fact_loss"])]
    if rows:
        parts += ["<h2>Metrics per language</h2>",
                  f"<img alt='per language' src='data:image/png;base64,{group_chart(summary['by_lang'], 'by language')}'>",
                  "<h2>Metrics per kind</h2>",
                  f"<img alt='per kind' src='data:image/png;base64,{group_chart(summary['by_kind'], 'by kind')}'>",
                  "<h2>Latency</h2>", f"<img alt='latency' src='data:image/png;base64,{latency_chart(rows)}'>"]
    adv = summary.get("advisor")
    if adv:
        shown = {k: v for k, v in adv.items() if k != "rows"}
        parts += ["<h2>Advisor</h2>", f"<pre>{html.escape(str(shown))}</pre>"]
    parts += ["<h2>Worst cases</h2>", worst_cases(rows), "</body></html>"]
    Path(path).write_text("".join(parts), encoding="utf-8")
