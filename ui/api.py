"""Native HTTP API under /api plus the health and metrics routes. Routers only speak HTTP: parse,
call AssistantService, shape the response. Blocking service calls run in the thread pool. Each call that
touches a session passes the caller's owner id (ui/auth.py OwnerDep); the service and its session store
decide, so another key's session is a 404 here as in the UI and the CLI."""
from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

from fastapi import APIRouter, Depends, Request, Response
from fastapi.responses import JSONResponse
from sse_starlette.sse import EventSourceResponse
from starlette.concurrency import run_in_threadpool

from assistant.errors import UserError
from assistant.openai_http import RemoteError
from assistant.sessions import unknown_session
from assistant.types import EVENT_KINDS, Event

from .admission import answer_unless_gone, rate_limit
from .auth import OwnerDep, bearer_scheme
from .deps import ClientQuery, MetricsDep, ReadyServiceDep, ServiceDep, request_lang
from .schemas import (
    COMMON_ERRORS,
    AdviseRequest,
    AnswerResponse,
    AskRequest,
    FeedbackRequest,
    Passage,
    ReadyStatus,
    SearchRequest,
    SearchResponse,
    error_responses,
    sse_response,
)
from .streaming import open_answer_stream

router = APIRouter(prefix="/api", tags=["assistant"], dependencies=[Depends(bearer_scheme)],
                   responses=COMMON_ERRORS)
health = APIRouter(tags=["operations"])
RateLimited = Depends(rate_limit)  # the question routes: 429 with Retry-After over settings.rate_limit_per_minute


def _not_found(what_en: str, what_zh: str) -> UserError:
    return UserError("not_found", f"Unknown {what_en}.", f"未找到该{what_zh}。", 404)


def event_payload(ev: Event) -> Any:
    """JSON-ready data of one service event (sources are numbered n=1.. as in the prompt)."""
    if ev.kind == "sources":
        return [{"n": i, **h.to_dict()} for i, h in enumerate(ev.data, 1)]
    if ev.kind == "token":
        return {"text": ev.data}
    if ev.kind == "status":
        return {"step": ev.data}
    if ev.kind == "citations":
        return [c.to_dict() for c in ev.data]
    if ev.kind == "done":
        return ev.data.to_dict()
    return ev.data


async def sse_events(events: AsyncIterator[Event], on_event: Callable[[str], None]) -> AsyncIterator[dict[str, str]]:
    async for ev in events:
        on_event(ev.kind)
        yield {"event": ev.kind, "data": json.dumps(event_payload(ev), ensure_ascii=False)}


@router.post("/ask", summary="Ask a question; a cited answer (JSON, or SSE with stream=true)", dependencies=[RateLimited],
             responses={**sse_response(AnswerResponse, "The cited answer", list(EVENT_KINDS)), **error_responses(404)})
async def ask(body: AskRequest, request: Request, service: ReadyServiceDep, metrics: MetricsDep,
              owner: OwnerDep) -> Any:
    lang = request_lang(request, body.question)
    request.state.lang = lang
    filters = body.filters.to_filters() if body.filters else None
    if body.stream:
        on_event = metrics.stream_observer(time.perf_counter())
        events = await open_answer_stream(
            service, request.app.state.stream_slots, lang,
            lambda ticket: service.ask_stream(body.question, body.session_id, filters, ticket, owner=owner))
        return EventSourceResponse(sse_events(events, on_event), ping=15)
    ticket = service.admit()  # on the event loop, before retrieval: a full queue is a 503 now
    answer = await answer_unless_gone(request, service, ticket, lambda: service.ask(
        body.question, body.session_id, filters, ticket, owner=owner))
    if isinstance(answer, Response):  # the client left while waiting
        return answer
    metrics.observe_answer(answer.timings)
    return answer.to_dict()


@router.post("/advise", summary="The Advisor: a ranked, cited recommendation and a trial plan for a team's situation", dependencies=[RateLimited])
async def advise(body: AdviseRequest, request: Request, service: ServiceDep) -> dict[str, Any]:
    request.state.lang = body.lang or request_lang(request, body.text)
    scenario = {k: v for k, v in body.model_dump().items() if v not in (None, "", [])}
    if not scenario:
        raise UserError("empty_scenario", "Describe the situation: give at least one field or a text.",
                        "请描述团队情况：至少填写一项或一段文字。", 422)
    advice = await run_in_threadpool(service.advise, scenario)
    return advice.to_dict()


@router.post("/search", response_model=SearchResponse, summary="Hybrid search: ranked passages with scores", dependencies=[RateLimited])
async def search(body: SearchRequest, request: Request, service: ReadyServiceDep, explain: bool = False) -> dict[str, Any]:
    """`?explain=true` adds each passage's matched terms and fusion weights, and the terms searched."""
    request.state.lang = request_lang(request, body.query)
    filters = body.filters.to_filters() if body.filters else None
    if explain:
        hits, why = await run_in_threadpool(service.search_explained, body.query, body.k, filters)
        return {"query": body.query, "k": body.k, "terms": why["terms"] + why["translation_terms"],
                "results": [{"rank": i, **h.to_dict(), "explain": e}
                            for i, (h, e) in enumerate(zip(hits, why["hits"], strict=True), 1)]}
    hits = await run_in_threadpool(service.search, body.query, body.k, filters)
    return {"query": body.query, "k": body.k, "results": [{"rank": i, **h.to_dict()} for i, h in enumerate(hits, 1)]}


@router.get("/passages/{chunk_id}", response_model=Passage, summary="One passage with its source and line range",
            responses=error_responses(404))
async def passage(chunk_id: str, service: ReadyServiceDep) -> dict[str, Any]:
    chunk = service.passage(chunk_id)
    if chunk is None:
        raise _not_found("passage", "段落")
    return chunk.to_dict()


@router.get("/sessions/{session_id}", summary="A session's messages (with citations) and feedback",
            responses=error_responses(404))
async def get_session(session_id: str, service: ServiceDep, owner: OwnerDep,
                      client: ClientQuery = None) -> dict[str, Any]:
    data = await run_in_threadpool(lambda: service.get_session(session_id, owner=owner, client=client))
    if data is None:
        raise unknown_session()
    return data


@router.delete("/sessions/{session_id}", summary="Delete a session, its messages and feedback",
               responses=error_responses(404))
async def delete_session(session_id: str, service: ServiceDep, owner: OwnerDep,
                         client: ClientQuery = None) -> dict[str, Any]:
    if not await run_in_threadpool(lambda: service.delete_session(session_id, owner=owner, client=client)):
        raise unknown_session()
    return {"deleted": session_id}


@router.post("/feedback", summary="Rate an answer (up or down) with an optional comment",
             responses=error_responses(404))
async def feedback(body: FeedbackRequest, service: ServiceDep, owner: OwnerDep) -> dict[str, Any]:
    await run_in_threadpool(service.feedback, body.session_id, body.message_id, body.rating, body.comment,
                            owner=owner)
    return {"ok": True}


@router.api_route("/{rest:path}", methods=["GET", "POST", "PUT", "PATCH", "DELETE"], include_in_schema=False)
async def api_not_found(rest: str) -> None:
    """Unknown /api paths answer JSON 404 (not the UI's page, which is mounted at /)."""
    raise _not_found("API route", "接口")


@health.get("/healthz", summary="The process is up")
async def healthz() -> dict[str, str]:
    return {"status": "ok"}


@health.get("/readyz", summary="200 once the index and model are loaded and the sessions database and any remote "
            "engine answer, else 503",
            response_model=ReadyStatus,
            responses={503: {"model": ReadyStatus, "description": "Still loading, start-up failed, or the sessions "
                                                                  "database or a remote engine is unreachable"}})
async def readyz(request: Request, service: ServiceDep) -> JSONResponse:
    lang = request_lang(request)
    if service.ready():
        try:
            await run_in_threadpool(service.ping)
        except UserError as db_err:  # a replica whose database, index or remote engine is unreachable is not ready
            message = db_err.public_message(lang) if isinstance(db_err, RemoteError) else db_err.message(lang)
            return JSONResponse({"status": "unavailable", "error": {"code": db_err.code, "message": message}},
                                status_code=503)
        status = service.embedder_status
        if status is not None and status.status != "ok":  # served, with the index's embedder: say so
            return JSONResponse({"status": "ready", "embedder": status.to_dict()})
        return JSONResponse({"status": "ready"})
    err = getattr(request.app.state, "load_error", None)
    message = err.message(lang) if err is not None else ("模型加载中…" if lang == "zh" else "Loading the model…")
    return JSONResponse({"status": "failed" if err else "loading", "error": {
        "code": err.code if err else "not_ready", "message": message}}, status_code=503)


@health.get("/metrics", summary="Prometheus metrics", response_class=Response)
async def metrics_route(metrics: MetricsDep) -> Response:
    body, ctype = metrics.render()
    return Response(body, media_type=ctype)
