"""Request ids: every HTTP request gets one (a client's own X-Request-ID when it is a short token, else a new
random one), echoed in the X-Request-ID response header and kept in a context variable, so an error answer
can name it and the log line with the details (paths, URLs, exception text) carries the same id."""
from __future__ import annotations

import re
import uuid
from contextvars import ContextVar

from starlette.datastructures import MutableHeaders
from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

HEADER = "X-Request-ID"
SCOPE_KEY = "request_id"
_VALID = re.compile(r"[A-Za-z0-9._-]{8,64}")
_current: ContextVar[str] = ContextVar("request_id", default="-")


def current_request_id(request: Request | None = None) -> str:
    """The id of `request`, else of the request being served in this context ("-" outside one). Exception
    handlers pass the request: Starlette runs the catch-all one outside the middleware, after its context."""
    if request is not None and SCOPE_KEY in request.scope:
        return str(request.scope[SCOPE_KEY])
    return _current.get()


class RequestIdMiddleware:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        given = dict(scope.get("headers", [])).get(HEADER.lower().encode(), b"").decode("latin-1")
        rid = given if _VALID.fullmatch(given) else uuid.uuid4().hex
        scope[SCOPE_KEY] = rid
        token = _current.set(rid)

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                MutableHeaders(scope=message)[HEADER] = rid
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        finally:
            _current.reset(token)
