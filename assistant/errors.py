"""Errors meant for users: a code, and a message in English and in Chinese (UserError); a model that cannot be
loaded or used (ModelError, raised by the engines of assistant/llm/ and the remote client)."""
from __future__ import annotations


class UserError(Exception):
    """A problem the user can act on (bad input, missing index, model not ready, queue full).

    Adapters show `message(lang)` and never a stack trace; HTTP maps `status` to the response code and
    `retry_after` (seconds, for a refusal that is only for now: 429, 503) to a `Retry-After` header.
    """

    def __init__(self, code: str, en: str, zh: str, status: int = 400, retry_after: int | None = None) -> None:
        super().__init__(en)
        self.code = code
        self.en = en
        self.zh = zh
        self.status = status
        self.retry_after = retry_after

    def message(self, lang: str = "en") -> str:
        return self.zh if lang == "zh" else self.en

    def to_dict(self, lang: str = "en") -> dict[str, str]:
        return {"code": self.code, "message": self.message(lang), "message_en": self.en, "message_zh": self.zh}


class ModelError(RuntimeError):
    """A model cannot be loaded or used; the message says what to do about it."""
