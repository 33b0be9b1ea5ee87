"""Trials as background jobs: one at a time (they use the machine's cores), with progress and cancel.

`jobs_for(state_dir)` is the one TrialJobs of a state directory in this process (the HTTP routes and the UI's
button share it). `submit(request)` validates and queues; the worker thread runs `runner.run_trial`, whose
progress events fill the job: the phase, the framework, the run and step (`step`/`steps`, for the UI's
progress bar) and `done`/`total` over all training steps of the trial. `cancel(id)` sets the job's event,
which kills the running child's process group (limits.run) and ends the job as "cancelled". Jobs live in
memory; finished trials are on disk (report.list_trials / report.load).
"""
from __future__ import annotations

import logging
import queue
import threading
import time
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Literal

from ..errors import UserError
from .runner import Cancelled, TrialRequest, new_id, run_trial

log = logging.getLogger(__name__)
Status = Literal["queued", "running", "done", "failed", "cancelled"]
MAX_QUEUED = 4


@dataclass
class TrialJob:
    id: str
    frameworks: list[str]
    task: str
    status: Status = "queued"
    phase: str = "queued"
    framework: str = ""
    run: int = 0
    step: int = 0
    steps: int = 0
    done: int = 0  # training steps done, over every framework and run
    total: int = 0
    reason: str = ""
    created: float = field(default_factory=time.time)
    finished: float | None = None
    cancel: threading.Event = field(default_factory=threading.Event, repr=False)
    request: TrialRequest | None = field(default=None, repr=False)
    _seen: dict[str, int] = field(default_factory=dict, repr=False)

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name not in ("cancel", "request", "_seen")}

    def on_progress(self, event: dict[str, Any]) -> None:
        self.phase = event["phase"]
        self.framework = event.get("framework", self.framework)
        if event["phase"] == "train":
            self.run, self.step, self.steps = event["run"], event["step"], event["steps"]
            key = f"{self.framework}/{self.run}"
            self._seen[key] = self.step
            self.done = sum(self._seen.values())


class TrialJobs:
    def __init__(self, state_dir: Path) -> None:
        self.state_dir = Path(state_dir)
        self._jobs: dict[str, TrialJob] = {}
        self._queue: queue.Queue[TrialJob] = queue.Queue()
        self._lock = threading.Lock()
        self._worker = threading.Thread(target=self._work, name="trial-jobs", daemon=True)
        self._worker.start()

    def submit(self, req: TrialRequest) -> TrialJob:
        with self._lock:
            waiting = sum(1 for j in self._jobs.values() if j.status in ("queued", "running"))
            if waiting >= MAX_QUEUED:
                raise UserError("trial_busy", "Too many trials are waiting; try again when one has finished.",
                                "等待中的试验太多，请在一个试验结束后再试。", 429)
            job = TrialJob(new_id(), [*req.frameworks, *req.planned], req.task, request=req,
                           total=len(req.frameworks) * req.repeats * req.steps)
            self._jobs[job.id] = job
        self._queue.put(job)
        return job

    def job(self, job_id: str) -> TrialJob | None:
        return self._jobs.get(job_id)

    def cancel(self, job_id: str) -> TrialJob | None:
        job = self._jobs.get(job_id)
        if job is not None and job.status in ("queued", "running"):
            job.cancel.set()
        return job

    def wait(self, job_id: str, timeout: float | None = None) -> TrialJob:
        end = None if timeout is None else time.monotonic() + timeout
        job = self._jobs[job_id]
        while job.status in ("queued", "running") and (end is None or time.monotonic() < end):
            time.sleep(0.1)
        return job

    def _work(self) -> None:
        while True:
            job = self._queue.get()
            if job.cancel.is_set():
                job.status, job.phase, job.finished = "cancelled", "cancelled", time.time()
                continue
            job.status = "running"
            try:
                assert job.request is not None
                run_trial(job.request, self.state_dir, on_progress=job.on_progress, cancel=job.cancel,
                          trial_id=job.id)
                job.status, job.phase = "done", "done"
            except Cancelled:
                job.status, job.phase = "cancelled", "cancelled"
            except UserError as exc:
                job.status, job.reason = "failed", exc.message(job.request.lang if job.request else "en")
            except Exception as exc:  # a bug must not kill the worker; the job says what happened
                log.exception("trial %s failed", job.id)
                job.status, job.reason = "failed", f"{type(exc).__name__}: {exc}"
            job.finished = time.time()


_REGISTRY: dict[Path, TrialJobs] = {}
_REGISTRY_LOCK = threading.Lock()


def jobs_for(state_dir: Path) -> TrialJobs:
    key = Path(state_dir).resolve()
    with _REGISTRY_LOCK:
        if key not in _REGISTRY:
            _REGISTRY[key] = TrialJobs(key)
        return _REGISTRY[key]
