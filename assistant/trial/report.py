"""The trial's report: the criteria tied to the article's claims, saved, listed and exported.

A trial lives in `<state_dir>/trials/<id>/`: `report.json` (what `--json` and the API return), `report.md`
and `report.html` (the side-by-side table, each criterion with the article's sentence it tests and its line,
the shape errors, the scripts, the planned frameworks), `loss.svg` and `speed.svg` (matplotlib, drawn once
when the report is saved), the scripts that ran and `data.npz`. `list_trials` and `load` read them back.
"""
from __future__ import annotations

import html
import json
import os
import platform
import re
from pathlib import Path
from typing import Any

from ..errors import UserError

ARTICLE = "corpus/article/ai-training-support-guide.md"
_ROOT = Path(__file__).resolve().parents[2]
_ID = re.compile(r"^\d{8}-\d{6}-[0-9a-f]{6}$")

# Each criterion: what the trial measures and the article's sentence it tests (quoted exactly, with its line).
CRITERIA: list[dict[str, Any]] = [
    {"key": "effort", "label": {"zh": "开发效率", "en": "Development effort"},
     "claims": [{"line": 38, "quote": "KerasAPI已成为核心高阶API，极大降低了入门门槛",
                 "en": "The Keras API is TensorFlow's core high-level API and greatly lowers the entry barrier."},
                {"line": 40, "quote": "手感：强大但陡峭，像操作专业级单反相机，上限高但需要学习",
                 "en": "JAX feels powerful but steep, like a professional camera: a high ceiling that takes learning."}]},
    {"key": "debug", "label": {"zh": "调试便利性", "en": "Debuggability"},
     "claims": [{"line": 21, "quote": "静态图（像TensorFlow 1.x时代）效率高但调试难；动态图（像PyTorch）灵活直观，调试友好",
                 "en": "Static graphs are efficient but hard to debug; dynamic graphs (PyTorch) are flexible and "
                       "debugging-friendly."},
                {"line": 37, "quote": "调试体验最接近Python原生，`print`和`pdb`随便用",
                 "en": "PyTorch's debugging is closest to native Python: print and pdb just work."}]},
    {"key": "speed", "label": {"zh": "训练速度", "en": "Training speed"},
     "claims": [{"line": 40, "quote": "通过`jit`（即时编译）、`vmap`（自动向量化）、`pmap`（自动并行化）等变换组合出高性能计算",
                 "en": "JAX composes jit (just-in-time compilation), vmap and pmap into high-performance computation."},
                {"line": 65, "quote": "未来框架会更智能地在易用性（动态图）和极致性能（静态图/编译优化）之间寻找平衡",
                 "en": "Frameworks balance ease of use (dynamic graphs) against peak performance (static graphs, "
                       "compilation)."}]},
    {"key": "resources", "label": {"zh": "资源消耗", "en": "Resource use"},
     "claims": [{"line": 53, "quote": "不同的框架对混合精度训练、内存优化、特定硬件（如TPU、NPU）的支持程度不同",
                 "en": "Frameworks differ in their support for mixed precision, memory optimisation and specific "
                       "hardware (TPU, NPU)."}]},
]
TRIAL_CLAIM = {"line": 81, "quote": "用你的实际业务数据，在两个最可能的候选框架上，各跑一个简化版的训练Pipeline，"
                                    "亲身体验一下它们在开发效率、调试便利性、训练速度和资源消耗上的差异",
               "en": "Run a simplified training pipeline on your own data on the two most likely candidates and feel "
                     "the difference in development effort, debuggability, training speed and resource use."}

# (criterion, label zh, label en, how a result row is formatted)
ROWS: list[tuple[str, str, str, str]] = [
    ("effort", "代码行数（框架部分）", "Lines of code (framework part)", "loc"),
    ("effort", "需要的框架概念", "Framework concepts needed", "concepts"),
    ("effort", "用到的框架 API 名称数", "Distinct framework API names", "api_count"),
    ("debug", "训练步中 print(loss)", "print(loss) in the training step", "eager_print"),
    ("debug", "训练步中 breakpoint()", "breakpoint() in the training step", "pdb"),
    ("debug", "形状错误的第一行", "A shape error's first line", "shape"),
    ("speed", "到第一步的时间（导入+编译）", "Time to the first step (import + compile)", "first_step"),
    ("speed", "预热后每秒步数（3 次中位数 ± 极差）", "Steps/s after warm-up (median, spread of runs)", "steps"),
    ("speed", "每秒样本数", "Samples/s", "samples_per_s"),
    ("speed", "损失下降（第一步 → 最后 10 步均值）", "Loss falls (first step -> mean of the last 10)", "loss"),
    ("resources", "峰值内存 RSS", "Peak RSS", "peak_rss_mb"),
    ("resources", "环境安装大小 / 安装时间", "Environment size / install time", "install"),
]
PLANNED_REASON = {
    "zh": "需要 GPU 才有意义（分布式、显存优化），本机没有 GPU，所以只给出计划：在你的 GPU 机器上运行下面的命令，"
          "或在那里运行 `assistant trial --frameworks pytorch`（有 CUDA 时模板会用它）作为基线。",
    "en": "Meaningful only with GPUs (distributed training, memory optimisation); this machine has none, so it is "
          "planned, not run: run the command below on your GPU machine, with `assistant trial --frameworks pytorch` "
          "there (the templates use CUDA when present) as the baseline."}


def article_lines() -> list[str] | None:
    path = _ROOT / ARTICLE
    return path.read_text(encoding="utf-8").splitlines() if path.exists() else None


def unverified_claims() -> list[dict[str, Any]]:
    """The claims whose quote is not on its cited line of the article (none, unless the article moved)."""
    lines = article_lines()
    if lines is None:
        return []
    claims = [c for crit in CRITERIA for c in crit["claims"]] + [TRIAL_CLAIM]
    return [c for c in claims if c["line"] > len(lines) or c["quote"] not in lines[c["line"] - 1]]


def machine() -> dict[str, Any]:
    gpu = any(Path(p).exists() for p in ("/dev/nvidia0", "/proc/driver/nvidia/version"))
    return {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version(),
            "gpu": gpu, "processor": platform.processor() or platform.machine()}


# ---- formatting ----------------------------------------------------------------------------------
def _cell(r: dict[str, Any], kind: str, lang: str) -> str:
    zh = lang == "zh"
    if r.get("status") != "ok" and kind not in ("loc", "concepts", "api_count", "install"):
        return ("失败：" if zh else "failed: ") + " ".join(r.get("error", []))[:200]
    if kind == "concepts":
        return "; ".join(r.get("concepts", []))
    if kind == "eager_print":
        p = r.get("print_probe")
        if not p:
            return "—"
        return f"{p['shows']} ({p['printed_at']}/{p['steps']} {'步打印' if zh else 'steps printed'}): {p['sample'][:90]}"
    if kind == "pdb":
        p = r.get("pdb_probe")
        if not p:
            return "—"
        return (f"{p['stops']} {'次停下' if zh else 'stops'} / {p['steps']} {'步' if zh else 'steps'}, "
                f"{'显示' if zh else 'shows'} {p['shows']}: {p['sample'][:90]}")
    if kind == "shape":
        s = r.get("shape_error")
        if not s:
            return "—"
        first = s["message"][0] if s["message"] else ""
        at = s.get("points_to")
        where = f" ({'指向第' if zh else 'points to line '}{at['line']}{'行' if zh else ''}: {at['code']})" if at else ""
        return first[:200] + where
    if kind == "first_step":
        return f"{r['first_step_s']:.2f} s ({'导入' if zh else 'import'} {r['import_s']:.2f} s)"
    if kind == "steps":
        return f"{r['steps_per_s']:.1f} ± {r['steps_per_s_spread']:.1f}" if r.get("steps_per_s") else "—"
    if kind == "loss":
        falls = ("是" if zh else "yes") if r["loss_falls"] else ("否" if zh else "NO")
        return f"{r['loss_start']:.3f} → {r['loss_end']:.3f} ({falls})"
    if kind == "peak_rss_mb":
        return f"{r['peak_rss_mb']:.0f} MB"
    if kind == "install":
        if "install_mb" not in r:
            return "—"
        return f"{r['install_mb']:.0f} MB / {r['install_s']:.0f} s" + (" (cached)" if r.get("env_reused") else "")
    value = r.get(kind)
    return "—" if value is None else str(value)


def _claim_refs(report: dict[str, Any]) -> dict[str, list[int]]:
    """Criterion -> the numbers of its claims in the report's source list (1..N, in CRITERIA order)."""
    refs: dict[str, list[int]] = {}
    n = 0
    for crit in CRITERIA:
        refs[crit["key"]] = list(range(n + 1, n + 1 + len(crit["claims"])))
        n += len(crit["claims"])
    return refs


def sources(lang: str) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for crit in CRITERIA:
        for c in crit["claims"]:
            out.append({"n": len(out) + 1, "path": ARTICLE, "line": c["line"], "quote": c["quote"],
                        "text": c["quote"] if lang == "zh" else c["en"], "criterion": crit["key"]})
    out.append({"n": len(out) + 1, "path": ARTICLE, "line": TRIAL_CLAIM["line"], "quote": TRIAL_CLAIM["quote"],
                "text": TRIAL_CLAIM["quote"] if lang == "zh" else TRIAL_CLAIM["en"], "criterion": "trial"})
    return out


def table(report: dict[str, Any]) -> dict[str, Any]:
    """The side-by-side table: one row per measure, grouped by criterion, cells per framework."""
    lang = report.get("language", "en")
    labels = {c["key"]: c["label"][lang] for c in CRITERIA}
    refs = _claim_refs(report)
    rows = [{"criterion": crit, "criterion_label": labels[crit], "citations": refs[crit],
             "label": zh if lang == "zh" else en, "cells": [_cell(r, kind, lang) for r in report["results"]]}
            for crit, zh, en, kind in ROWS]
    return {"frameworks": [r["framework"] for r in report["results"]], "rows": rows}


def to_markdown(report: dict[str, Any]) -> str:
    lang = report.get("language", "en")
    zh = lang == "zh"
    t = table(report)
    names = " vs ".join(t["frameworks"] + [p["framework"] for p in report["planned"]])
    out = [f"# {'试验' if zh else 'Trial'} {report['id']}: {names} ({report['task']})", ""]
    src = sources(lang)
    out.append(("> " + src[-1]["text"]) + f" [{src[-1]['n']}]")
    out.append("")
    d, cfg, m = report["data"], report["config"], report["machine"]
    out.append(f"{'数据' if zh else 'Data'}: {d['kind']}{' ' + d['name'] if d.get('name') else ''}, "
               f"{d['samples']} {'个样本' if zh else 'samples'}, {d['shapes']}; batch {cfg['batch']}, "
               f"{cfg['steps']} {'步' if zh else 'steps'}, seed {cfg['seed']}, {cfg['threads']} "
               f"{'线程' if zh else 'thread(s)'}; {report['request']['repeats']} {'次计时运行' if zh else 'timed runs'}. "
               f"{'机器' if zh else 'Machine'}: {m['cpus']} CPU, GPU: {m['gpu']}, Python {m['python']}.")
    out += ["", "| " + ("维度" if zh else "Criterion") + " | " + ("测量" if zh else "Measure") + " | "
            + " | ".join(t["frameworks"]) + " |", "|---|---|" + "---|" * len(t["frameworks"])]
    for row in t["rows"]:
        cite = "".join(f"[{n}]" for n in row["citations"])
        cells = " | ".join(c.replace("|", "\\|").replace("\n", " ") for c in row["cells"])
        out.append(f"| {row['criterion_label']} {cite} | {row['label']} | {cells} |")
    out += ["", "![loss](loss.svg) ![speed](speed.svg)", ""]
    for r in report["results"]:
        if r.get("status") != "ok":
            continue
        out.append(f"## {r['framework']} {r.get('version', '')}")
        out.append(f"- {'说明' if zh else 'Note'}: {r['debug_note']}")
        if r.get("shape_error"):
            out.append(f"- {'形状错误' if zh else 'Shape error'}:")
            out += ["      " + ln for ln in r["shape_error"]["message"]]
        out.append(f"- {'脚本' if zh else 'Script'}: `{r['script']}` ({r['loc']} + {r['common_loc']} "
                   f"{'行公共部分' if zh else 'common lines'})")
        out.append("")
    for p in report["planned"]:
        out += [f"## {p['framework']} ({'计划，未运行' if zh else 'planned, not run'})", PLANNED_REASON[lang], "",
                f"    {p['command']}", ""]
    out.append("## " + ("来源" if zh else "Sources"))
    out += [f"[{s['n']}] {s['path']}:{s['line']} — {s['text']}" for s in src]
    return "\n".join(out) + "\n"


def to_html(report: dict[str, Any], svgs: dict[str, str] | None = None) -> str:
    lang = report.get("language", "en")
    zh = lang == "zh"
    e = html.escape
    t = table(report)
    src = sources(lang)
    head = "".join(f"<th>{e(n)}</th>" for n in t["frameworks"])
    rows = []
    for row in t["rows"]:
        cite = "".join(f"<a href='#trial-src-{n}'>[{n}]</a>" for n in row["citations"])
        rows.append(f"<tr><th>{e(row['criterion_label'])} {cite}</th><td>{e(row['label'])}</td>"
                    + "".join(f"<td>{e(c)}</td>" for c in row["cells"]) + "</tr>")
    parts = [f"<div class='trial-report'><h3>{'试验' if zh else 'Trial'} {e(report['id'])} ({e(report['task'])})</h3>",
             f"<blockquote>{e(src[-1]['text'])} <a href='#trial-src-{src[-1]['n']}'>[{src[-1]['n']}]</a></blockquote>",
             f"<table class='trial-table'><thead><tr><th>{'维度' if zh else 'Criterion'}</th>"
             f"<th>{'测量' if zh else 'Measure'}</th>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"]
    for svg in (svgs or {}).values():
        parts.append(f"<div class='trial-plot'>{svg}</div>")
    for p in report["planned"]:
        parts.append(f"<h4>{e(p['framework'])} ({'计划，未运行' if zh else 'planned, not run'})</h4>"
                     f"<p>{e(PLANNED_REASON[lang])}</p><pre>{e(p['command'])}</pre>")
    parts.append(f"<h4>{'来源' if zh else 'Sources'}</h4><ol>" + "".join(
        f"<li id='trial-src-{s['n']}'><code>{e(s['path'])}:{s['line']}</code> {e(s['text'])}</li>" for s in src) + "</ol>")
    return "".join(parts) + "</div>"


def plots(report: dict[str, Any]) -> dict[str, str]:
    """SVG text of the loss curves and the speed/memory bars (empty when nothing ran)."""
    ok = [r for r in report["results"] if r.get("status") == "ok"]
    if not ok:
        return {}
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    def svg(fig: Any) -> str:
        buf = io.StringIO()
        fig.savefig(buf, format="svg", bbox_inches="tight")
        plt.close(fig)
        text = buf.getvalue()
        return text[text.find("<svg"):]

    out = {}
    fig, ax = plt.subplots(figsize=(6, 3))
    for r in ok:
        ax.plot(range(len(r["losses"])), r["losses"], label=r["framework"], linewidth=1)
    ax.set_xlabel("step")
    ax.set_ylabel("loss")
    ax.set_title(f"loss ({report['task']})")
    ax.legend()
    out["loss"] = svg(fig)
    fig, axes = plt.subplots(1, 3, figsize=(9, 2.8))
    names = [r["framework"] for r in ok]
    rates = [r["steps_per_s"] or 0 for r in ok]
    spread = [[r["steps_per_s"] - min(r["steps_per_s_runs"]) for r in ok],
              [max(r["steps_per_s_runs"]) - r["steps_per_s"] for r in ok]]
    axes[0].bar(names, rates, yerr=spread, capsize=4)
    axes[0].set_title("steps/s (median, min-max)")
    axes[1].bar(names, [r["first_step_s"] for r in ok])
    axes[1].set_title("time to first step (s)")
    axes[2].bar(names, [r["peak_rss_mb"] for r in ok])
    axes[2].set_title("peak RSS (MB)")
    fig.tight_layout()
    out["speed"] = svg(fig)
    return out


# ---- saving, listing -----------------------------------------------------------------------------
def save(report: dict[str, Any], run_dir: Path) -> None:
    report["table"] = table(report)
    report["sources"] = sources(report.get("language", "en"))
    svgs = plots(report)
    for name, text in svgs.items():
        (run_dir / f"{name}.svg").write_text(text, encoding="utf-8")
    (run_dir / "report.json").write_text(json.dumps(report, ensure_ascii=False, indent=2), encoding="utf-8")
    (run_dir / "report.md").write_text(to_markdown(report), encoding="utf-8")
    (run_dir / "report.html").write_text("<!doctype html><meta charset='utf-8'><title>trial</title>"
                                         + to_html(report, svgs), encoding="utf-8")


def _not_found(trial_id: str) -> UserError:
    return UserError("trial_not_found", f"No trial {trial_id!r}.", f"没有试验 {trial_id!r}。", 404)


def load(state_dir: Path, trial_id: str) -> dict[str, Any]:
    if not _ID.match(trial_id or ""):
        raise _not_found(trial_id)
    path = Path(state_dir) / "trials" / trial_id / "report.json"
    if not path.exists():
        raise _not_found(trial_id)
    return json.loads(path.read_text(encoding="utf-8"))


def load_svgs(state_dir: Path, trial_id: str) -> dict[str, str]:
    """The saved plots of a trial (name -> SVG text), for the HTML export."""
    load(state_dir, trial_id)  # the id is checked and the trial exists
    run_dir = Path(state_dir) / "trials" / trial_id
    return {p.stem: p.read_text(encoding="utf-8") for p in sorted(run_dir.glob("*.svg"))}


def list_trials(state_dir: Path) -> list[dict[str, Any]]:
    """Saved trials, newest first: id, created, task, frameworks, report paths."""
    root = Path(state_dir) / "trials"
    out = []
    for d in sorted(root.iterdir() if root.exists() else [], reverse=True):
        path = d / "report.json"
        if not (_ID.match(d.name) and path.exists()):
            continue
        r = json.loads(path.read_text(encoding="utf-8"))
        out.append({"id": r["id"], "created": r["created"], "task": r["task"],
                    "frameworks": [x["framework"] for x in r["results"]] + [p["framework"] for p in r["planned"]],
                    "markdown": str(d / "report.md"), "html": str(d / "report.html")})
    return out
