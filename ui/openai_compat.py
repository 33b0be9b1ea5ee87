"""OpenAI-compatible routes under /v1: chat completions (plain and streamed) and the model list.

The last user message is the question. Every completion returns the `session_id` the server issued for it
(on the response, or on the final chunk when streaming); a client continues that conversation by sending it
back in the `session_id` extension field (`extra_body={"session_id": ...}` with the openai client). Only the
key that created a session may continue it; an id the server never issued is a 404. The OpenAI `user` field
is accepted and ignored: it is not a session id. Citations are appended to the content as numbered footnotes
and returned as a structured `citations` field. Earlier messages in `messages` are not replayed: history
comes from the session. Sampling fields (temperature, max_tokens, ...) are ignored. With keys configured the
openai client's `api_key` is the Bearer key (ui/auth.py).
"""
from __future__ import annotations

import json
import time
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

from fastapi import APIRouter, Depends, Request, Response
from sse_starlette.sse import EventSourceResponse

from assistant.errors import UserError
from assistant.types import Answer, Citation

from .admission import answer_unless_gone, rate_limit
from .auth import OwnerDep, bearer_scheme
from .deps import MetricsDep, ReadyServiceDep, ServiceDep, request_lang
from .schemas import COMMON_ERRORS, ChatCompletion, ChatCompletionRequest, error_responses, sse_response
from .streaming import open_answer_stream

router = APIRouter(prefix="/v1", tags=["openai-compatible"], dependencies=[Depends(bearer_scheme)],
                   responses=COMMON_ERRORS)


def footnotes(citations: list[Citation]) -> str:
    """'\\n\\n[1] title - source:10-20' lines, one per citation."""
    if not citations:
        return ""
    lines = [f"[{c.n}] {c.title} - {c.source}:{c.lines[0]}-{c.lines[1]}" for c in citations]
    return "\n\n" + "\n".join(lines)


def _question(body: ChatCompletionRequest) -> str:
    for msg in reversed(body.messages):
        if msg.role == "user":
            return msg.text()
    raise UserError("no_user_message", "messages must contain a user message.", "messages 中必须有一条 user 消息。", 422)


def _extras(answer: Answer) -> dict[str, Any]:
    return {"citations": [c.to_dict() for c in answer.citations], "session_id": answer.session_id,
            "message_id": answer.message_id, "refused": answer.refused, "timings": answer.timings}


def _usage(answer: Answer) -> dict[str, int]:
    p, c = answer.usage.get("prompt_tokens", 0), answer.usage.get("completion_tokens", 0)
    return {"prompt_tokens": p, "completion_tokens": c, "total_tokens": p + c}


def _chunk(cid: str, model: str, delta: dict[str, Any], finish: str | None = None, **extra: Any) -> dict[str, str]:
    obj = {"id": cid, "object": "chat.completion.chunk", "created": int(time.time()), "model": model,
           "choices": [{"index": 0, "delta": delta, "finish_reason": finish}], **extra}
    return {"data": json.dumps(obj, ensure_ascii=False)}


async def _stream(events: AsyncIterator[Any], model: str, on_event: Callable[[str], None]) -> AsyncIterator[dict[str, str]]:
    cid = "chatcmpl-" + uuid.uuid4().hex[:24]
    yield _chunk(cid, model, {"role": "assistant", "content": ""})
    async for ev in events:
        on_event(ev.kind)
        if ev.kind == "token":
            yield _chunk(cid, model, {"content": ev.data})
        elif ev.kind == "error":
            yield {"data": json.dumps({"error": {**ev.data, "type": "server_error"}}, ensure_ascii=False)}
            return
        elif ev.kind == "done":
            answer: Answer = ev.data
            yield _chunk(cid, model, {"content": footnotes(answer.citations)})
            yield _chunk(cid, model, {}, "stop", usage=_usage(answer), answer=answer.answer, **_extras(answer))
    yield {"data": "[DONE]"}


@router.post("/chat/completions", summary="OpenAI-style chat completion with cited answers",
             dependencies=[Depends(rate_limit)], responses={**sse_response(ChatCompletion, "The completion", ["message"], json_data=False),
                                                            **error_responses(404)})
async def chat_completions(body: ChatCompletionRequest, request: Request, service: ReadyServiceDep,
                           metrics: MetricsDep, owner: OwnerDep) -> Any:
    question = _question(body)
    lang = request_lang(request, question)
    request.state.lang = lang
    session = body.session_id
    model = body.model or service.settings.model
    if body.stream:
        on_event = metrics.stream_observer(time.perf_counter())
        events = await open_answer_stream(service, request.app.state.stream_slots, lang,
                                          lambda ticket: service.ask_stream(question, session, None, ticket,
                                                                            owner=owner))
        return EventSourceResponse(_stream(events, model, on_event), ping=15)
    ticket = service.admit()
    answer = await answer_unless_gone(request, service, ticket,
                                      lambda: service.ask(question, session, None, ticket, owner=owner))
    if isinstance(answer, Response):  # the client left while waiting
        return answer
    metrics.observe_answer(answer.timings)
    return {"id": "chatcmpl-" + uuid.uuid4().hex[:24], "object": "chat.completion", "created": int(time.time()),
            "model": model, "usage": _usage(answer), **_extras(answer),
            "choices": [{"index": 0, "finish_reason": "stop", "message": {
                "role": "assistant", "content": answer.answer + footnotes(answer.citations)}}]}


@router.get("/models", summary="The configured model")
async def models(service: ServiceDep) -> dict[str, Any]:
    return {"object": "list", "data": [{"id": service.settings.model, "object": "model", "created": 0,
                                        "owned_by": "local"}]}


@router.api_route("/{rest:path}", methods=["GET", "POST", "PUT", "PATCH", "DELETE"], include_in_schema=False)
async def v1_not_found(rest: str) -> None:
    raise UserError("not_found", "Unknown API route.", "未找到该接口。", 404)
