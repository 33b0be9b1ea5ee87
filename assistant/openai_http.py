"""The OpenAI-compatible HTTP client shared by the remote chat model (assistant/llm/remote.py) and the remote
embedder (assistant/embed_remote.py): which API key is sent, the connect and read time-outs, retries with
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

from assistant.errors import UserError
from assistant.llm.base import ModelError

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

    A ModelError (the CLI and the engine callers catch those) that is also a UserError: the HTTP adapters show
    its message in the user's language with `status` (502 or 503), never a stack trace."""

    def __init__(self, code: str, en: str, zh: str, status: int = 502, retry_after: int | None = None) -> None:
        UserError.__init__(self, code, en, zh, status, retry_after)


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

    if isinstance(exc, openai.APITimeoutError):
        return RemoteError("engine_timeout", f"The {what_en} at {base_url} did not answer in time.",
                           f"{base_url} 的{what_zh}未及时响应。", 504)
    if isinstance(exc, openai.APIConnectionError):
        return RemoteError("engine_unreachable", f"Cannot reach the {what_en} at {base_url}: is it running?",
                           f"无法连接 {base_url} 的{what_zh}：它在运行吗？", 503)
    if isinstance(exc, openai.AuthenticationError | openai.PermissionDeniedError):
        return RemoteError("engine_key_refused", f"The {what_en} at {base_url} refused the API key: check {key_setting}.",
                           f"{base_url} 的{what_zh}拒绝了 API 密钥：请检查 {key_setting}。", 502)
    if isinstance(exc, openai.NotFoundError):
        return RemoteError("engine_no_model", f"The {what_en} at {base_url} has no model {model!r} (or the URL lacks "
                           f"/v1): check {settings_hint}.",
                           f"{base_url} 的{what_zh}没有模型 {model!r}（或地址缺少 /v1）：请检查 {settings_hint}。", 502)
    if isinstance(exc, openai.APIStatusError):
        busy = exc.status_code in RETRY_STATUSES
        return RemoteError("engine_busy" if busy else "engine_failed",
                           f"The {what_en} at {base_url} answered HTTP {exc.status_code}"
                           + (" (busy or failing; retried)" if busy else "") + ".",
                           f"{base_url} 的{what_zh}返回 HTTP {exc.status_code}" + ("（繁忙或故障，已重试）" if busy else "") + "。",
                           503 if busy else 502)
    return RemoteError("engine_failed", f"The {what_en} at {base_url} failed: {type(exc).__name__}: {exc}",
                       f"{base_url} 的{what_zh}出错：{type(exc).__name__}: {exc}", 502)


def ping(client: Any, base_url: str, what_en: str, what_zh: str, timeout_s: float = 3.0) -> None:
    """Raise a RemoteError unless the server answers GET /models within timeout_s (for /readyz)."""
    import openai

    try:
        client.with_options(timeout=timeout_s).models.list()
    except openai.OpenAIError as exc:
        raise remote_error(exc, base_url, what_en, what_zh) from None
