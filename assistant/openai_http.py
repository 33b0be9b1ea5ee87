"""The OpenAI-compatible HTTP client shared by the remote chat model (assistant/llm/remote.py) and the remote
embedder (assistant/embed/remote.py): which API key is sent, the connect and read time-outs, retries with
backoff, the health probe and the user-language error for every failure.

API key: there is no default key. An empty key is replaced by the placeholder "none" only when the server is on
this machine (localhost / 127.x / ::1), because local servers usually ignore the key but the client refuses to
send no key at all. A server elsewhere with an empty key is refused with a message naming the setting.

Retries: a connection error, a time-out, 408, 409, 429 or a 5xx is retried `retries` times, waiting
`backoff_s * 2**attempt` (or the server's Retry-After, at most 30 s) between tries. The callers retry only
what has produced nothing yet: a stream is never retried once its first token was handed on, since the
text already shown cannot be taken back (assistant/llm/remote.py).
"""
from __future__ import annotations

import ipaddress
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import urlparse

from assistant.errors import ModelError, UserError

T = TypeVar("T")
RETRY_STATUSES = frozenset({408, 409, 429}) | frozenset(range(500, 600))
MAX_RETRY_AFTER_S = 30.0


def is_local_url(url: str) -> bool:
    host = (urlparse(url).hostname or "").lower()
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class RemoteError(ModelError, UserError):
    """A remote engine failed (unreachable, refused the key, no such model, overloaded, broke off).

    A ModelError (the CLI and the engine callers catch those) that is also a UserError with `status` (502, 503,
    504). Its message names the server's URL, for the operator (CLI, log, doctor); `public_message` is the same
    without the URL, for HTTP clients (/readyz is open to anyone who can reach the port)."""

    def __init__(self, code: str, en: str, zh: str, status: int = 502, public: tuple[str, str] | None = None) -> None:
        UserError.__init__(self, code, en, zh, status)
        self.public = public or (en, zh)

    def public_message(self, lang: str = "en") -> str:
        return self.public[1] if lang == "zh" else self.public[0]


@dataclass(frozen=True)
class RemotePolicy:
    """Time-outs and retries of one remote engine (settings openai_connect_timeout_s, ..._read_timeout_s,
    openai_retries, openai_retry_backoff_s)."""

    connect_timeout_s: float = 5.0
    read_timeout_s: float = 120.0
    retries: int = 2
    backoff_s: float = 0.5

    @classmethod
    def from_settings(cls, settings: Any) -> RemotePolicy:
        return cls(settings.openai_connect_timeout_s, settings.openai_read_timeout_s, settings.openai_retries,
                   settings.openai_retry_backoff_s)


def make_client(base_url: str, api_key: str, policy: RemotePolicy, key_setting: str) -> Any:
    """An openai.OpenAI for base_url with the policy's time-outs and no retries of its own (ours are in
    `retrying`). key_setting names the variable a missing key is set with."""
    try:
        import openai
    except ImportError as exc:
        raise ModelError("The openai backend needs the openai package: pip install openai") from exc
    if not api_key:
        if not is_local_url(base_url):
            raise UserError(
                "missing_openai_key",
                f"{base_url} is not on this machine: set {key_setting} (the literal 'none' if that server needs no key).",
                f"{base_url} 不是本机服务器：请设置 {key_setting}（若该服务器无需密钥，填 'none'）。",
            )
        api_key = "none"
    timeout = openai.Timeout(policy.read_timeout_s, connect=policy.connect_timeout_s)
    return openai.OpenAI(base_url=base_url, api_key=api_key, timeout=timeout, max_retries=0)


def is_retryable(exc: BaseException) -> bool:
    import httpx2
    import openai

    # a connection refused, reset or cut before the first byte, and time-outs: the openai client raises
    # APIConnectionError while it sends; reading a stream raises the transport's own errors
    if isinstance(exc, openai.APIConnectionError | httpx2.TransportError):
        return True
    return isinstance(exc, openai.APIStatusError) and exc.status_code in RETRY_STATUSES


def retry_delay(exc: BaseException, attempt: int, policy: RemotePolicy) -> float:
    """The server's Retry-After (seconds) when it sent one, else exponential backoff; capped."""
    response = getattr(exc, "response", None)
    header = response.headers.get("retry-after") if response is not None else None
    if header:
        try:
            return min(max(float(header), 0.0), MAX_RETRY_AFTER_S)
        except ValueError:
            pass
    return min(policy.backoff_s * (2 ** attempt), MAX_RETRY_AFTER_S)


def retrying(call: Callable[[], T], policy: RemotePolicy, on_retry: Callable[[BaseException, float], None] | None = None,
             sleep: Callable[[float], None] = time.sleep) -> T:
    """call() with the policy's retries; the last failure is raised as it came (the caller maps it)."""
    attempt = 0
    while True:
        try:
            return call()
        except Exception as exc:
            if attempt >= policy.retries or not is_retryable(exc):
                raise
            delay = retry_delay(exc, attempt, policy)
            if on_retry is not None:
                on_retry(exc, delay)
            sleep(delay)
            attempt += 1


def remote_error(exc: BaseException, base_url: str, what_en: str, what_zh: str, model: str = "",
                 settings_hint: str = "ASSISTANT_OPENAI_MODEL / ASSISTANT_OPENAI_BASE_URL",
                 key_setting: str = "ASSISTANT_OPENAI_API_KEY") -> RemoteError:
    """The user-language error for a failure of the openai client; what_en/what_zh name the server's role
    ("model server", "embedding server")."""
    import openai

    status = 502
    if isinstance(exc, openai.APITimeoutError):
        code, status, en, zh = "engine_timeout", 504, "The {what}{at} did not answer in time.", "{at}{what}未及时响应。"
    elif isinstance(exc, openai.APIConnectionError):
        code, status = "engine_unreachable", 503
        en, zh = "Cannot reach the {what}{at}: is it running?", "无法连接{at}{what}：它在运行吗？"
    elif isinstance(exc, openai.AuthenticationError | openai.PermissionDeniedError):
        code = "engine_key_refused"
        en, zh = f"The {{what}}{{at}} refused the API key: check {key_setting}.", f"{{at}}{{what}}拒绝了 API 密钥：请检查 {key_setting}。"
    elif isinstance(exc, openai.NotFoundError):
        code = "engine_no_model"
        en = f"The {{what}}{{at}} has no model {model!r} (or the URL lacks /v1): check {settings_hint}."
        zh = f"{{at}}{{what}}没有模型 {model!r}（或地址缺少 /v1）：请检查 {settings_hint}。"
    elif isinstance(exc, openai.APIStatusError):
        busy = exc.status_code in RETRY_STATUSES
        code, status = ("engine_busy", 503) if busy else ("engine_failed", 502)
        en = f"The {{what}}{{at}} answered HTTP {exc.status_code}" + (" (busy or failing; retried)" if busy else "") + "."
        zh = f"{{at}}{{what}}返回 HTTP {exc.status_code}" + ("（繁忙或故障，已重试）" if busy else "") + "。"
    else:
        code = "engine_failed"
        en, zh = "The {what}{at} failed: " + f"{type(exc).__name__}.", "{at}{what}出错：" + f"{type(exc).__name__}。"

    def text(template: str, at: str, what: str) -> str:
        return template.replace("{what}", what).replace("{at}", at)

    full = (text(en, f" at {base_url}", what_en), text(zh, f"{base_url} 的", what_zh))
    if code == "engine_failed" and not isinstance(exc, openai.APIStatusError):
        full = (full[0][:-1] + f": {exc}", full[1])  # the details, for the operator only
    return RemoteError(code, *full, status=status, public=(text(en, "", what_en), text(zh, "", what_zh)))


def ping(client: Any, base_url: str, what_en: str, what_zh: str, timeout_s: float = 3.0) -> None:
    """Raise a RemoteError unless the server answers GET /models within timeout_s (for /readyz)."""
    import openai

    try:
        client.with_options(timeout=timeout_s).models.list()
    except openai.OpenAIError as exc:
        raise remote_error(exc, base_url, what_en, what_zh) from None
