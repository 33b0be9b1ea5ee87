"""One virtual environment per trial framework, built exactly from its hash-pinned lock, cached and reused.

`requirements/trial/<framework>.txt` (written by `make lock` from the `.in` beside it) pins every package by
hash, pip included. `ensure(framework)` builds `<cache>/trial-envs/<framework>-<lock hash>/` with
tools/locked_install.py (`install` then `check`), once: a changed lock is a new key and a new environment; a
build that died midway (no `env.json`) is removed and done again. `env.json` records what the report shows:
the install time and size, the lock hash and the framework's version. A file lock keeps two trials from
building the same environment at once. Standard library only.
"""
from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from ..errors import UserError
from ..llm.wheelhouse import cache_root

ROOT = Path(__file__).resolve().parents[2]
LOCK_DIR = ROOT / "requirements" / "trial"
INSTALLER = ROOT / "tools" / "locked_install.py"
# framework -> the distribution whose version the report names
DISTRIBUTION = {"pytorch": "torch", "jax": "jax", "tensorflow": "tensorflow-cpu", "paddlepaddle": "paddlepaddle"}
INSTALL_TIMEOUT_S = 1800.0


@dataclass
class TrialEnv:
    framework: str
    path: Path
    lock_hash: str
    version: str
    install_s: float
    size_mb: float
    reused: bool = False

    @property
    def python(self) -> Path:
        return self.path / "bin" / "python"

    def to_dict(self) -> dict:
        d = asdict(self)
        d["path"] = str(self.path)
        return d


def lock_path(framework: str) -> Path:
    if framework not in DISTRIBUTION:
        raise UserError("trial_unknown_framework", f"No trial environment for {framework!r}.",
                        f"没有 {framework!r} 的试验环境。", 422)
    return LOCK_DIR / f"{framework}.txt"


def lock_hash(framework: str) -> str:
    return hashlib.sha256(lock_path(framework).read_bytes()).hexdigest()[:12]


def env_dir(framework: str, root: Path | None = None) -> Path:
    return (root or cache_root()) / "trial-envs" / f"{framework}-{lock_hash(framework)}"


def _size_mb(path: Path) -> float:
    total = 0
    for dirpath, _dirs, files in os.walk(path):
        for name in files:
            p = os.path.join(dirpath, name)
            if not os.path.islink(p):
                total += os.path.getsize(p)
    return round(total / 2**20, 1)


def _version(python: Path, dist: str) -> str:
    done = subprocess.run([str(python), "-c", f"import importlib.metadata as m; print(m.version({dist!r}))"],
                          capture_output=True, text=True, timeout=60)
    return done.stdout.strip() or "?"


def cached(framework: str, root: Path | None = None) -> TrialEnv | None:
    """The environment when it is built and complete, else None (no building)."""
    record = env_dir(framework, root) / "env.json"
    if not record.exists():
        return None
    data = json.loads(record.read_text(encoding="utf-8"))
    data["path"] = Path(data["path"])
    return TrialEnv(**(data | {"reused": True}))


def ensure(framework: str, root: Path | None = None, log: Callable[[str], None] | None = None) -> TrialEnv:
    """The framework's environment, built from its lock the first time (minutes: the wheels are large)."""
    say = log or (lambda _m: None)
    lock = lock_path(framework)
    target = env_dir(framework, root)
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / f".{target.name}.lock", "w") as guard:
        fcntl.flock(guard, fcntl.LOCK_EX)
        env = cached(framework, root)
        if env is not None:
            return env
        if target.exists():  # a build that did not finish
            shutil.rmtree(target)
        say(f"installing the {framework} environment from {lock.relative_to(ROOT)} into {target}")
        start = time.perf_counter()
        for verb in (["install", "--venv", str(target), str(lock)], ["check", "--venv", str(target)]):
            done = subprocess.run([sys.executable, str(INSTALLER), *verb], capture_output=True, text=True,
                                  timeout=INSTALL_TIMEOUT_S)
            if done.returncode != 0:
                shutil.rmtree(target, ignore_errors=True)
                tail = (done.stdout + done.stderr).strip().splitlines()[-5:]
                raise UserError("trial_install_failed", f"Installing the {framework} environment failed: "
                                + " | ".join(tail), f"{framework} 环境安装失败：" + " | ".join(tail), 500)
        install_s = round(time.perf_counter() - start, 1)
        env = TrialEnv(framework, target, lock_hash(framework),
                       _version(target / "bin" / "python", DISTRIBUTION[framework]), install_s, _size_mb(target))
        (target / "env.json").write_text(json.dumps(env.to_dict(), indent=2), encoding="utf-8")
        say(f"{framework} environment ready: {env.size_mb} MB in {install_s} s")
        return env
