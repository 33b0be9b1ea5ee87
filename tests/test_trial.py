"""The trial (assistant/trial): templates, data validation, limits, and real trials end to end.

Fast: every template renders and parses with its probes; LOC and API names are counted; user data paths are
validated; the child limits hold for a real child (memory, wall clock with its grandchild, cancel, CPU
affinity); the article's claims are on their cited lines. Slow: a PyTorch and a JAX trial through the CLI
(real environments from requirements/trial/, real steps on synthetic data), the HTTP job with its progress
and a cancel that kills the child. trial_heavy (TRIAL_HEAVY=1, `make test-trial-heavy`): TensorFlow and
PaddlePaddle, whose environments are 1-2 GB each.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import numpy as np
import pytest

from assistant.errors import UserError
from assistant.trial import data, limits, report, runner, templates

REPO = Path(__file__).resolve().parents[1]
CFG = {"data": "data.npz", "seed": 0, "threads": 1, "steps": 5}


def _config(task: str) -> dict:
    return dict(data.DEFAULTS[task], **CFG)


# ---- templates -----------------------------------------------------------------------------------
@pytest.mark.parametrize("framework", templates.FRAMEWORKS)
@pytest.mark.parametrize("task", templates.TASKS)
def test_every_template_renders_and_the_probe_lands_in_the_step(framework: str, task: str) -> None:
    plain = templates.render(framework, task, _config(task))
    assert templates.MARKER not in plain.text and "breakpoint()" not in plain.text
    assert 15 < plain.loc < 60 and plain.common_loc > 10
    assert json.loads(plain.text.split('CFG = json.loads(r"""', 1)[1].split('"""', 1)[0])["task"] == task
    for probe, line in (("print", "print(loss)"), ("pdb", "breakpoint()")):
        s = templates.render(framework, task, _config(task), probe=probe)
        assert s.text.count(line) == 1 and s.loc == plain.loc + 1
        step = s.text[s.text.index("def train_step"):]
        assert line in step.split("\n\n\n")[0]  # inside the training step, not after it
    shape = templates.render(framework, task, _config(task), probe="shape")
    assert '"probe": "shape"' in shape.text and shape.body == plain.body
    names = templates.api_names(framework, plain.body)
    assert names and all(n.split(".")[0] in templates.API_ROOTS[framework] for n in names)


def test_loc_counts_code_only_and_bad_input_is_refused() -> None:
    assert templates.count_loc("import x\n\n# comment\n    # indented comment\ny = 1  # trailing\n") == 2
    assert templates.api_names("pytorch", "torch.optim.Adam(m)\nnn.Linear(1, 2)\ntorch.optim\n") == \
        ["nn.Linear", "torch.optim.Adam"]
    with pytest.raises(ValueError):
        templates.render("pytorch", "mlp", _config("mlp"), probe="exec")
    with pytest.raises(ValueError):
        templates.render("caffe", "mlp", _config("mlp"))
    odd = 'x"""; import os\\'  # a value that tries to end the embedded string: JSON escapes it, it stays data
    text = templates.render("pytorch", "mlp", dict(_config("mlp"), data=odd)).text
    assert json.loads(text.split('CFG = json.loads(r"""', 1)[1].split('""")', 1)[0])["data"] == odd


# ---- data ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("task", templates.TASKS)
def test_synthetic_data_has_the_stated_size_and_is_learnable(task: str) -> None:
    arrays, spec = data.synthetic(task, seed=0, samples=256)
    assert spec["samples"] == 256 and all(len(a) == 256 for a in arrays.values())
    if task == "lm":
        tok = arrays["tokens"]
        assert tok.shape == (256, spec["seq_len"] + 1) and tok.max() < spec["vocab"]
    else:
        assert set(np.unique(arrays["y"])) <= set(range(spec["classes"])) and len(np.unique(arrays["y"])) > 1
    with pytest.raises(UserError):
        data.synthetic(task, 0, samples=10)


def test_user_data_paths_are_validated(tmp_path: Path) -> None:
    def code(path, task="mlp") -> str:
        with pytest.raises(UserError) as e:
            data.load_user(path, task)
        assert e.value.message("zh") and e.value.message("en")
        return e.value.code

    assert code(tmp_path / "none.csv") == "trial_data_missing"
    assert code(tmp_path / "x.py") == "trial_data_type"
    (tmp_path / "dir.csv").mkdir()
    assert code(tmp_path / "dir.csv") == "trial_data_not_file"
    (tmp_path / "bad.csv").write_text("a,b\n1,x\n")
    assert code(tmp_path / "bad.csv") == "trial_data_unreadable"
    np.savez(tmp_path / "obj.npz", x=np.array([{"a": 1}] * 100, dtype=object), y=np.zeros(100))
    assert code(tmp_path / "obj.npz") == "trial_data_unreadable"  # no pickles
    np.savez(tmp_path / "few.npz", x=np.zeros((10, 3)), y=np.zeros(10))
    assert code(tmp_path / "few.npz") == "trial_data_size"
    np.savez(tmp_path / "lab.npz", x=np.zeros((100, 3)), y=np.full(100, 0.5))
    assert code(tmp_path / "lab.npz") == "trial_data_shape"
    assert code(tmp_path / "lab.npz", "lm") == "trial_data_shape"
    (tmp_path / "t.csv").write_text("f1,f2,label\n" + "".join(f"{i},{i % 7},{i % 3}\n" for i in range(200)))
    assert code(tmp_path / "t.csv", "cnn") == "trial_data_task"
    arrays, spec = data.load_user(tmp_path / "t.csv", "mlp")
    assert arrays["x"].shape == (200, 2) and spec["features"] == 2 and spec["classes"] == 3
    big = tmp_path / "big.npz"
    with open(big, "wb") as fh:
        fh.truncate(data.MAX_DATA_BYTES + 1)
    assert code(big) == "trial_data_too_large"


def test_a_trial_request_is_checked_before_anything_runs(tmp_path: Path) -> None:
    req = runner.TrialRequest(["PyTorch", "torch", "DeepSpeed", "paddle"])
    assert req.frameworks == ["pytorch", "paddlepaddle"] and req.planned == ["deepspeed"]
    for bad in ({"frameworks": ["caffe"]}, {"frameworks": []}, {"frameworks": ["jax"], "steps": 5},
                {"frameworks": ["jax"], "task": "gan"}, {"frameworks": ["jax"], "memory_mb": 10},
                {"frameworks": ["jax"], "data": str(tmp_path / "missing.npz")}):
        with pytest.raises(UserError) as e:
            runner.TrialRequest(**bad)
        assert e.value.status == 422
    advice = {"trial_plan": {"candidates": ["PyTorch", "PyTorch + DeepSpeed"]}}
    assert runner.candidates_from_advice(advice) == ["pytorch", "deepspeed"]
    assert runner.infer_task("chinese_nlp") == "lm" and runner.infer_task("cv") == "cnn"


def test_the_cli_refuses_bad_input_in_the_users_language(tmp_path: Path) -> None:
    def cli(*args: str, lang: str = "C.UTF-8") -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "assistant", "trial", "--state-dir", str(tmp_path), *args],
                              cwd=REPO, capture_output=True, text=True, timeout=120, env={**os.environ, "LANG": lang})

    done = cli("--frameworks", "caffe")
    assert done.returncode == 2 and "Unknown framework 'caffe'" in done.stderr and "Traceback" not in done.stderr
    done = cli("--frameworks", "pytorch", "--data", str(tmp_path / "missing.csv"), lang="zh_CN.UTF-8")
    assert done.returncode == 2 and "文件不存在" in done.stderr
    assert not (tmp_path / "trials").exists()  # nothing ran, nothing was saved


# ---- limits --------------------------------------------------------------------------------------
def test_the_memory_limit_stops_a_child_that_allocates_too_much(tmp_path: Path) -> None:
    code = "b = bytearray(600 * 2**20); print('allocated')"
    out = limits.run([sys.executable, "-c", code], tmp_path, limits.Limits(timeout_s=30, memory_mb=300))
    assert out.returncode != 0 and "MemoryError" in out.stderr and "allocated" not in out.stdout
    ok = limits.run([sys.executable, "-c", code], tmp_path, limits.Limits(timeout_s=30, memory_mb=2048))
    assert ok.returncode == 0 and ok.stdout == ["allocated"]


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


def test_the_time_limit_and_cancel_kill_the_whole_process_group(tmp_path: Path) -> None:
    # the child starts a grandchild and both sleep; the group is killed, the grandchild too
    code = ("import subprocess, sys, time; p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']);"
            "print(p.pid, flush=True); time.sleep(60)")
    start = time.monotonic()
    out = limits.run([sys.executable, "-c", code], tmp_path, limits.Limits(timeout_s=2))
    assert out.killed == "timeout" and time.monotonic() - start < 10
    grandchild = int(out.stdout[0])
    deadline = time.monotonic() + 5
    while _alive(grandchild) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(out.pid) and not _alive(grandchild)
    cancel = threading.Event()
    threading.Timer(1.0, cancel.set).start()
    out = limits.run([sys.executable, "-c", code], tmp_path, limits.Limits(timeout_s=60), cancel=cancel)
    assert out.killed == "cancelled" and out.seconds < 10 and not _alive(out.pid)


def test_the_child_gets_its_cpu_budget_and_a_small_environment(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("ASSISTANT_API_KEYS", "secret-key")
    code = "import os, json; print(json.dumps([sorted(os.sched_getaffinity(0)), os.environ.get('OMP_NUM_THREADS'), " \
           "'ASSISTANT_API_KEYS' in os.environ]))"
    out = limits.run([sys.executable, "-c", code], tmp_path, limits.Limits(timeout_s=30, threads=1))
    cores, omp, leaked = json.loads(out.stdout[0])
    assert len(cores) == 1 and omp == "1" and leaked is False
    with pytest.raises(ValueError):
        limits.Limits(threads=(os.cpu_count() or 1) + 1)


# ---- report --------------------------------------------------------------------------------------
def test_every_claim_is_quoted_from_its_cited_line_of_the_article() -> None:
    assert report.article_lines() is not None
    assert report.unverified_claims() == []
    srcs = report.sources("en")
    assert [s["n"] for s in srcs] == list(range(1, len(srcs) + 1)) and srcs[-1]["line"] == 81


def test_a_trial_id_that_is_not_one_is_not_found(tmp_path: Path) -> None:
    for bad in ("../../etc/passwd", "", "20260101-000000-zzzzzz", "20260101-000000-abcdef"):
        with pytest.raises(UserError) as e:
            report.load(tmp_path, bad)
        assert e.value.status == 404
    assert report.list_trials(tmp_path) == []


# ---- real trials ---------------------------------------------------------------------------------
def _cli_trial(tmp_path: Path, frameworks: str, task: str = "mlp", steps: int = 60) -> dict:
    done = subprocess.run([sys.executable, "-m", "assistant", "trial", "--frameworks", frameworks, "--task", task,
                           "--steps", str(steps), "--state-dir", str(tmp_path), "--json"],
                          cwd=REPO, capture_output=True, text=True, timeout=1800)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)


def _check_sense(r: dict, steps: int) -> None:
    assert r["status"] == "ok", r.get("error")
    assert r["loc"] > 10 and r["api_count"] > 3 and r["concepts"]
    assert r["loss_end"] < 0.9 * r["loss_start"] and r["loss_falls"] is True
    assert r["steps_per_s"] > 0 and r["samples_per_s"] > 0 and len(r["steps_per_s_runs"]) == 3
    assert 0 < r["import_s"] < r["first_step_s"]
    assert r["peak_rss_mb"] > 50 and r["install_mb"] > 100 and r["install_s"] > 0
    assert len(r["losses"]) == steps
    assert r["shape_error"]["raised"] and r["shape_error"]["message"]
    assert r["shape_error"]["points_to"]["line"] > 0  # the traceback names the script's own line


@pytest.mark.slow
def test_a_pytorch_trial_end_to_end(tmp_path: Path) -> None:
    rep = _cli_trial(tmp_path, "pytorch")
    (r,) = rep["results"]
    _check_sense(r, 60)
    # PyTorch is eager: print shows the value at every step, pdb stops at every step and shows values
    assert r["eager_print"] == "values" and r["print_probe"]["printed_at"] == r["print_probe"]["steps"] == 3
    assert r["print_probe"]["sample"].startswith("tensor(")
    assert r["pdb_probe"]["stops"] == 3 and r["pdb_breakpoint"] == "values"
    assert "batch_size" in r["shape_error"]["message"][0]
    saved = tmp_path / "trials" / rep["id"]
    for name in ("report.json", "report.md", "report.html", "loss.svg", "speed.svg", "pytorch_mlp.py", "data.npz"):
        assert (saved / name).exists(), name
    assert "<svg" in (saved / "report.html").read_text()
    listed = subprocess.run([sys.executable, "-m", "assistant", "trial", "--list", "--state-dir", str(tmp_path)],
                            cwd=REPO, capture_output=True, text=True, timeout=120)
    assert rep["id"] in listed.stdout


@pytest.mark.slow
def test_a_jax_trial_end_to_end(tmp_path: Path) -> None:
    (r,) = _cli_trial(tmp_path, "jax")["results"]
    _check_sense(r, 60)
    # under jit, print runs once, at tracing, and shows a tracer, not a value (JAX's documented behaviour);
    # pdb stops once, at tracing, on the tracer
    assert r["eager_print"] == "tracer" and r["print_probe"]["printed_at"] == 1
    assert "Tracer" in r["print_probe"]["sample"]
    assert r["pdb_probe"]["stops"] == 1 and r["pdb_breakpoint"] == "tracer"


@pytest.mark.slow
def test_the_http_job_reports_progress_and_cancel_kills_the_child(scripted_service, tmp_path: Path) -> None:
    from httpkit import ThreadServer

    from ui.server import create_app

    svc = scripted_service(state_dir=tmp_path)
    server = ThreadServer(create_app(svc, with_ui=False, load=False)).start()
    try:
        bad = httpx.post(server.url + "/api/trials", json={"frameworks": ["caffe"], "task": "mlp"}, timeout=30)
        assert bad.status_code == 422 and bad.json()["error"]["code"] == "trial_unknown_framework"
        r = httpx.post(server.url + "/api/trials", json={"frameworks": ["pytorch"], "task": "mlp", "steps": 40,
                                                         "repeats": 1, "probes": False}, timeout=30)
        assert r.status_code == 202
        tid = r.json()["id"]
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            body = httpx.get(f"{server.url}/api/trials/{tid}", timeout=30).json()
            if body["job"]["status"] not in ("queued", "running"):
                break
            time.sleep(0.2)
        assert body["job"]["status"] == "done" and body["job"]["done"] == body["job"]["total"] == 40
        assert body["report"]["results"][0]["loss_falls"] is True
        md = httpx.get(f"{server.url}/api/trials/{tid}?format=markdown", timeout=30)
        assert md.status_code == 200 and "| Training speed" in md.text
        page = httpx.get(f"{server.url}/api/trials/{tid}?format=html", timeout=30)
        assert page.status_code == 200 and "<svg" in page.text and "trial-table" in page.text
        assert tid in [t["id"] for t in httpx.get(server.url + "/api/trials", timeout=30).json()["trials"]]
        # a long trial, cancelled while it trains: the job ends cancelled and its child is gone
        r = httpx.post(server.url + "/api/trials", json={"frameworks": ["pytorch"], "task": "lm", "steps": 2000,
                                                         "repeats": 1, "probes": False}, timeout=30)
        tid = r.json()["id"]
        while (job := httpx.get(f"{server.url}/api/trials/{tid}", timeout=30).json()["job"])["phase"] != "train":
            time.sleep(0.2)
        time.sleep(2)
        later = httpx.get(f"{server.url}/api/trials/{tid}", timeout=30).json()["job"]
        assert later["step"] > job["step"] and later["steps"] == 2000 and 0 < later["done"] < later["total"]
        script = str(tmp_path / "trials" / tid)
        assert _children_in(script)
        assert httpx.post(f"{server.url}/api/trials/{tid}/cancel", timeout=30).status_code == 200
        deadline = time.monotonic() + 30
        while httpx.get(f"{server.url}/api/trials/{tid}", timeout=30).json()["job"]["status"] == "running":
            assert time.monotonic() < deadline
            time.sleep(0.2)
        assert httpx.get(f"{server.url}/api/trials/{tid}", timeout=30).json()["job"]["status"] == "cancelled"
        assert not _children_in(script)
        assert httpx.get(f"{server.url}/api/trials/20990101-000000-abcdef", timeout=30).status_code == 404
    finally:
        server.stop()
        svc.close()


def _children_in(cwd: str) -> list[int]:
    """PIDs of live processes whose working directory is `cwd` (the trial's run directory)."""
    out = []
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                if os.readlink(p / "cwd") == cwd and _alive(int(p.name)):
                    out.append(int(p.name))
            except OSError:
                pass
    return out


heavy = pytest.mark.skipif(not os.environ.get("TRIAL_HEAVY"), reason="TRIAL_HEAVY=1 (make test-trial-heavy)")


@pytest.mark.slow
@pytest.mark.trial_heavy
@heavy
@pytest.mark.parametrize("framework", ["tensorflow", "paddlepaddle"])
def test_heavy_framework_trials(tmp_path: Path, framework: str) -> None:
    (r,) = _cli_trial(tmp_path, framework)["results"]
    _check_sense(r, 60)
    if framework == "tensorflow":  # tf.function traces: print and pdb see symbolic tensors, at tracing only
        assert r["eager_print"] == "symbolic" and r["print_probe"]["printed_at"] == 1
        assert r["pdb_breakpoint"] == "symbolic" and r["pdb_probe"]["stops"] < 3
        assert "same shape" in r["shape_error"]["message"][-1]  # the message under TF's "in user code:"
    else:  # PaddlePaddle's dynamic graph: values at every step
        assert r["eager_print"] == "values" and r["print_probe"]["printed_at"] == 3
        assert r["pdb_breakpoint"] == "values" and r["pdb_probe"]["stops"] == 3


@pytest.mark.slow
def test_the_advisor_tabs_trial_button_shows_progress_then_the_report(tmp_path: Path) -> None:
    pytest.importorskip("gradio")
    from types import SimpleNamespace

    from ui.advisor_tab import run_trial

    svc = SimpleNamespace(settings=SimpleNamespace(state_dir=tmp_path))  # the handler only needs the state dir
    assert "adv-error" in next(run_trial(svc, None, "", 50, "en"))[0]  # no advice yet: says so, runs nothing
    advice = {"trial_plan": {"candidates": ["PyTorch", "PyTorch + DeepSpeed"]}, "scenario": {"domain": "general"}}
    frames = [html for html, _job in run_trial(svc, advice, "", 50, "en")]
    assert any("<progress" in f and "step" in f for f in frames[:-1])  # a bar per framework while it trains
    assert "planned, not run" in frames[0]
    last = frames[-1]
    assert "<svg" in last and "Training speed" in last and "PyTorch + DeepSpeed" in last
    assert "trial-table" in last and "mlp" in last  # the task came from the domain (general -> mlp)
