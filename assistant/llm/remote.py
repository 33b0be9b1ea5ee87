"""A ChatModel served by an OpenAI-compatible HTTP server (vLLM, Ollama, llama.cpp server), via the `openai` client.

The key policy, time-outs, retries and error messages are assistant/openai_http.py's. A request is retried
(connection error, time-out, 429, 5xx) until its first token has been handed on, never after: once text is
out, a failure is a RemoteError ("engine_broke_off") and the caller decides. An empty model name asks the server
for its model list and uses the first one.
"""
from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from typing import Any

from assistant.llm.base import ChatModel, Message, ModelError, Usage
from assistant.openai_http import RemoteError, RemotePolicy, is_local_url, make_client, ping, remote_error, retrying
from assistant.text import rough_tokens

__all__ = ["OpenAIChatModel", "is_local_url"]
log = logging.getLogger(__name__)
WHAT = ("model server", "模型服务器")


class OpenAIChatModel(ChatModel):
    """Streams chat completions from `base_url` (which ends in /v1 for most servers)."""

    def __init__(self, base_url: str, model: str = "", api_key: str = "", policy: RemotePolicy | None = None) -> None:
        super().__init__()
        self.policy = policy or RemotePolicy()
        self._client = make_client(base_url, api_key, self.policy, "ASSISTANT_OPENAI_API_KEY")
        self.base_url = base_url
        self._model = model
        self.name = model or base_url
        self.retried = 0  # requests sent again, since this model was made (for tests and the log)

    @property
    def model(self) -> str:
        """The model name sent to the server; asked of the server once when not configured."""
        if not self._model:
            try:
                models = retrying(lambda: self._client.models.list().data, self.policy, self._log_retry)
            except Exception as exc:
                raise self._error(exc) from exc
            if not models:
                raise ModelError(f"{self.base_url} serves no models; set ASSISTANT_OPENAI_MODEL.")
            self._model = models[0].id
            self.name = self._model
        return self._model

    def stream(
        self,
        messages: list[Message],
        *,
        max_tokens: int = 256,
        temperature: float = 0.1,
        stop: list[str] | None = None,
        language: str | None = None,
    ) -> Iterator[str]:
        started = time.perf_counter()
        request = dict(model=self.model, messages=messages, max_tokens=max_tokens, temperature=temperature,
                       stop=stop or None, stream=True, stream_options={"include_usage": True})
        # before the first token: open the stream and read up to its first text, retried as one step
        try:
            response, first_text, usage = retrying(lambda: self._open(request), self.policy, self._log_retry)
        except Exception as exc:
            raise self._error(exc) from exc
        first = time.perf_counter()
        pieces = [first_text] if first_text else []
        try:
            if first_text:
                yield first_text  # inside the try: a consumer that stops here still closes the response
            for chunk in response:
                usage = chunk.usage or usage  # servers that honour include_usage send it on the last chunk
                text = chunk.choices[0].delta.content if chunk.choices else None
                if text:
                    pieces.append(text)
                    yield text
        except Exception as exc:
            err = self._error(exc)
            n = len(pieces)
            public = (f"The model server broke off the answer after {n} pieces; please ask again.",
                      f"模型服务器在 {n} 段后中断了回答，请重新提问。")
            raise RemoteError("engine_broke_off", f"{public[0]} ({err.en})", f"{public[1]}（{err.zh}）", 502,
                              public) from exc
        finally:
            response.close()
        self.last_usage = self._usage(messages, pieces, usage, started, first if pieces else None)

    def _open(self, request: dict[str, Any]) -> tuple[Any, str, Any]:
        """The opened stream, its first text ("" when it ends first) and any usage seen so far; any failure
        here has produced no token yet, so `retrying` may send the request again."""
        response = self._client.chat.completions.create(**request)
        usage: Any = None
        try:
            for chunk in response:
                usage = chunk.usage or usage
                text = chunk.choices[0].delta.content if chunk.choices else None
                if text:
                    return response, text, usage
        except Exception:
            response.close()
            raise
        return response, "", usage

    def _log_retry(self, exc: BaseException, delay: float) -> None:
        self.retried += 1
        log.warning("model server %s: %s; retrying in %.1f s", self.base_url, type(exc).__name__, delay)

    def _usage(self, messages: list[Message], pieces: list[str], usage: Any, started: float,
               first: float | None) -> Usage:
        end = time.perf_counter()
        extra = {"ttft_s": (first or end) - started, "total_s": end - started}
        if usage is not None:
            return Usage(usage.prompt_tokens, usage.completion_tokens, extra)
        # no usage from the server: estimate (marked, so nobody mistakes it for a count). Servers stream one
        # chunk per generated token (llama.cpp server, vLLM, Ollama), so the chunks are the completion's count;
        # a text estimate could exceed max_tokens
        extra["estimated"] = 1.0
        prompt = sum(rough_tokens(m["content"]) for m in messages)
        return Usage(prompt, len(pieces), extra)

    def _error(self, exc: BaseException) -> RemoteError:
        if isinstance(exc, RemoteError):
            return exc
        return remote_error(exc, self.base_url, *WHAT, model=self._model)

    def ping(self) -> None:
        """Raise a RemoteError unless the server answers now (for /readyz)."""
        ping(self._client, self.base_url, *WHAT)

    def close(self) -> None:
        self._client.close()
