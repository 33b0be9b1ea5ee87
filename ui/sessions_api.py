"""The conversation routes under /api/sessions: the history list, a new (empty) session, rename, stop the answer
being written, regenerate or edit the last turn, switch between its versions, export and copy. Each is one
AssistantService call with the caller's owner id (ui/auth.py OwnerDep), as the UI and the CLI make it; the
single-session read and delete stay in ui/api.py. Each per-id route takes `?client=` (ui/deps.py ClientQuery): a
session listed for another browser is the unknown session's 404. Included before ui/api.py's router (its
catch-all 404)."""
from __future__ import annotations

import time
from typing import Any, Literal

from fastapi import APIRouter, Depends, Query, Request, Response
from pydantic import ConfigDict, Field, StrictBool
from sse_starlette.sse import EventSourceResponse
from starlette.concurrency import run_in_threadpool

from assistant import export
from assistant.errors import UserError
from assistant.sessions import CLIENT_PATTERN, unknown_session
from assistant.types import EVENT_KINDS

from .admission import answer_unless_gone, rate_limit
from .api import sse_events
from .auth import OwnerDep, bearer_scheme
from .deps import ClientQuery, MetricsDep, ReadyServiceDep, ServiceDep, request_lang
from .schemas import COMMON_ERRORS, AnswerResponse, RequestBody, error_responses, sse_response
from .streaming import open_answer_stream

TEXT_SCHEMA = {"schema": {"type": "string"}}
router = APIRouter(prefix="/api", tags=["conversations"], dependencies=[Depends(bearer_scheme)],
                   responses=COMMON_ERRORS)
ClientId = Field(default=None, pattern=CLIENT_PATTERN, description="The browser (or API client) whose history "
                 "list shows the session: 8-64 letters, digits, - or _")


class NewSessionRequest(RequestBody):
    model_config = ConfigDict(extra="forbid")
    client: str | None = ClientId


class RenameRequest(RequestBody):
    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [{"title": "ZeRO 笔记"}]})
    title: str = Field(max_length=200, description="The new title; not blank (else 422)")


class RegenerateRequest(RequestBody):
    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [
        {}, {"question": "DeepSpeed ZeRO 的三个阶段分别切分什么？", "stream": True}]})
    question: str | None = Field(default=None, description="The last question edited; omit to ask it again")
    stream: StrictBool = Field(default=False, description="Server-Sent Events, as /api/ask")


@router.get("/sessions", summary="The history list: this key's (and client's) conversations, newest first")
async def list_sessions(service: ServiceDep, owner: OwnerDep,
                        q: str = Query(default="", max_length=2000, description="Text the title or a message contains"),
                        client: ClientQuery = None,
                        limit: int = Query(default=50, ge=1, le=500)) -> dict[str, Any]:
    rows = await run_in_threadpool(lambda: service.list_sessions(q, limit, owner=owner, client=client))
    return {"sessions": rows}


@router.post("/sessions", summary="Start an empty session (its id lets a client cancel its first answer)")
async def new_session(service: ServiceDep, owner: OwnerDep, body: NewSessionRequest | None = None) -> dict[str, str]:
    client = body.client if body else None
    sid = await run_in_threadpool(lambda: service.new_session(owner=owner, client=client))
    return {"session_id": sid}


@router.patch("/sessions/{session_id}", summary="Rename a session", responses=error_responses(404))
async def rename_session(session_id: str, body: RenameRequest, service: ServiceDep, owner: OwnerDep,
                         client: ClientQuery = None) -> dict[str, Any]:
    await run_in_threadpool(lambda: service.rename_session(session_id, body.title, owner=owner, client=client))
    return {"session_id": session_id, "title": " ".join(body.title.split())[:80]}


@router.post("/sessions/{session_id}/cancel", summary="Stop the answer being written in this session",
             responses=error_responses(404))
async def cancel(session_id: str, service: ServiceDep, owner: OwnerDep, client: ClientQuery = None) -> dict[str, Any]:
    """The answer ends at the next token (or leaves the queue at once) and keeps what was written, marked
    `stopped`; `cancelled` is false when no answer was being written."""
    stopped = await run_in_threadpool(lambda: service.cancel(session_id, owner=owner, client=client))
    return {"session_id": session_id, "cancelled": stopped}


@router.post("/sessions/{session_id}/regenerate", dependencies=[Depends(rate_limit)],
             summary="Answer the last question again, or its edited text (JSON, or SSE with stream=true)",
             responses={**sse_response(AnswerResponse, "The new version of the last answer", list(EVENT_KINDS)),
                        **error_responses(404, 409)})
async def regenerate(session_id: str, request: Request, service: ReadyServiceDep, metrics: MetricsDep,
                     owner: OwnerDep, body: RegenerateRequest | None = None, client: ClientQuery = None) -> Any:
    body = body or RegenerateRequest()
    lang = request_lang(request, body.question)
    request.state.lang = lang
    if body.stream:
        events = await open_answer_stream(service, request.app.state.stream_slots, lang, lambda ticket: (
            service.regenerate_stream(session_id, body.question, ticket, owner=owner, client=client)))
        return EventSourceResponse(sse_events(events, metrics.stream_observer(time.perf_counter())), ping=15)
    ticket = service.admit()
    answer = await answer_unless_gone(request, service, ticket, lambda: service.regenerate(
        session_id, body.question, ticket, owner=owner, client=client))
    if isinstance(answer, Response):
        return answer
    return answer.to_dict()


@router.post("/sessions/{session_id}/versions/{index}", summary="Show version `index` of the last answer again",
             responses=error_responses(404, 409))
async def choose_version(session_id: str, index: int, service: ServiceDep, owner: OwnerDep,
                         client: ClientQuery = None) -> dict[str, Any]:
    return await run_in_threadpool(lambda: service.choose_version(session_id, index, owner=owner, client=client))


async def _session(service: Any, session_id: str, owner: str | None, client: str | None) -> dict[str, Any]:
    data = await run_in_threadpool(lambda: service.get_session(session_id, owner=owner, client=client))
    if data is None:
        raise unknown_session()
    return data


@router.get("/sessions/{session_id}/export", summary="The conversation as Markdown (citations as footnotes) or JSON",
            response_class=Response, responses={200: {"description": "The file (an attachment)", "content": {
                "text/markdown": TEXT_SCHEMA, "application/json": {"schema": {"type": "object"}}}},
                **error_responses(404)})
async def export_session(session_id: str, request: Request, service: ServiceDep, owner: OwnerDep,
                         format: Literal["markdown", "json"] = "markdown",
                         lang: Literal["zh", "en"] | None = None, client: ClientQuery = None) -> Response:
    data = await _session(service, session_id, owner, client)
    text, media, name = export.export(data, format, lang or request_lang(request))
    return Response(text, media_type=media, headers={"Content-Disposition": f'attachment; filename="{name}"'})


@router.get("/sessions/{session_id}/messages/{message_id}/markdown", response_class=Response,
            summary="One answer with its citations as footnotes (what the copy button copies)",
            responses={200: {"description": "Markdown", "content": {"text/markdown": TEXT_SCHEMA}},
                       **error_responses(404)})
async def answer_markdown(session_id: str, message_id: str, request: Request, service: ServiceDep,
                          owner: OwnerDep, lang: Literal["zh", "en"] | None = None,
                          client: ClientQuery = None) -> Response:
    data = await _session(service, session_id, owner, client)
    text = export.answer_markdown(data, message_id, lang or request_lang(request))
    if text is None:
        raise UserError("not_found", "No such message in this session.", "该会话中没有这条消息。", 404)
    return Response(text, media_type="text/markdown; charset=utf-8")
