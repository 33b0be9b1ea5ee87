"""The Advisor tab of the Gradio UI: a scenario form, and the ranked, cited result rendered as HTML.

All logic lives in the service: the tab collects the form into a scenario dict, calls
`service.advise(...).to_dict()` and renders it. The result leads with a one-screen summary (the
recommendation, its top reasons, what would change it, the trial plan) followed by the "Run the trial" button;
the comparison table and the sources are folded (<details>). Every [n] links to a <details id="adv-cite-n">
that shows the passage's title, heading path, snippet, source and lines (the page's script opens the folds
around it). The trial button runs the article's trial on the Advisor's two candidates as a job
(assistant/trial/jobs.py) and shows a progress bar per framework and step, then the report. Labels are
bilingual (中文 / English); the result follows the interface language held in `lang_state`.
"""
from __future__ import annotations

import html
import time
from collections.abc import Iterator
from typing import Any

import gradio as gr

from assistant.errors import UserError
from assistant.trial import jobs as trial_jobs
from assistant.trial import report as trial_report
from assistant.trial.runner import DISPLAY, PLANNED, TrialRequest, candidates_from_advice, infer_task

KNOWN = ["PyTorch", "TensorFlow", "PaddlePaddle", "JAX"]
STAGES = [("研究 / Research", "research"), ("原型验证 / Prototype", "prototype"), ("规模化生产 / Production", "production")]
HARDWARE = [("仅 CPU / CPU only", "cpu"), ("少量 GPU / A few GPUs", "few_gpus"), ("GPU 集群 / GPU cluster", "gpu_cluster"),
            ("TPU", "tpu"), ("国产 NPU（昇腾等）/ NPU (Ascend, ...)", "npu")]
DOMAINS = [("通用 / General", "general"), ("中文 NLP / Chinese NLP", "chinese_nlp"), ("计算机视觉 / CV", "cv"),
           ("科学计算 / Scientific", "scientific"), ("强化学习 / RL", "rl"), ("大模型预训练 / LLM pre-training", "llm_pretrain"),
           ("大模型微调 / LLM fine-tuning", "llm_finetune")]
GOALS = [("国产化 / Localisation", "localisation"), ("移动端 / Mobile", "mobile"), ("服务端 / Server", "server"),
         ("长序列 / Long sequences", "long_sequence"), ("MoE", "moe"), ("显存受限 / Memory-limited", "memory_limited"),
         ("Google Cloud", "cloud:gcp")]
UNSET = ("— 从描述推断 / infer from text —", "")


def build_advisor_tab(service: Any, lang_state: Any = None) -> None:
    """Build the tab's components inside the caller's gr.Blocks / gr.Tab context."""
    gr.Markdown("### 选型顾问 / Framework Advisor\n描述你的团队和项目，得到带引用的排序、对比表和试验计划。"
                " / Describe your team and project to get a cited ranking, a comparison table and a trial plan.")
    with gr.Row():
        with gr.Column(scale=2):
            text = gr.Textbox(label="情况描述 / Description", lines=3, elem_id="adv-text",
                              placeholder="例如：5人初创团队，熟悉 PyTorch，只有几张 GPU，想微调 7B 模型 / "
                                          "e.g. a startup that knows PyTorch fine-tuning a 7B model on a few GPUs")
            known = gr.CheckboxGroup(KNOWN, label="团队熟悉的框架 / Frameworks the team knows", elem_id="adv-known")
            goals = gr.CheckboxGroup(GOALS, label="长期目标 / Goals", elem_id="adv-goals")
        with gr.Column(scale=1):
            stage = gr.Dropdown([UNSET, *STAGES], value="", label="项目阶段 / Stage", elem_id="adv-stage")
            hardware = gr.Dropdown([UNSET, *HARDWARE], value="", label="硬件 / Hardware", elem_id="adv-hardware")
            domain = gr.Dropdown([UNSET, *DOMAINS], value="", label="领域 / Domain", elem_id="adv-domain")
            scale = gr.Textbox(label="模型规模 / Model scale", placeholder="7B, 300M, 千亿", elem_id="adv-scale")
            button = gr.Button("给出建议 / Advise", variant="primary", elem_id="adv-run")
    result = gr.HTML("", elem_id="adv-result")
    advice_state = gr.State(None)
    job_state = gr.State("")
    with gr.Row(elem_id="adv-trial-row"):
        task = gr.Dropdown(TRIAL_TASKS, value="", label="试验任务 / Trial task", elem_id="adv-trial-task", scale=2)
        steps = gr.Slider(50, 1000, value=200, step=50, label="步数 / Steps", elem_id="adv-trial-steps", scale=2)
        trial = gr.Button("运行试验 / Run the trial", variant="secondary", elem_id="adv-trial-run", scale=1)
        stop = gr.Button("停止 / Stop", size="sm", elem_id="adv-trial-stop", scale=0)
    trial_out = gr.HTML("", elem_id="adv-trial")
    lang = lang_state if lang_state is not None else gr.State("zh")
    inputs = [text, known, stage, hardware, domain, scale, goals, lang]
    button.click(lambda *a: run_with_state(service, *a), inputs, [result, advice_state])

    def on_trial(adv: dict[str, Any] | None, t: str, n: float, lg: str) -> Iterator[tuple[str, str]]:
        yield from run_trial(service, adv, t, n, lg)

    trial.click(on_trial, [advice_state, task, steps, lang], [trial_out, job_state])
    stop.click(lambda job: stop_trial(service, job), [job_state], [])


def scenario_from_form(text: str, known: list[str], stage: str, hardware: str, domain: str, scale: str,
                       goals: list[str], lang: str) -> dict[str, Any]:
    d: dict[str, Any] = {"text": text or "", "lang": lang if lang in ("zh", "en") else "zh"}
    for key, val in (("stage", stage), ("hardware", hardware), ("domain", domain), ("model_scale", (scale or "").strip())):
        if val:
            d[key] = val
    if known:
        d["known_frameworks"] = list(known)
    if goals:
        d["goals"] = list(goals)
    return d


def run(service: Any, text: str, known: list[str], stage: str, hardware: str, domain: str, scale: str,
        goals: list[str], lang: str) -> str:
    scenario = scenario_from_form(text, known, stage, hardware, domain, scale, goals, lang)
    try:
        return render_advice_html(service.advise(scenario).to_dict())
    except UserError as exc:
        return f"<p class='adv-error'>{html.escape(exc.message(scenario['lang']))}</p>"


def run_with_state(service: Any, *form: Any) -> tuple[str, dict[str, Any] | None]:
    """The rendered result and the advice (kept for the trial button)."""
    scenario = scenario_from_form(*form)
    try:
        advice = service.advise(scenario).to_dict()
    except UserError as exc:
        return f"<p class='adv-error'>{html.escape(exc.message(scenario['lang']))}</p>", None
    return render_advice_html(advice), advice


# ---- the trial ------------------------------------------------------------------------------------
TRIAL_TASKS = [("— 从领域推断 / from the domain —", ""), ("表格 MLP / Tabular MLP", "mlp"),
               ("小型 CNN / Small CNN", "cnn"), ("微型 Transformer 语言模型 / Tiny Transformer LM", "lm")]


def run_trial(service: Any, advice: dict[str, Any] | None, task: str, steps: float, lang: str) -> Iterator[tuple[str, str]]:
    """Start the trial for the advice's two candidates and yield its progress (one bar per framework), then the report."""
    zh = lang == "zh"
    if not advice:
        yield f"<p class='adv-error'>{'请先给出建议。' if zh else 'Get the advice first.'}</p>", ""
        return
    try:
        req = TrialRequest(candidates_from_advice(advice), task=task or infer_task(advice["scenario"].get("domain", "")),
                           steps=int(steps), lang=lang if lang in ("zh", "en") else "zh")
        jobs = trial_jobs.jobs_for(service.settings.state_dir)
        job = jobs.submit(req)
    except UserError as exc:
        yield f"<p class='adv-error'>{html.escape(exc.message(lang))}</p>", ""
        return
    while job.status in ("queued", "running"):
        yield trial_progress_html(job.to_dict(), req.repeats, zh), job.id
        time.sleep(0.5)
    if job.status != "done":
        word = {"cancelled": "已停止" if zh else "Stopped", "failed": "失败" if zh else "Failed"}[job.status]
        yield f"<p class='adv-error'>{word} {html.escape(job.reason)}</p>", job.id
        return
    r = trial_report.load(service.settings.state_dir, job.id)
    yield trial_report.to_html(r, trial_report.load_svgs(service.settings.state_dir, job.id)), job.id


def stop_trial(service: Any, job_id: str) -> None:
    if job_id:
        trial_jobs.jobs_for(service.settings.state_dir).cancel(job_id)


def trial_progress_html(job: dict[str, Any], repeats: int, zh: bool) -> str:
    """One progress bar per framework (the steps of its runs), with the current run and step named."""
    runnable = [f for f in job["frameworks"] if f not in PLANNED]
    per = max(1, job["total"] // max(1, len(runnable)))
    rows = []
    for i, key in enumerate(job["frameworks"]):
        name = DISPLAY.get(key, key)
        if key in PLANNED:
            rows.append(f"<li>{_e(name)}: {'计划，未运行（需要 GPU）' if zh else 'planned, not run (needs a GPU)'}</li>")
            continue
        value = min(per, max(0, job["done"] - runnable.index(key) * per))
        what = ""
        if job["framework"] == name and job["phase"] == "train":
            what = (f" 第 {job['run']}/{repeats} 次运行，第 {job['step']}/{job['steps']} 步" if zh
                    else f" run {job['run']}/{repeats}, step {job['step']}/{job['steps']}")
        elif job["framework"] == name and job["phase"] == "install":
            what = " 准备环境…" if zh else " preparing its environment…"
        elif job["framework"] == name and job["phase"] == "probe":
            what = " 调试探针（print、pdb、形状错误）…" if zh else " debugging probes (print, pdb, shape error)…"
        rows.append(f"<li id='adv-trial-fw-{i}'>{_e(name)}{_e(what)}<br>"
                    f"<progress value='{value}' max='{per}'></progress></li>")
    head = "试验进行中" if zh else "Trial running"
    return f"<div class='adv-trial-progress'><b>{head}</b> ({_e(job['id'])})<ul>{''.join(rows)}</ul></div>"


# ---- rendering -----------------------------------------------------------------------------------
def advice_footer(advice: dict[str, Any] | None, lang: str) -> str:
    """The line under a chat answer that came from the Advisor: its ranking, and where the full result is."""
    if not advice:
        return ""
    ranking = " · ".join(f"{r['name']} {r['score']:.2f}" for r in advice["ranking"][:4])
    if lang == "zh":
        return f"\n\n*顾问排名：{ranking}。完整的对比表、理由和试用计划见“选型顾问”标签页（或 API 返回的 `advice`）。*"
    return (f"\n\n*Advisor ranking: {ranking}. The full comparison table, reasons and trial plan are in the Advisor tab "
            "(and in the API's `advice`).*")


def _refs(nums: list[int]) -> str:
    return "".join(f"<a href='#adv-cite-{n}' class='adv-ref'>[{n}]</a>" for n in nums)


def _e(s: Any) -> str:
    return html.escape(str(s))


def render_advice_html(a: dict[str, Any]) -> str:
    """A one-screen summary (recommendation, top reasons, what would change it, the trial plan), then the
    comparison table with every candidate's reasons and the sources, each folded."""
    zh = a["language"] == "zh"
    parts = [f"<div class='adv'><p class='adv-summary'><b>{_e(a.get('summary', ''))}</b></p>", "<ol class='adv-ranking'>"]
    for i, r in enumerate(a["ranking"][:3]):
        reasons = "".join(f"<li>{_e(x['text'])} {_refs(x['citations'])}</li>" for x in r["reasons"][:3]) if i == 0 else ""
        parts.append(f"<li><b>{_e(r['name'])}</b> <code>{r['score']:.3f}</code>{f'<ul>{reasons}</ul>' if reasons else ''}</li>")
    parts.append("</ol>")
    if a["what_would_change"]:
        items = "".join(f"<li>{_e(w['text'])} {_refs(w['citations'])}</li>" for w in a["what_would_change"][:3])
        parts.append(f"<h4>{'什么会改变结论' if zh else 'What would change the answer'}</h4><ul>{items}</ul>")
    tp = a["trial_plan"]
    parts.append(f"<h4>{'试验计划' if zh else 'Trial plan'}</h4><p>{_e(tp['text'])} {_refs(tp['citations'])} "
                 f"<small>{'测量' if zh else 'Measure'}: {_e(', '.join(tp['measure']))}</small></p>")
    ranking = []
    for r in a["ranking"]:
        reasons = "".join(f"<li>{_e(x['text'])} {_refs(x['citations'])}</li>" for x in r["reasons"])
        ranking.append(f"<li><b>{_e(r['name'])}</b> <code>{r['score']:.3f}</code><ul>{reasons}</ul></li>")
    steps = "".join(f"<li>{_e(s)}</li>" for s in tp["steps"])
    parts.append(f"<details class='adv-fold adv-table-fold'><summary>{'对比表与全部理由' if zh else 'Comparison table and all reasons'}"
                 f"</summary>{_table_html(a['table'], zh)}<ol class='adv-ranking-full'>{''.join(ranking)}</ol>"
                 f"<ol>{steps}</ol></details>")
    parts.append(f"<details class='adv-fold adv-sources-fold'><summary>{'来源' if zh else 'Sources'} ({len(a['citations'])})"
                 "</summary>" + "".join(_citation_html(c) for c in a["citations"]) + "</details>")
    return "".join(parts) + "</div>"


def _table_html(table: dict[str, Any], zh: bool) -> str:
    crits = table["criteria"]
    head = "".join(f"<th>{_e(table['labels'][c])}<br><small>×{table['weights'][c]:.2f}</small></th>" for c in crits)
    rows = []
    for row in table["rows"]:
        cells = "".join(f"<td title='{_e(row['cells'][c]['text'])}'><b>{row['cells'][c]['score']:.2f}</b> "
                        f"{_refs(row['cells'][c]['citations'])}<br><small>{_e(row['cells'][c]['text'])}</small></td>"
                        for c in crits)
        rows.append(f"<tr><th>{_e(row['name'])}</th>{cells}</tr>")
    first = "候选" if zh else "Candidate"
    return f"<table class='adv-table'><thead><tr><th>{first}</th>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"


def _citation_html(c: dict[str, Any]) -> str:
    path = c.get("path") or c["source"]
    heading = " › ".join(c["heading_path"])
    return (f"<details id='adv-cite-{c['n']}' class='adv-cite'><summary>[{c['n']}] {_e(c['title'])} — {_e(heading)}</summary>"
            f"<blockquote>{_e(c['snippet'])}</blockquote><p><code>{_e(path)}:{c['lines'][0]}-{c['lines'][1]}</code>"
            f" <small>{_e(c['source'])}</small></p></details>")
