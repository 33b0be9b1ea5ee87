"""Running one trial script in a child process with a time limit, a memory limit and a CPU budget.

The child is the environment's own python, never the caller's process. A two-line launcher (LAUNCHER, run by
this interpreter in the new process, then replaced by `exec`, so the PID stays) gives it `RLIMIT_AS` (address
space, the memory limit), `RLIMIT_CPU` (CPU seconds, a backstop to the wall-clock limit) and a CPU affinity of
`threads` cores (the same thread budget for every framework, whatever its own thread settings do); no
preexec_fn, which is unsafe in a threaded server. The child has its own session, so its process group is killed
as one: on the wall-clock limit, on `cancel` (a threading.Event set by the caller) and when the caller goes
away. stdout is read line by line as it comes (`on_line` sees each); stdin can be fed (the pdb probe).
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

DEFAULT_TIMEOUT_S = 300.0
DEFAULT_MEMORY_MB = 6144
MAX_TIMEOUT_S = 3600.0
MAX_MEMORY_MB = 16384
_STDERR_KEEP = 64 * 1024


@dataclass
class Limits:
    timeout_s: float = DEFAULT_TIMEOUT_S
    memory_mb: int = DEFAULT_MEMORY_MB
    threads: int = 1

    def __post_init__(self) -> None:
        if not 1 <= self.timeout_s <= MAX_TIMEOUT_S:
            raise ValueError(f"timeout_s must be within 1..{MAX_TIMEOUT_S:g}")
        if not 256 <= self.memory_mb <= MAX_MEMORY_MB:
            raise ValueError(f"memory_mb must be within 256..{MAX_MEMORY_MB}")
        if not 1 <= self.threads <= (os.cpu_count() or 1):
            raise ValueError(f"threads must be within 1..{os.cpu_count() or 1}")


@dataclass
class Outcome:
    returncode: int | None
    stdout: list[str] = field(default_factory=list)
    stderr: str = ""
    seconds: float = 0.0
    killed: str = ""  # "", "timeout" or "cancelled"
    pid: int = 0


def child_env(threads: int, extra: dict[str, str] | None = None) -> dict[str, str]:
    """A small environment: no inherited secrets, the thread variables every framework reads."""
    keep = ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "SSL_CERT_FILE", "SSL_CERT_DIR")
    env = {k: os.environ[k] for k in keep if k in os.environ}
    n = str(threads)
    env.update(OMP_NUM_THREADS=n, MKL_NUM_THREADS=n, OPENBLAS_NUM_THREADS=n, PYTHONUNBUFFERED="1",
               TF_CPP_MIN_LOG_LEVEL="2", PYTHONDONTWRITEBYTECODE="1", PYTHONBREAKPOINT="pdb.set_trace")
    env.update(extra or {})
    return env


LAUNCHER = ("import json, os, resource, sys; a = json.loads(sys.argv[1]); "
            "resource.setrlimit(resource.RLIMIT_AS, (a['mem'], a['mem'])); "
            "resource.setrlimit(resource.RLIMIT_CPU, (a['cpu'], a['cpu'] + 5)); "
            "os.sched_setaffinity(0, a['cores']); os.execvp(sys.argv[2], sys.argv[2:])")


def launch_command(cmd: list[str], limits: Limits) -> list[str]:
    """`cmd` behind the launcher that applies the limits and then becomes it."""
    cores = sorted(os.sched_getaffinity(0))[: limits.threads]
    spec = {"mem": limits.memory_mb * 2**20, "cpu": int(limits.timeout_s * limits.threads) + 10, "cores": cores}
    return [sys.executable, "-c", LAUNCHER, json.dumps(spec), *cmd]


def kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def run(cmd: list[str], cwd: Path, limits: Limits, env: dict[str, str] | None = None, stdin: str | None = None,
        on_line: Callable[[str], None] | None = None, cancel: threading.Event | None = None) -> Outcome:
    """Run `cmd` under the limits; returns when it exits or is killed (its whole process group)."""
    start = time.monotonic()
    proc = subprocess.Popen(launch_command(cmd, limits), cwd=cwd, env=env if env is not None else child_env(limits.threads),
                            stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, encoding="utf-8",
                            errors="replace", start_new_session=True)
    out = Outcome(None, pid=proc.pid)
    err_parts: list[str] = []

    def read_out() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            out.stdout.append(line.rstrip("\n"))
            if on_line:
                on_line(line.rstrip("\n"))

    def read_err() -> None:
        assert proc.stderr is not None
        size = 0
        for line in proc.stderr:
            if size < _STDERR_KEEP:
                err_parts.append(line)
                size += len(line)
            else:  # keep the tail: an exception's message comes last
                err_parts.append(line)
                err_parts.pop(0)

    readers = [threading.Thread(target=read_out, daemon=True), threading.Thread(target=read_err, daemon=True)]
    for t in readers:
        t.start()
    if stdin is not None:
        assert proc.stdin is not None
        try:
            proc.stdin.write(stdin)
            proc.stdin.close()
        except (BrokenPipeError, OSError):
            pass
    try:
        while proc.poll() is None:
            if cancel is not None and cancel.is_set():
                out.killed = "cancelled"
            elif time.monotonic() - start > limits.timeout_s:
                out.killed = "timeout"
            if out.killed:
                kill_group(proc.pid)
                break
            time.sleep(0.05)
    finally:
        if proc.poll() is None and not out.killed:  # the caller is going away (an exception, KeyboardInterrupt)
            kill_group(proc.pid)
        proc.wait()
    for t in readers:
        t.join(timeout=5)
    out.returncode = proc.returncode
    out.stderr = "".join(err_parts)
    out.seconds = round(time.monotonic() - start, 3)
    return out
