"""A ChatModel served by an OpenAI-compatible HTTP server (vLLM, Ollama, llama.cpp server), via the `openai` client.

API key: there is no default key. An empty key is replaced by the placeholder "none" only when the
server is on this machine (localhost / 127.x / ::1), because local servers usually ignore the key but
the client refuses to send no key at all. A server elsewhere with an empty key is refused with a
message: set ASSISTANT_OPENAI_API_KEY (use the literal "none" for a trusted server without auth).
An empty model name asks the server for its model list and uses the first one.
"""
from __future__ import annotations

import ipaddress
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlparse

from assistant.errors import UserError
from assistant.llm.base import ChatModel, Message, ModelError, Usage
from assistant.text import rough_tokens


def is_local_url(url: str) -> bool:
    host = (urlparse(url).hostname or "").lower()
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class OpenAIChatModel(ChatModel):
    """Streams chat completions from `base_url` (which ends in /v1 for most servers)."""

    def __init__(self, base_url: str, model: str = "", api_key: str = "", timeout: float = 120.0) -> None:
        super().__init__()
        try:
            import openai
        except ImportError as exc:
            raise ModelError("The openai backend needs the openai package: pip install openai") from exc
        if not api_key:
            if not is_local_url(base_url):
                raise UserError(
                    "missing_openai_key",
                    f"{base_url} is not on this machine: set ASSISTANT_OPENAI_API_KEY "
                    "(the literal 'none' if that server needs no key).",
                    f"{base_url} 不是本机服务器：请设置 ASSISTANT_OPENAI_API_KEY（若该服务器无需密钥，填 'none'）。",
                )
            api_key = "none"
        self._openai = openai
        self._client = openai.OpenAI(base_url=base_url, api_key=api_key, timeout=timeout, max_retries=1)
        self.base_url = base_url
        self._model = model
        self.name = model or base_url

    @property
    def model(self) -> str:
        """The model name sent to the server; asked of the server once when not configured."""
        if not self._model:
            try:
                models = self._client.models.list().data
            except self._openai.OpenAIError as exc:
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
    ) -> Iterator[str]:
        started = time.perf_counter()
        first: float | None = None
        pieces: list[str] = []
        usage: Any = None
        try:
            response = self._client.chat.completions.create(
                model=self.model, messages=messages, max_tokens=max_tokens, temperature=temperature,  # type: ignore[arg-type]
                stop=stop or None, stream=True, stream_options={"include_usage": True},
            )
            for chunk in response:
                usage = chunk.usage or usage  # servers that honour include_usage send it on the last chunk
                text = chunk.choices[0].delta.content if chunk.choices else None
                if text:
                    first = first or time.perf_counter()
                    pieces.append(text)
                    yield text
        except self._openai.OpenAIError as exc:
            raise self._error(exc) from exc
        self.last_usage = self._usage(messages, pieces, usage, started, first)

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

    def _error(self, exc: Exception) -> ModelError:
        openai = self._openai
        if isinstance(exc, openai.APIConnectionError):
            return ModelError(f"Cannot reach the model server at {self.base_url}: is it running? ({exc})")
        if isinstance(exc, openai.AuthenticationError):
            return ModelError(f"The model server at {self.base_url} refused the API key: "
                              "check ASSISTANT_OPENAI_API_KEY.")
        if isinstance(exc, openai.NotFoundError):
            return ModelError(f"The model server at {self.base_url} has no model {self._model!r} "
                              "(or the URL lacks /v1): check ASSISTANT_OPENAI_MODEL / ASSISTANT_OPENAI_BASE_URL.")
        return ModelError(f"The model server at {self.base_url} failed: {exc}")

    def close(self) -> None:
        self._client.close()
