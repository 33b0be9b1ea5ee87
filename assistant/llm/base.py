"""The chat-model interface every generation engine implements.

One abstract method, `stream`; helpers in the base class build on it. Engines live in
sibling modules and are imported lazily by `assistant.llm.factory.create_chat_model`,
so a missing optional backend fails with a message that says what to install.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Protocol

from assistant.errors import ModelError as ModelError  # what every engine raises; defined with UserError
from assistant.text import has_cjk, rough_tokens

Message = dict[str, str]  # {"role": "system"|"user"|"assistant", "content": str}


def writes_han(piece: bytes) -> bool:
    """Whether a vocabulary token's bytes write a Han character or begin one (a one- or two-byte token starting
    with a UTF-8 lead byte of U+4000 to U+9FFF: Qwen spells a rare character in byte tokens): the tokens an English
    answer never needs. The 1.5B copies words of its Chinese evidence into English answers ("TB级", "monitoring运维",
    "PaddlePaddle's国产": 4 of the 47 English answers of the dev article sets); the in-process engines ban them."""
    return has_cjk(piece.decode("utf-8", errors="ignore")) or (0 < len(piece) <= 2 and 0xE4 <= piece[0] <= 0xE9)


@dataclass
class Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0
    extra: dict[str, float] = field(default_factory=dict)


class Vocabulary(Protocol):
    """What a model is to the code that only names it or counts its tokens (the pinned context, its translations
    file): a loaded ChatModel, or a stand-in that has not loaded the weights (llm/llamacpp.py `LlamaVocabulary`)."""

    name: str

    def count_tokens(self, text: str) -> int: ...


class ChatModel(ABC):
    """A chat model that streams text pieces for a list of messages."""

    name: str = "model"

    def __init__(self) -> None:
        self.last_usage = Usage()

    @abstractmethod
    def stream(
        self,
        messages: list[Message],
        *,
        max_tokens: int = 256,
        temperature: float = 0.1,
        stop: list[str] | None = None,
        language: str | None = None,
    ) -> Iterator[str]:
        """Yield the answer piece by piece; set self.last_usage when done. `language` ("en", "zh"): the answer's; an
        engine that can keep the other script out of it does so (the in-process llama.cpp engine: no Han
        character in an English answer), the others read only the prompt."""

    def complete(self, messages: list[Message], **kwargs: object) -> str:
        return "".join(self.stream(messages, **kwargs))  # type: ignore[arg-type]

    def count_tokens(self, text: str) -> int:
        """Tokens of text under this model's tokenizer; engines with a tokenizer override this."""
        return rough_tokens(text)

    def warmup(self, system: str | None = None) -> None:  # noqa: B027 - optional hook, a no-op by default
        """Load weights and process a fixed prompt prefix (the system prompt) ahead of the first request."""

    def ping(self) -> None:  # noqa: B027 - optional hook, a no-op by default
        """Raise a UserError when the engine cannot answer now (a remote server that is down); for /readyz."""

    def close(self) -> None:  # noqa: B027 - optional hook, a no-op by default
        """Free the model's memory."""
