"""The one ASGI app: FastAPI with the native API (/api), the OpenAI-compatible API (/v1), the MCP transport (/mcp,
ui/mcp_server.py), health and metrics,
OpenAPI docs (/docs) and the Gradio UI mounted at /. Owns start-up (the model loads once, in a thread, so
/healthz answers meanwhile), the request-body limit and the JSON error shape {"error": {"code", "message"}}
in the user's language (with `Retry-After` on the admission refusals, ui/admission.py). Access (Host allow-list, API keys, the browser login) is ui/auth.py, the outermost
middleware. `serve()` refuses a non-loopback address without keys, runs the engine self-check
(assistant/llm/selfcheck.py), then the app under uvicorn, bound to loopback unless told otherwise."""
from __future__ import annotations

import errno
import ipaddress
import logging
import socket
import sys
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from assistant.errors import UserError
from assistant.index.location import open_index
from assistant.llm.base import ModelError
from assistant.openai_http import RemoteError
from assistant.service import AssistantService
from assistant.settings import Settings

from . import api, auth, documents_api, mcp_server, openai_compat, sessions_api, trials_api
from .admission import RateLimiter, StreamSlots
from .auth import Access, AccessMiddleware
from .deps import error_response, request_lang
from .metrics import Metrics, MetricsMiddleware
from .requestid import HEADER, RequestIdMiddleware, current_request_id

log = logging.getLogger("ui.server")
LIMITED_PREFIXES = ("/api", "/v1", "/login", "/mcp")
UPLOAD_PATHS = ("/api/documents", "/gradio_api/upload")
UPLOAD_SLACK = 64_000  # a multipart body's framing around the file
BAD_JSON = {"zh": "请求体不是有效的 JSON。", "en": "The request body is not valid JSON."}


def generic_error(request: Request, status: int, code: str, what_zh: str, what_en: str) -> JSONResponse:
    """An error whose details stay in the log: a generic message naming the request id the log line carries."""
    rid = current_request_id(request)
    message = f"{what_zh}（请求编号 {rid}）" if request_lang(request) == "zh" else f"{what_en} (request id {rid})"
    return JSONResponse({"error": {"code": code, "message": message, "request_id": rid}}, status_code=status,
                        headers={HEADER: rid})  # the catch-all handler answers outside RequestIdMiddleware


class BodyLimitMiddleware:
    """Rejects request bodies over their limit with 413 (by Content-Length, or while reading a chunked body):
    `limit` bytes on /api, /v1 and /login, `ui_limit` bytes on every other route (the Gradio UI's queue, upload
    and API calls); `ui_limit=None` leaves those alone. Document uploads (UPLOAD_PATHS: the API's and the Gradio
    upload route the Documents tab uses) get `upload_limit` instead, when given."""

    def __init__(self, app: ASGIApp, limit: int, ui_limit: int | None = None, upload_limit: int | None = None) -> None:
        self.app = app
        self.limit = limit
        self.ui_limit = ui_limit
        self.upload_limit = upload_limit

    @staticmethod
    def _reject(scope: Scope, limit: int, upload: bool = False) -> JSONResponse:
        zh = any(h == b"accept-language" and v.lower().startswith(b"zh") for h, v in scope.get("headers", []))
        if upload:
            return error_response(413, "upload_too_large", f"上传的文件过大（最多约 {limit} 字节）。" if zh
                                  else f"The uploaded file is too large (max about {limit} bytes).")
        msg = (f"请求体过大（最多 {limit} 字节）。" if zh else f"Request body too large (max {limit} bytes).")
        return error_response(413, "body_too_large", msg)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        upload = self.upload_limit is not None and path in UPLOAD_PATHS
        limit = self.limit if path.startswith(LIMITED_PREFIXES) else self.ui_limit
        if upload:
            limit = self.upload_limit
        if scope["type"] != "http" or limit is None:
            await self.app(scope, receive, send)
            return
        length = dict(scope.get("headers", [])).get(b"content-length")
        if length is not None and length.isdigit() and int(length) > limit:
            await self._reject(scope, limit, upload)(scope, receive, send)
            return
        chunks: list[bytes] = []
        size = 0
        while scope["method"] in ("POST", "PUT", "PATCH"):
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunks.append(message.get("body", b""))
            size += len(chunks[-1])
            if size > limit:
                await self._reject(scope, limit, upload)(scope, receive, send)
                return
            if not message.get("more_body", False):
                break
        if scope["method"] not in ("POST", "PUT", "PATCH"):
            await self.app(scope, receive, send)
            return
        body = b"".join(chunks)
        sent = False

        async def replay() -> Message:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)


def _validation_message(exc: RequestValidationError, lang: str) -> tuple[int, str, str]:
    errors = exc.errors()
    if any(e.get("type") == "json_invalid" for e in errors):
        return 400, "bad_json", BAD_JSON[lang]
    parts = []
    for e in errors[:5]:
        loc = ".".join(str(p) for p in e.get("loc", ()) if p != "body") or "body"
        parts.append(f"{loc}: {e.get('msg', 'invalid')}")
    prefix = "请求无效：" if lang == "zh" else "Invalid request: "
    return 422, "invalid_request", prefix + "; ".join(parts)


def _install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(UserError)
    async def user_error(request: Request, exc: UserError) -> JSONResponse:
        response = error_response(exc.status, exc.code, exc.message(request_lang(request)))
        if exc.retry_after is not None:
            response.headers["Retry-After"] = str(exc.retry_after)
        return response

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        body = exc.body if isinstance(exc.body, dict) else {}
        text = body.get("question") or body.get("query")
        lang = request_lang(request, text if isinstance(text, str) else None)
        status, code, message = _validation_message(exc, lang)
        return error_response(status, code, message)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        lang = request_lang(request)
        if exc.status_code == 404:
            message = "未找到。" if lang == "zh" else "Not found."
        elif exc.status_code == 400:  # FastAPI's "error parsing the body" (e.g. not UTF-8): same as bad JSON
            return error_response(400, "bad_json", BAD_JSON[lang])
        else:
            message = str(exc.detail)
        return error_response(exc.status_code, f"http_{exc.status_code}", message)

    @app.exception_handler(ModelError)
    async def model_error(request: Request, exc: ModelError) -> JSONResponse:
        log.error("model error (request %s) on %s %s: %s", current_request_id(request), request.method,
                  request.url.path, exc)
        if isinstance(exc, RemoteError):  # what failed, without the engine's URL (that is in the log)
            return error_response(exc.status, exc.code, exc.public_message(request_lang(request)))
        return generic_error(request, 503, "model_error", "模型暂不可用，请稍后重试。",
                             "The model is unavailable; please retry later.")

    @app.exception_handler(Exception)
    async def internal(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error (request %s) on %s %s", current_request_id(request), request.method,
                      request.url.path)
        return generic_error(request, 500, "internal_error", "服务器内部错误，请稍后重试。",
                             "Internal error; please retry.")


def _openapi_as_served(app: FastAPI, access: Access) -> None:
    """The OpenAPI says what this server requires: the Bearer scheme and its 401 only with keys configured
    (without keys no route asks for one, and a schema saying otherwise would be wrong)."""
    if access.enabled:
        return
    plain = app.openapi

    def openapi() -> dict:
        if app.openapi_schema is None:
            spec = plain()
            spec.get("components", {}).pop("securitySchemes", None)
            for ops in spec.get("paths", {}).values():
                for op in ops.values():
                    op.pop("security", None)
                    op.get("responses", {}).pop("401", None)
            app.openapi_schema = spec
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]


def _load_in_background(app: FastAPI, service: AssistantService) -> threading.Thread:
    def run() -> None:
        try:
            service.load(warm=True)
            log.info("model and index loaded; ready")
            service.warm_advisor()  # after ready: the first selection question then finds the facts resolved
            service.warm_pinned()  # then every pinned prefix: the article's twin for the other language, the article's own
        except UserError as exc:
            app.state.load_error = exc
            log.error("start-up failed: %s", exc.en)
        except Exception:  # the details (paths, URLs, exception text) go to the log only
            log.exception("start-up failed")
            app.state.load_error = UserError("load_failed", "Start-up failed; the server log has the details.",
                                             "启动失败，详情见服务器日志。", 503)

    thread = threading.Thread(target=run, name="assistant-load", daemon=True)
    thread.start()
    return thread


def create_app(service: AssistantService, *, with_ui: bool = True, load: bool = True,
               access: Access | None = None) -> FastAPI:
    """The app around one service. `load=False` skips start-up loading (the caller has loaded it).
    `access`: keys and allowed hosts, by default from the service's settings."""
    access = access or Access.from_settings(service.settings)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with app.state.mcp_sessions.run():  # the MCP transport's sessions at /mcp (ui/mcp_server.py)
            yield
        if app.state.loader is not None and not service.ready():  # a load in progress: let it finish first
            app.state.loader.join(timeout=30)
        # once ready the loader only warms the Advisor's cache (5-10 s per language): not worth holding a stop for
        service.close()

    app = FastAPI(title="Framework Advisor (框架选型助手) API", version="1.0", lifespan=lifespan,
                  description="Cited answers about AI training frameworks from local documents. Native API under "
                  "/api (SSE streaming with stream=true), OpenAI-compatible API under /v1, chat UI at /. "
                  "With API keys configured (ASSISTANT_API_KEYS) every route but /healthz and /readyz needs "
                  "`Authorization: Bearer KEY` (or the browser's /login cookie); without keys the server is one "
                  "local user's and binds loopback only.")
    app.state.service = service
    app.state.access = access
    app.state.load_error = None
    # start loading now, not when uvicorn starts: the model and index load while the UI's imports
    # (~5 s for Gradio) run, which is most of the time to /readyz
    app.state.loader = _load_in_background(app, service) if load and not service.ready() else None
    app.state.metrics = Metrics(service)
    app.state.rate_limiter = RateLimiter(service.settings.rate_limit_per_minute)
    app.state.stream_slots = StreamSlots(service.settings.max_streams, service.settings.retry_after_s)
    app.add_middleware(BodyLimitMiddleware, limit=service.settings.max_body_bytes,
                       ui_limit=service.settings.max_ui_body_bytes,
                       upload_limit=service.settings.max_upload_bytes + UPLOAD_SLACK)
    app.add_middleware(MetricsMiddleware, metrics=app.state.metrics)
    app.add_middleware(AccessMiddleware, access=access)  # added last: runs first
    app.add_middleware(RequestIdMiddleware)  # outermost: every response, errors included, names its request
    _install_error_handlers(app)
    app.include_router(auth.router)
    app.include_router(api.health)
    app.include_router(documents_api.router)  # before api.router, whose catch-all answers unknown /api paths
    app.include_router(sessions_api.router)  # before api.router, whose catch-all answers unknown /api paths
    app.include_router(trials_api.router)  # before api.router, whose catch-all answers unknown /api paths
    app.include_router(api.router)
    app.include_router(openai_compat.router)
    app.state.mcp_sessions = mcp_server.mount(app, service)  # MCP streamable HTTP at /mcp, behind the same access
    _openapi_as_served(app, access)
    if with_ui:
        from .page import mount_ui  # Gradio is imported only for the UI

        app = mount_ui(app, service)
    return app


def is_loopback(host: str) -> bool:
    if host.strip("[]").lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _check_port_free(host: str, port: int) -> None:
    """UserError when (host, port) cannot be bound because something listens there already."""
    family = socket.AF_INET6 if ":" in host.strip("[]") else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds: TIME_WAIT is no conflict
        try:
            s.bind((host.strip("[]"), port))
        except OSError as e:
            if e.errno != errno.EADDRINUSE:
                raise UserError("bind_failed", f"Cannot listen on {host}:{port}: {e.strerror}.",
                                f"无法在 {host}:{port} 上监听：{e.strerror}。") from e
            raise UserError("port_in_use", f"Port {port} on {host} is already in use by another program. Stop it, "
                            "or choose another port with --port (or ASSISTANT_PORT).",
                            f"{host} 上的端口 {port} 已被其他程序占用。请停止该程序，或用 --port（或 ASSISTANT_PORT）"
                            "选择其他端口。") from e


def serve(settings: Settings, host: str | None = None, port: int | None = None) -> None:
    import uvicorn

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    host = host or settings.host
    port = port or settings.port
    access = Access.from_settings(settings)  # a missing keys file is a UserError here, before anything loads
    if not is_loopback(host) and not access.enabled:
        print(f"refusing to serve on {host}: without API keys the server is one local user's and binds loopback "
              "only. Set ASSISTANT_API_KEYS (comma-separated) or ASSISTANT_API_KEYS_FILE, or bind 127.0.0.1.\n"
              f"拒绝在 {host} 上提供服务：未配置 API 密钥时，服务只供本机单个用户使用，只能绑定回环地址。"
              "请设置 ASSISTANT_API_KEYS（逗号分隔）或 ASSISTANT_API_KEYS_FILE，或绑定 127.0.0.1。", file=sys.stderr)
        raise SystemExit(2)
    if not is_loopback(host) and not access.any_host and access.allowed_hosts <= {"127.0.0.1", "localhost", "[::1]"}:
        log.warning("binding %s, but only loopback Host names are answered: set ASSISTANT_ALLOWED_HOSTS to the "
                    "names clients use", host)
    log.info("access: %s", f"{len(access.keys)} API key(s) required" if access.enabled else "no API keys (local user)")
    # Without an index the server could never become ready: say so and exit (2) instead of serving 503s.
    open_index(settings).require()  # the index directory, or the Chroma server (unreachable: a UserError)
    _check_port_free(host, port)  # before the model loads, not after (uvicorn would find out only then)
    # Before anything loads in-process or binds the port: a llama.cpp build that dies on this CPU (SIGILL) dies
    # in a child here, and the ModelError it raises ends start-up with the message and a non-zero exit.
    # Once per (engine build, model file); create_app() itself never runs it (the in-process tests inject models).
    from assistant.llm.selfcheck import check_settings

    check_settings(settings, log=log.info)
    app = create_app(AssistantService(settings), access=access)
    log.info("serving on http://%s:%d (UI /, API /api, OpenAI /v1, MCP /mcp, docs /docs)", host, port)
    uvicorn.run(app, host=host, port=port, log_level="info", timeout_graceful_shutdown=5)
