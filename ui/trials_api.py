"""The trial routes under /api: start a trial (a job, 202), its progress and report, cancel it, list the saved ones.
They only speak HTTP; assistant/trial (jobs.py, runner.py, report.py) does the work. A trial over HTTP uses
synthetic data only (a server never opens a path a client names; `assistant trial --data FILE` takes the
user's own file). With keys configured every route here needs one (ui/auth.py)."""
from __future__ import annotations

from typing import Any, Literal

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse
from pydantic import ConfigDict, Field, StrictBool
from starlette.concurrency import run_in_threadpool

from assistant.errors import UserError
from assistant.trial import jobs, report, runner

from .admission import rate_limit
from .auth import bearer_scheme
from .deps import ServiceDep, request_lang
from .schemas import COMMON_ERRORS, RequestBody, error_responses

router = APIRouter(prefix="/api", tags=["trials"], dependencies=[Depends(bearer_scheme)], responses=COMMON_ERRORS)


class TrialBody(RequestBody):
    model_config = ConfigDict(extra="forbid", strict=True)

    frameworks: list[str] | None = Field(default=None, max_length=4, examples=[["pytorch", "jax"]],
                                         description="pytorch, jax, tensorflow, paddlepaddle (deepspeed, megatron-lm, "
                                         "colossal-ai: planned, not run); omit for the Advisor's two candidates")
    situation: str = Field(default="", max_length=2000, description="the team's situation, for the Advisor")
    task: Literal["mlp", "cnn", "lm"] | None = Field(default=None, description="default: from the situation's domain")
    steps: int = Field(default=200, ge=runner.MIN_STEPS, le=2000)
    repeats: int = Field(default=3, ge=1, le=runner.MAX_REPEATS)
    probes: StrictBool = True
    lang: Literal["zh", "en"] | None = None


def _jobs(service: Any) -> jobs.TrialJobs:
    return jobs.jobs_for(service.settings.state_dir)


def build_request(service: Any, body: TrialBody, lang: str) -> runner.TrialRequest:
    """The trial a body asks for: the named frameworks and task, or the Advisor's candidates and task."""
    frameworks: list[str] = list(body.frameworks or [])
    task: str | None = body.task
    if not frameworks or (not task and body.situation.strip()):
        advice = service.advise({"text": body.situation, "lang": lang}).to_dict()
        frameworks = frameworks or runner.candidates_from_advice(advice)
        task = task or runner.infer_task(advice["scenario"].get("domain", "general"))
    return runner.TrialRequest(frameworks, task=task or "mlp", steps=body.steps, repeats=body.repeats, probes=body.probes,
                               lang=lang, situation=body.situation)


@router.post("/trials", status_code=202, dependencies=[Depends(rate_limit)],
             summary="Run the same small training script on two frameworks and measure them (a job: GET "
             "/api/trials/{id})", responses=error_responses(422, 429))
async def start(body: TrialBody, request: Request, service: ServiceDep) -> JSONResponse:
    lang = body.lang or request_lang(request, body.situation)
    request.state.lang = lang
    req = await run_in_threadpool(build_request, service, body, lang)
    job = _jobs(service).submit(req)
    return JSONResponse({"id": job.id, "job": job.to_dict()}, status_code=202)


@router.get("/trials", summary="The saved trials, newest first")
async def saved(service: ServiceDep) -> dict[str, Any]:
    return {"trials": await run_in_threadpool(report.list_trials, service.settings.state_dir)}


@router.get("/trials/{trial_id}", summary="A trial's progress (job) and, when done, its report",
            responses=error_responses(404))
async def show(trial_id: str, service: ServiceDep, format: Literal["json", "markdown", "html"] = "json") -> Any:
    job = _jobs(service).job(trial_id)
    out: dict[str, Any] = {"id": trial_id, "job": job.to_dict() if job else None, "report": None}
    if job is None or job.status == "done":
        r = await run_in_threadpool(report.load, service.settings.state_dir, trial_id)
        if format != "json":
            from fastapi.responses import HTMLResponse, PlainTextResponse

            return (PlainTextResponse(report.to_markdown(r)) if format == "markdown"
                    else HTMLResponse(report.to_html(r, report.load_svgs(service.settings.state_dir, trial_id))))
        out["report"] = r
    return out


@router.post("/trials/{trial_id}/cancel", summary="Stop a queued or running trial (its child process is killed)",
             responses=error_responses(404))
async def cancel(trial_id: str, service: ServiceDep) -> dict[str, Any]:
    job = _jobs(service).cancel(trial_id)
    if job is None:
        raise UserError("trial_not_found", f"No running trial {trial_id!r}.", f"没有运行中的试验 {trial_id!r}。", 404)
    return {"id": trial_id, "job": job.to_dict()}

