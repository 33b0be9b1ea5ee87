"""Query translation for cross-language retrieval: the question in the other language, written by a chat model.

Most official pages exist in one language only, and the keyword side of retrieval crosses languages only
through the concept terms of assistant/frameworks.py. A whole-question translation by the chat model gives
passages in the other language a real keyword query and a second embedding (assistant/retrieval.py).

Owns the prompt, the checks on the model's output (one line, in the target language, not too long, not a copy
of the question), a small cache, and a lock (one llama.cpp context is not thread-safe). A translation that
fails any check, or a model error, gives None: retrieval then runs as without translation.
Measured in docs/retrieval.md ("Query translation by the chat model").
"""
from __future__ import annotations

import logging
import re
import threading
from collections import OrderedDict
from typing import Any

from .lang import detect_language
from .llm.base import ChatModel
from .settings import Settings

log = logging.getLogger(__name__)

SYSTEM = ("You translate search queries about machine-learning frameworks. Reply with the translation only, "
          "no explanation. Keep code, API names and product names unchanged.")
_TARGET = {"zh": "English", "en": "Simplified Chinese"}
_LABEL = re.compile(r"^\s*(translation|译文|翻译)\s*[:：]\s*", re.IGNORECASE)
_QUOTES = "\"'“”‘’`「」"


class QueryTranslator:
    """Translates a question into the other of the two languages; None when it cannot."""

    def __init__(self, model: ChatModel, max_tokens: int = 80, cache_size: int = 512) -> None:
        self.model = model
        self.max_tokens = max_tokens
        self._cache: OrderedDict[str, str | None] = OrderedDict()
        self._cache_size = cache_size
        self._lock = threading.Lock()

    def translate(self, question: str) -> str | None:
        question = question.strip()
        if not question:
            return None
        with self._lock:
            if question in self._cache:
                self._cache.move_to_end(question)
                return self._cache[question]
            source = detect_language(question)
            try:
                raw = self.model.complete(
                    [{"role": "system", "content": SYSTEM},
                     {"role": "user", "content": f"Translate into {_TARGET[source]}:\n{question}"}],
                    max_tokens=self.max_tokens, temperature=0.0)
            except Exception as exc:  # a translation is an optional extra: retrieval goes on without it
                log.warning("query translation failed: %s", exc)
                return None
            out = clean(raw, question, source)
            self._cache[question] = out
            if len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)
            return out

    def close(self) -> None:
        self.model.close()


def create_translator(settings: Settings) -> QueryTranslator:
    """A translator with its own model instance (settings.translate_model on llama.cpp, small context), or the
    remote engine when the backend is remote: one llama.cpp context serves one thread."""
    from .llm.factory import create_chat_model

    over: dict[str, Any] = {"speculative": "none", "n_ctx": 512}
    if settings.backend != "openai":
        over.update(model=settings.translate_model, backend="llama")
    return QueryTranslator(create_chat_model(settings.model_copy(update=over)))


def clean(raw: str, question: str, source: str) -> str | None:
    """The model's translation, or None when it is empty, in the question's language, a copy, or too long."""
    line = next((s for s in raw.strip().splitlines() if s.strip()), "")
    line = _LABEL.sub("", line).strip().strip(_QUOTES).strip()
    if not line or line == question or len(line) > 3 * len(question) + 40:
        return None
    if detect_language(line) == source:
        return None
    return line
