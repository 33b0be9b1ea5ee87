"""FastAPI dependencies shared by the routers: the service, a readiness gate, the user's language, the caller's
client id (`?client=`), and the JSON error shape {"error": {"code", "message"}} every refusal uses."""
from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Query, Request
from fastapi.responses import JSONResponse

from assistant.errors import UserError
from assistant.lang import detect_language
from assistant.service import AssistantService
from assistant.sessions import CLIENT_PATTERN

from .metrics import Metrics


def error_response(status: int, code: str, message: str) -> JSONResponse:
    return JSONResponse({"error": {"code": code, "message": message}}, status_code=status)


def request_lang(request: Request, text: str | None = None) -> str:
    """The language to answer errors in: the question's language, else Accept-Language, else English."""
    if text and text.strip():
        return detect_language(text)
    if getattr(request.state, "lang", None):
        return request.state.lang
    accept = request.headers.get("accept-language", "").lower()
    return "zh" if accept.startswith("zh") else "en"


def get_service(request: Request) -> AssistantService:
    return request.app.state.service


def get_ready_service(request: Request) -> AssistantService:
    """The service, or a 503 in the user's language while the model is still loading (or failed to)."""
    svc: AssistantService = request.app.state.service
    if not svc.ready():
        failed = getattr(request.app.state, "load_error", None)
        if failed is not None:
            raise failed
        raise UserError("not_ready", "The assistant is still loading its model; please retry in a moment.",
                        "助手正在加载模型，请稍后重试。", 503)
    return svc


def get_metrics(request: Request) -> Metrics:
    return request.app.state.metrics


ServiceDep = Annotated[AssistantService, Depends(get_service)]
ReadyServiceDep = Annotated[AssistantService, Depends(get_ready_service)]
MetricsDep = Annotated[Metrics, Depends(get_metrics)]
# `?client=`: the browser (or API client) the caller is. On the list it keeps that client's sessions; on a
# /api/sessions/{id} route another client's session is the unknown session's 404. Omitted: no client named.
ClientQuery = Annotated[str | None, Query(pattern=CLIENT_PATTERN, description=(
    "The caller's browser or client id (8-64 letters, digits, - or _): only sessions listed for it; omit to "
    "name no client"))]
