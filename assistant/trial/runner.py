"""One trial: the same training script on each framework, measured side by side.

`run_trial(request, state_dir)` writes the data once (`data.npz`), then for every runnable framework:
ensures its environment (envs.py), renders its script (templates.py) and runs it `repeats` times under the
limits (limits.py), parsing the step log; then the three debuggability probes (a `print(loss)` and a
`breakpoint()` in the training step, and labels one row short). Frameworks that need GPUs to mean anything
(DeepSpeed, Megatron-LM, Colossal-AI) are planned, not run, with the command for a GPU machine. The result
is the report dict (report.py saves and renders it); `on_progress` sees each phase and step and `cancel`
(a threading.Event) kills the running child and stops the trial.
"""
from __future__ import annotations

import json
import re
import statistics
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..errors import UserError
from . import data as trial_data
from . import envs, limits, templates

ALIASES = {"pytorch": "pytorch", "torch": "pytorch", "jax": "jax", "flax": "jax", "tensorflow": "tensorflow",
           "tf": "tensorflow", "keras": "tensorflow", "paddlepaddle": "paddlepaddle", "paddle": "paddlepaddle",
           "飞桨": "paddlepaddle", "deepspeed": "deepspeed", "pytorch+deepspeed": "deepspeed",
           "megatron-lm": "megatron-lm", "megatron": "megatron-lm", "pytorch+megatron-lm": "megatron-lm",
           "colossal-ai": "colossal-ai", "colossalai": "colossal-ai"}
DISPLAY = {"pytorch": "PyTorch", "jax": "JAX", "tensorflow": "TensorFlow", "paddlepaddle": "PaddlePaddle",
           "deepspeed": "PyTorch + DeepSpeed", "megatron-lm": "PyTorch + Megatron-LM", "colossal-ai": "Colossal-AI"}
PLANNED = {
    "deepspeed": "deepspeed --num_gpus <N> train.py --deepspeed --deepspeed_config ds_config.json",
    "megatron-lm": "torchrun --nproc_per_node <N> pretrain_gpt.py --tensor-model-parallel-size <T> ...",
    "colossal-ai": "colossalai run --nproc_per_node <N> train.py",
}
MIN_STEPS, MAX_STEPS, MAX_REPEATS = 20, 5000, 5
PROBE_STEPS = 3
ProgressFn = Callable[[dict[str, Any]], None]


class Cancelled(Exception):
    pass


@dataclass
class TrialRequest:
    frameworks: list[str]
    task: str = "mlp"
    steps: int = 200
    warmup: int = 10
    repeats: int = 3
    data: str | None = None
    samples: int | None = None
    seed: int = 0
    threads: int = 1
    timeout_s: float = limits.DEFAULT_TIMEOUT_S
    memory_mb: int = limits.DEFAULT_MEMORY_MB
    probes: bool = True
    lang: str = "en"
    situation: str = ""
    planned: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        def bad(code: str, en: str, zh: str) -> UserError:
            return UserError(code, en, zh, 422)

        names = []
        for raw in self.frameworks:
            key = ALIASES.get(raw.strip().lower().replace(" ", ""))
            if key is None:
                raise bad("trial_unknown_framework", f"Unknown framework {raw!r}; choose from "
                          f"{', '.join(DISPLAY.values())}.", f"未知框架 {raw!r}；可选：{'、'.join(DISPLAY.values())}。")
            if key not in names:
                names.append(key)
        if not names or len(names) > 4:
            raise bad("trial_frameworks", "Name one to four frameworks.", "请指定 1 到 4 个框架。")
        self.planned = [n for n in names if n in PLANNED]
        self.frameworks = [n for n in names if n not in PLANNED]
        if self.task not in templates.TASKS:
            raise bad("trial_task", f"task must be one of {', '.join(templates.TASKS)}.",
                      f"任务必须是 {'、'.join(templates.TASKS)} 之一。")
        if not MIN_STEPS <= self.steps <= MAX_STEPS:
            raise bad("trial_steps", f"steps must be between {MIN_STEPS} and {MAX_STEPS}.",
                      f"步数必须在 {MIN_STEPS} 到 {MAX_STEPS} 之间。")
        self.warmup = max(1, min(self.warmup, self.steps // 2))
        if not 1 <= self.repeats <= MAX_REPEATS:
            raise bad("trial_repeats", f"repeats must be between 1 and {MAX_REPEATS}.", f"重复次数必须在 1 到 {MAX_REPEATS} 之间。")
        try:
            limits.Limits(self.timeout_s, self.memory_mb, self.threads)
        except ValueError as exc:
            raise bad("trial_limits", str(exc), f"限制参数无效：{exc}") from None
        if self.data:
            trial_data.check_path(self.data)
        if self.lang not in ("zh", "en"):
            self.lang = "en"


def infer_task(domain: str) -> str:
    """The task shape for an Advisor domain: language work gets the language model, vision the CNN."""
    if domain in ("chinese_nlp", "nlp", "llm_pretrain", "llm_finetune"):
        return "lm"
    return "cnn" if domain == "cv" else "mlp"


def candidates_from_advice(advice: dict[str, Any]) -> list[str]:
    """The Advisor's two trial candidates as framework keys (PyTorch + DeepSpeed -> deepspeed, planned)."""
    out = []
    for name in advice["trial_plan"]["candidates"]:
        key = ALIASES.get(name.strip().lower().replace(" ", ""))
        if key:
            out.append(key)
    return out


# ---- one framework -------------------------------------------------------------------------------
def _events(lines: list[str]) -> list[dict[str, Any]]:
    out = []
    for line in lines:
        if line.startswith("TRIAL "):
            try:
                out.append(json.loads(line[6:]))
            except ValueError:
                pass
    return out


def _measure(outcome: limits.Outcome, warmup: int, batch: int) -> dict[str, Any]:
    ev = _events(outcome.stdout)
    steps = [e for e in ev if e.get("event") == "step"]
    imported = next((e["t"] for e in ev if e.get("event") == "imported"), None)
    end = next((e for e in ev if e.get("event") == "end"), None)
    m: dict[str, Any] = {"ok": outcome.returncode == 0 and end is not None, "returncode": outcome.returncode,
                         "killed": outcome.killed, "wall_s": outcome.seconds, "import_s": imported,
                         "losses": [round(e["loss"], 5) for e in steps]}
    if steps:
        m["first_step_s"] = steps[0]["t"]
    if len(steps) > warmup + 1:
        a, b = steps[warmup], steps[-1]
        m["steps_per_s"] = round((b["step"] - a["step"]) / max(b["t"] - a["t"], 1e-9), 2)
        m["samples_per_s"] = round(m["steps_per_s"] * batch, 1)
    if end:
        m["peak_rss_mb"] = end["peak_rss_mb"]
    if not m["ok"]:
        m["error"] = _error_lines(outcome.stderr)[:4] or [f"exit {outcome.returncode} {outcome.killed}".strip()]
    return m


_EXC = re.compile(r"^([A-Za-z_][\w.]*(Error|Exception|Interrupt)|[\w.]*\.errors?\.[\w.]+)\b")


# JAX's note after its message that it filtered the traceback: not part of the message
_NOISE = re.compile(r"^-{8,}$|^For simplicity, JAX has removed")


def _error_lines(stderr: str) -> list[str]:
    """The final exception's first lines (its type and message), without the traceback before it."""
    lines = [ln.rstrip() for ln in stderr.splitlines()]
    idx = max((i for i, ln in enumerate(lines) if _EXC.match(ln)), default=None)
    if idx is None:
        return [ln for ln in lines if ln.strip()][-3:]
    nested = [ln.strip() for ln in lines[idx + 1:] if _EXC.match(ln.strip()) and ln.startswith(" ")]
    if nested:  # TensorFlow: "ValueError: in user code:", the frames, then the message itself, indented
        return [lines[idx], nested[-1]]
    return [ln for ln in lines[idx:idx + 4] if ln.strip() and not _NOISE.match(ln)]


def _user_frame(stderr: str, script: Path) -> dict[str, Any] | None:
    """The last traceback frame in the trial script: does the error point at the user's own line?"""
    found = None
    lines = stderr.splitlines()
    for i, ln in enumerate(lines):
        m = re.match(r'\s*File "([^"]+)", line (\d+)', ln)
        if m and Path(m[1]).name == script.name:
            code = lines[i + 1].strip() if i + 1 < len(lines) else ""
            found = {"line": int(m[2]), "code": code}
    return found


def _classify(text: str) -> str:
    if "Traced<" in text or "Tracer" in text:
        return "tracer"
    if re.search(r'Tensor\("[^"]*", shape=|<tf\.Tensor \'', text) or "KerasTensor" in text or "SymbolicTensor" in text:
        return "symbolic"
    return "values" if re.search(r"\d+\.\d+", text) else "other"


def _printed(stdout: list[str]) -> dict[str, Any]:
    """Which steps printed something, and what the first print looked like."""
    pending: list[str] = []
    per_step, sample = [], ""
    for line in stdout:
        if line.startswith("TRIAL "):
            ev = json.loads(line[6:]) if line[6:].startswith("{") else {}
            if ev.get("event") == "step":
                per_step.append(bool(pending))
                if pending and not sample:
                    sample = " ".join(s.strip() for s in pending)[:300]
                pending = []
        elif line.strip():
            pending.append(line)
    return {"steps": len(per_step), "printed_at": sum(per_step), "sample": sample,
            "shows": _classify(sample) if sample else "nothing"}


def _pdb(stdout: list[str]) -> dict[str, Any]:
    text = "\n".join(ln for ln in stdout if not ln.startswith("TRIAL "))
    stops = len(re.findall(r"(?m)^(?:\(Pdb\) )*> .+\(\d+\)\w+\(\)", text))
    # what `p loss` printed: the text between a prompt and the next one that is not a stop's location
    shown = [seg for seg in text.split("(Pdb) ")[1:] if seg.strip() and not seg.startswith("> ")]
    sample = " ".join(shown[0].split())[:300] if shown else ""
    steps = sum(1 for ln in stdout if 'TRIAL {"event": "step"' in ln)
    return {"stops": stops, "steps": steps, "sample": sample, "shows": _classify(sample) if sample else "nothing"}


def run_framework(fw: str, task: str, config: dict[str, Any], req: TrialRequest, run_dir: Path,
                  progress: ProgressFn, cancel: threading.Event | None) -> dict[str, Any]:
    name = DISPLAY[fw]
    progress({"phase": "install", "framework": name})
    env = envs.ensure(fw)
    lim = limits.Limits(req.timeout_s, req.memory_mb, req.threads)
    script = templates.render(fw, task, config)
    path = run_dir / f"{fw}_{task}.py"
    path.write_text(script.text, encoding="utf-8")
    runs = []
    for r in range(req.repeats):
        def on_line(line: str, r: int = r) -> None:
            if line.startswith('TRIAL {"event": "step"'):
                step = json.loads(line[6:])["step"]
                progress({"phase": "train", "framework": name, "run": r + 1, "step": step + 1, "steps": req.steps})
        outcome = limits.run([str(env.python), path.name], run_dir, lim, on_line=on_line, cancel=cancel)
        if outcome.killed == "cancelled":
            raise Cancelled()
        runs.append(_measure(outcome, req.warmup, config["batch"]))
        if not runs[-1]["ok"]:
            break
    result: dict[str, Any] = {
        "framework": name, "key": fw, "version": env.version, "task": task, "status": "ok",
        "loc": script.loc, "common_loc": script.common_loc, "concepts": templates.CONCEPTS[fw][req.lang],
        "api_names": templates.api_names(fw, script.body), "script": path.name,
        "install_s": env.install_s, "install_mb": env.size_mb, "env_reused": env.reused, "env": str(env.path),
        "runs": [{k: v for k, v in m.items() if k != "losses"} for m in runs],
        "debug_note": templates.DEBUG_DOCS[fw]}
    result["api_count"] = len(result["api_names"])
    good = [m for m in runs if m["ok"]]
    if len(good) < len(runs) or not good:
        result.update(status="failed", error=runs[-1].get("error", []))
    if good:
        rates = [m["steps_per_s"] for m in good if "steps_per_s" in m]
        losses = good[0]["losses"]
        tail = losses[-10:]
        result.update(
            first_step_s=round(statistics.median(m["first_step_s"] for m in good), 3),
            import_s=round(statistics.median(m["import_s"] for m in good), 3),
            steps_per_s=round(statistics.median(rates), 2) if rates else None,
            steps_per_s_spread=round(max(rates) - min(rates), 2) if rates else None,
            steps_per_s_runs=rates,
            samples_per_s=round(statistics.median(rates) * config["batch"], 1) if rates else None,
            peak_rss_mb=max(m["peak_rss_mb"] for m in good),
            loss_start=losses[0], loss_end=round(sum(tail) / len(tail), 5), losses=losses)
        result["loss_falls"] = result["loss_end"] < 0.9 * result["loss_start"]
    if req.probes and good:
        result.update(_probes(fw, task, config, env, lim, run_dir, progress, cancel))
    return result


def _probes(fw: str, task: str, config: dict[str, Any], env: envs.TrialEnv, lim: limits.Limits, run_dir: Path,
            progress: ProgressFn, cancel: threading.Event | None) -> dict[str, Any]:
    name = DISPLAY[fw]
    cfg = dict(config, steps=PROBE_STEPS)
    out: dict[str, Any] = {}
    for probe in templates.PROBES:
        progress({"phase": "probe", "framework": name, "probe": probe})
        script = templates.render(fw, task, cfg, probe=probe)
        path = run_dir / f"{fw}_{task}_{probe}.py"
        path.write_text(script.text, encoding="utf-8")
        stdin = "p loss\nc\n" * (PROBE_STEPS + 1) if probe == "pdb" else None
        outcome = limits.run([str(env.python), path.name], run_dir, lim, stdin=stdin, cancel=cancel)
        if outcome.killed == "cancelled":
            raise Cancelled()
        if probe == "print":
            p = _printed(outcome.stdout)
            out["eager_print"] = p["shows"]
            out["print_probe"] = p | {"ok": outcome.returncode == 0}
        elif probe == "pdb":
            out["pdb_probe"] = _pdb(outcome.stdout) | {"ok": outcome.returncode == 0}
            out["pdb_breakpoint"] = out["pdb_probe"]["shows"] if out["pdb_probe"]["stops"] else "did not stop"
        else:
            out["shape_error"] = {"raised": outcome.returncode != 0, "message": _error_lines(outcome.stderr),
                                  "points_to": _user_frame(outcome.stderr, path)}
    return out


# ---- the whole trial -----------------------------------------------------------------------------
def new_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S", time.gmtime()) + "-" + uuid.uuid4().hex[:6]


def trials_dir(state_dir: Path) -> Path:
    return Path(state_dir) / "trials"


def run_trial(req: TrialRequest, state_dir: Path, on_progress: ProgressFn | None = None,
              cancel: threading.Event | None = None, trial_id: str | None = None) -> dict[str, Any]:
    from . import report as trial_report

    progress = on_progress or (lambda _e: None)
    trial_id = trial_id or new_id()
    run_dir = trials_dir(state_dir) / trial_id
    run_dir.mkdir(parents=True, exist_ok=False)
    if req.data:
        arrays, spec = trial_data.load_user(req.data, req.task)
        source: dict[str, Any] = {"kind": "file", "name": Path(req.data).name}
    else:
        arrays, spec = trial_data.synthetic(req.task, req.seed, req.samples)
        source = {"kind": "synthetic"}
    trial_data.write(arrays, run_dir / "data.npz")
    config = dict(spec, data="data.npz", seed=req.seed, threads=req.threads, steps=req.steps)
    source |= {"samples": spec["samples"], "shapes": {k: list(v.shape) for k, v in arrays.items()}}
    started = time.time()
    results = []
    for fw in req.frameworks:
        if cancel is not None and cancel.is_set():
            raise Cancelled()
        try:
            results.append(run_framework(fw, req.task, config, req, run_dir, progress, cancel))
        except UserError as exc:  # an install that failed: the others still run
            results.append({"framework": DISPLAY[fw], "key": fw, "task": req.task, "status": "failed",
                            "error": [exc.message(req.lang)]})
    planned = [{"framework": DISPLAY[p], "key": p, "status": "planned", "command": PLANNED[p]} for p in req.planned]
    report = {"id": trial_id, "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
              "seconds": round(time.time() - started, 1), "task": req.task, "data": source,
              "config": {k: v for k, v in config.items() if k != "data"},
              "request": asdict(req) | {"data": Path(req.data).name if req.data else None},
              "results": results, "planned": planned, "language": req.lang,
              "machine": trial_report.machine()}
    trial_report.save(report, run_dir)
    progress({"phase": "done", "id": trial_id})
    return report
