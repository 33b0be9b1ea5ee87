"""Who may reach the HTTP app: the Host allow-list, API keys and the browser's login session.

Owns, for every HTTP and WebSocket request (one pure-ASGI middleware, outermost):
- the Host header: only settings.allowed_hosts (loopback names by default, any port) are answered; another
  Host gets 421 and a missing one 400, so a DNS-rebinding page cannot reach a loopback server;
- with keys configured (assistant/keys.py), every route except /healthz, /readyz, /login and /logout needs
  `Authorization: Bearer KEY` or the login cookie; else 401 with `WWW-Authenticate: Bearer` and the app's JSON
  error shape, or, for a browser asking for a page, a redirect to /login;
- the login step: /login is a small form; a right key gets an HttpOnly, SameSite=Strict cookie holding a
  random token that this process maps to the key's owner id (never the key; the key travels only in the POST
  body, never in a URL); /logout forgets the token and clears the cookie.
The caller's owner id (None without keys) is put in `request.state.owner` for the routes (`OwnerDep`) and
resolved from the headers for the Gradio handlers (`Access.owner_of`). Nothing here logs a key or a token.
"""
from __future__ import annotations

import html
import secrets
import threading
import time
from collections.abc import Mapping
from http.cookies import SimpleCookie
from typing import Annotated, Any
from urllib.parse import parse_qs, quote

from fastapi import APIRouter, Depends, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.security import HTTPBearer
from starlette.types import ASGIApp, Receive, Scope, Send

from assistant.errors import UserError
from assistant.keys import KeyRing

from .deps import error_response

COOKIE = "fa_session"
OPEN_PATHS = frozenset({"/healthz", "/readyz", "/login", "/logout"})
API_PREFIXES = ("/api", "/v1", "/metrics", "/openapi.json")
_MAX_LOGINS = 10_000
# documents the scheme in the OpenAPI (so /docs can send the key); the middleware does the checking
bearer_scheme = HTTPBearer(auto_error=False, description="One of the server's API keys (when it has any)")


def host_name(host: str) -> str:
    """'Example.COM:7860' -> 'example.com', '[::1]:7860' -> '[::1]' (the port does not matter)."""
    host = host.strip().lower()
    if host.startswith("["):
        return host[: host.find("]") + 1] if "]" in host else host
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


class Access:
    """The key ring, the Host allow-list and the login tokens of one app."""

    def __init__(self, keys: KeyRing, allowed_hosts: list[str], login_ttl_s: float = 12 * 3600) -> None:
        self.keys = keys
        self.any_host = "*" in allowed_hosts
        self.allowed_hosts = frozenset(host_name(h) for h in allowed_hosts if h != "*")
        self.login_ttl_s = login_ttl_s
        self._logins: dict[str, tuple[str, float]] = {}  # token -> (owner id, expiry)
        self._lock = threading.Lock()

    @classmethod
    def from_settings(cls, settings: Any) -> Access:
        return cls(KeyRing.from_settings(settings), list(settings.allowed_hosts), settings.login_ttl_s)

    @property
    def enabled(self) -> bool:
        """True when keys are configured (and so required)."""
        return self.keys.enabled

    def host_allowed(self, host: str | None) -> bool:
        return bool(host) and (self.any_host or host_name(host or "") in self.allowed_hosts)

    # ---- login tokens --------------------------------------------------------------------------
    def login(self, key: str) -> str | None:
        """A new login token for a right key, else None."""
        owner = self.keys.match(key)
        if owner is None:
            return None
        token = secrets.token_urlsafe(32)
        now = time.monotonic()
        with self._lock:
            self._logins = {t: v for t, v in self._logins.items() if v[1] > now}
            while len(self._logins) >= _MAX_LOGINS:
                self._logins.pop(next(iter(self._logins)))
            self._logins[token] = (owner, now + self.login_ttl_s)
        return token

    def logout(self, token: str | None) -> None:
        with self._lock:
            self._logins.pop(token or "", None)

    def _token_owner(self, token: str | None) -> str | None:
        if not token:
            return None
        with self._lock:
            entry = self._logins.get(token)
            if entry is None:
                return None
            if entry[1] <= time.monotonic():
                self._logins.pop(token, None)
                return None
            return entry[0]

    # ---- who is asking ---------------------------------------------------------------------------
    def owner_of(self, headers: Mapping[str, str]) -> tuple[bool, str | None]:
        """(allowed, owner id) for a request's headers (lower-case names): without keys everyone local is
        the one owner None; with keys, a right Bearer key or a live login cookie names its key's owner."""
        if not self.enabled:
            return True, None
        auth = headers.get("authorization", "")
        scheme, _, value = auth.partition(" ")
        if scheme.lower() == "bearer" and value.strip():
            owner = self.keys.match(value.strip())
            return owner is not None, owner
        owner = self._token_owner(cookie_value(headers.get("cookie", ""), COOKIE))
        return owner is not None, owner


def cookie_value(header: str, name: str) -> str | None:
    jar: SimpleCookie = SimpleCookie()
    try:
        jar.load(header)
    except Exception:  # noqa: BLE001 - a malformed Cookie header names no login
        return None
    morsel = jar.get(name)
    return morsel.value if morsel is not None else None


def _headers(scope: Scope) -> dict[str, str]:
    return {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}


def _lang(headers: Mapping[str, str]) -> str:
    return "zh" if headers.get("accept-language", "").lower().startswith("zh") else "en"


def unauthorized(lang: str) -> Response:
    resp = error_response(401, "unauthorized", "需要 API 密钥：请发送 Authorization: Bearer <密钥>，或在浏览器中登录 /login。"
                          if lang == "zh" else "An API key is required: send Authorization: Bearer <key>, "
                          "or sign in at /login in a browser.")
    resp.headers["WWW-Authenticate"] = 'Bearer realm="framework-advisor"'
    return resp


class AccessMiddleware:
    """Host allow-list, then keys (see the module docstring). Sets scope["state"]["owner"]."""

    def __init__(self, app: ASGIApp, access: Access) -> None:
        self.app = app
        self.access = access

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        headers = _headers(scope)
        lang = _lang(headers)
        refusal: Response | None = None
        if not self.access.host_allowed(headers.get("host")):
            refusal = (error_response(421, "bad_host", "不接受该 Host 请求头：请用本机地址访问，或把它加入 "
                                      "ASSISTANT_ALLOWED_HOSTS。" if lang == "zh" else "This Host header is not "
                                      "served: use a loopback address, or add it to ASSISTANT_ALLOWED_HOSTS.")
                       if headers.get("host") else
                       error_response(400, "no_host", "缺少 Host 请求头。" if lang == "zh" else "The Host header is missing."))
        else:
            allowed, owner = self.access.owner_of(headers)
            if allowed or scope["path"] in OPEN_PATHS:
                scope.setdefault("state", {})["owner"] = owner
                await self.app(scope, receive, send)
                return
            refusal = self._login_redirect(scope, headers) or unauthorized(lang)
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008})
            return
        await refusal(scope, receive, send)

    @staticmethod
    def _login_redirect(scope: Scope, headers: Mapping[str, str]) -> Response | None:
        """A browser asking for a page (not the API) is sent to the login form, then back here."""
        path = scope["path"]
        if scope["method"] != "GET" or path.startswith(API_PREFIXES) or "text/html" not in headers.get("accept", ""):
            return None
        return RedirectResponse("/login" if path == "/" else "/login?next=" + quote(path), 303)


# ---- the login step -----------------------------------------------------------------------------
router = APIRouter(include_in_schema=False)

_PAGE = """<!doctype html><html lang="zh"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1"><title>登录 · Sign in — 框架选型助手</title>
<style>body{{font-family:system-ui,"WenQuanYi Zen Hei",sans-serif;max-width:28rem;margin:4rem auto;padding:0 1rem}}
input,button{{font-size:1rem;padding:.5rem;width:100%;box-sizing:border-box;margin:.4rem 0}}
.err{{color:#b00020}}</style></head><body>
<h1>框架选型助手 · Framework Advisor</h1>
<p>请输入 API 密钥登录。<br>Paste an API key to sign in.</p>
{error}
<form method="post" action="/login" autocomplete="off">
<input type="hidden" name="next" value="{next}">
<label for="key">API 密钥 / API key</label>
<input id="key" name="key" type="password" required autofocus>
<button type="submit">登录 / Sign in</button>
</form></body></html>"""


def _safe_next(value: str | None) -> str:
    """Only a path on this server (no scheme, no //host) may follow the login."""
    if value and value.startswith("/") and not value.startswith("//") and "\\" not in value:
        return value
    return "/"


def _page(next_path: str, error: str = "", status: int = 200) -> HTMLResponse:
    body = _PAGE.format(next=html.escape(next_path), error=f'<p class="err">{error}</p>' if error else "")
    return HTMLResponse(body, status, headers={"Cache-Control": "no-store", "X-Frame-Options": "DENY",
                                               "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; "
                                               "form-action 'self'; frame-ancestors 'none'"})


def _access(request: Request) -> Access:
    return request.app.state.access


@router.get("/login")
async def login_form(request: Request, next: str | None = None) -> Response:
    if not _access(request).enabled:
        return RedirectResponse(_safe_next(next), 303)
    return _page(_safe_next(next))


@router.post("/login")
async def login(request: Request) -> Response:
    access = _access(request)
    form = parse_qs((await request.body()).decode("utf-8", "replace"), max_num_fields=4)
    next_path = _safe_next((form.get("next") or ["/"])[0])
    if not access.enabled:
        return RedirectResponse(next_path, 303)
    token = access.login((form.get("key") or [""])[0].strip())
    if token is None:
        return _page(next_path, "密钥不正确。 The key is not right.", 401)
    access.logout(request.cookies.get(COOKIE))  # a new login replaces the one the browser had
    resp = RedirectResponse(next_path, 303)
    resp.set_cookie(COOKIE, token, max_age=int(access.login_ttl_s), httponly=True, samesite="strict",
                    secure=request.url.scheme == "https", path="/")
    return resp


@router.api_route("/logout", methods=["GET", "POST"])
async def logout(request: Request) -> Response:
    _access(request).logout(request.cookies.get(COOKIE))
    resp = RedirectResponse("/login", 303)
    resp.delete_cookie(COOKIE, path="/", httponly=True, samesite="strict")
    return resp


def request_owner(request: Request) -> str | None:
    """The caller's owner id (set by AccessMiddleware); without it, a keyed app refuses rather than guess."""
    state = request.scope.get("state") or {}
    if "owner" not in state:
        if _access(request).enabled:
            raise UserError("unauthorized", "An API key is required.", "需要 API 密钥。", 401)
        return None
    return state["owner"]


OwnerDep = Annotated[str | None, Depends(request_owner)]
