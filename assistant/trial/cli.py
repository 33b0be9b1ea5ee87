"""The `assistant trial` options and output.

`add_arguments(parser)` adds the options; `run(args, settings, service)` picks the frameworks (named, or the
Advisor's two trial candidates for `--situation`), the task (named, or inferred from the situation's domain),
runs the trial with progress on stderr and prints the Markdown report or, with `--json`, the report object
(`{"results": [{"framework", "loc", "first_step_s", "steps_per_s", "peak_rss_mb", "loss_start", "loss_end",
"eager_print", ...}], ...}`). `--list` and `--show ID` read saved trials.
"""
from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..lang import detect_language
from . import limits, report, templates
from .runner import TrialRequest, candidates_from_advice, infer_task, run_trial


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--frameworks", help="comma-separated: pytorch,jax,tensorflow,paddlepaddle (deepspeed, megatron-lm, "
                   "colossal-ai are planned, not run, without a GPU); default: the Advisor's two candidates")
    p.add_argument("--situation", help="the team's situation (zh or en): the Advisor picks the two candidates and the "
                   "task from it when --frameworks / --task are not given")
    p.add_argument("--task", choices=templates.TASKS, help="mlp (tabular), cnn (image-shaped), lm (tiny Transformer "
                   "language model); default: from the situation's domain, else mlp")
    p.add_argument("--steps", type=int, default=200, help="training steps per run (default 200)")
    p.add_argument("--repeats", type=int, default=3, help="timed runs per framework (default 3; median and spread)")
    p.add_argument("--data", metavar="FILE", help="your data: .csv (features..., integer label) or .npz (x, y | tokens)")
    p.add_argument("--samples", type=int, help="synthetic samples (default per task)")
    p.add_argument("--threads", type=int, default=1, help="CPU cores for every framework (default 1)")
    p.add_argument("--timeout", type=float, default=limits.DEFAULT_TIMEOUT_S, help="seconds per run (default 300)")
    p.add_argument("--memory-mb", type=int, default=limits.DEFAULT_MEMORY_MB, help="address-space limit per run")
    p.add_argument("--no-probes", action="store_true", help="skip the print / pdb / shape-error probes")
    p.add_argument("--state-dir", help="where trials are saved: <state dir>/trials/<id>/ (env ASSISTANT_STATE_DIR)")
    p.add_argument("--lang", choices=["zh", "en"], help="report language (default: the situation's, else en)")
    p.add_argument("--json", action="store_true", help="print the report as one JSON object")
    p.add_argument("--list", action="store_true", help="list the saved trials and exit")
    p.add_argument("--show", metavar="ID", help="print a saved trial's report and exit")


def state_dir(args: argparse.Namespace) -> Path:
    """--state-dir, else the settings' state directory (env ASSISTANT_STATE_DIR)."""
    from ..settings import load_settings

    return Path(args.state_dir) if args.state_dir else load_settings().state_dir


def _progress(event: dict[str, Any]) -> None:
    phase = event["phase"]
    if phase == "train":
        if event["step"] == event["steps"] or event["step"] % 50 == 0:
            print(f"  {event['framework']} run {event['run']}: step {event['step']}/{event['steps']}", file=sys.stderr)
    elif phase == "install":
        print(f"{event['framework']}: environment (built once from requirements/trial/, then reused)", file=sys.stderr)
    elif phase == "probe":
        print(f"  {event['framework']} probe: {event['probe']}", file=sys.stderr)


def run(args: argparse.Namespace, state_dir: Any, service: Callable[[], Any]) -> int:
    if args.list:
        for t in report.list_trials(state_dir):
            print(f"{t['id']}  {t['task']:4} {', '.join(t['frameworks'])}  {t['markdown']}")
        return 0
    if args.show:
        r = report.load(state_dir, args.show)
        print(json.dumps(r, ensure_ascii=False, indent=2) if args.json else report.to_markdown(r))
        return 0
    lang = args.lang or (detect_language(args.situation) if args.situation else "en")
    frameworks = [f for f in (args.frameworks or "").split(",") if f.strip()]
    task = args.task
    if not frameworks or (not task and args.situation):  # the Advisor decides what the user left open
        advice = service().advise({"text": args.situation or "", "lang": lang}).to_dict()
        frameworks = frameworks or candidates_from_advice(advice)
        task = task or infer_task(advice["scenario"].get("domain", "general"))
        print(f"Advisor: {advice['summary']}", file=sys.stderr)
    task = task or "mlp"
    req = TrialRequest(frameworks, task=task, steps=args.steps, repeats=args.repeats, data=args.data,
                       samples=args.samples, threads=args.threads, timeout_s=args.timeout, memory_mb=args.memory_mb,
                       probes=not args.no_probes, lang=lang, situation=args.situation or "")
    r = run_trial(req, state_dir, on_progress=_progress)
    if args.json:
        print(json.dumps(r, ensure_ascii=False, indent=2))
    else:
        print(report.to_markdown(r))
        print(f"saved: {state_dir}/trials/{r['id']}/report.md (and report.html, report.json)", file=sys.stderr)
    return 0 if all(x.get("status") == "ok" for x in r["results"]) else 1
