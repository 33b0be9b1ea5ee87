"""A deterministic ChatModel that streams a scripted text word by word: plumbing tests only.

It is a real implementation of the interface (stop sequences, max_tokens, usage), so tests of other
layers (service events, SSE framing, UI streaming) can run without loading weights. It knows nothing:
tests of answer *behaviour* (grounding, language, citations, refusals) must use a real model.
`quote_sources` is the script of the "scripted" backend (assistant/llm/factory.py): it copies the
prompt's first numbered sources with their [n], so the citation check finds them supported.
"""
from __future__ import annotations

import re
from collections.abc import Callable, Iterator

from assistant.lang import detect_language
from assistant.llm.base import ChatModel, Message, Usage
from assistant.text import HAN, rough_tokens, split_sentences

# a word with its trailing spaces; each CJK character on its own (Chinese has no spaces between words)
_WORD = re.compile(f"[{HAN}]\\s*|[^\\s{HAN}]+\\s*|\\s+")
Script = str | list[str] | Callable[[list[Message]], str]
_SOURCE = re.compile(r"^\[(\d+)\] (.+)$", re.MULTILINE)  # one numbered source per line (answer/prompt.py)


def quote_sources(messages: list[Message], count: int = 2) -> str:
    """The first sentence of each of the first `count` sources in the last user message, each cited [n];
    the user message itself when it holds no numbered sources."""
    user = next((m["content"] for m in reversed(messages) if m["role"] == "user"), "")
    parts = []
    for n, text in _SOURCE.findall(user)[:count]:
        sentence = split_sentences(text)[0].rstrip(" .。!！?？；;")
        parts.append(f"{sentence} [{n}]{'。' if detect_language(sentence) == 'zh' else '.'}")
    return " ".join(parts) or user


class ScriptedChatModel(ChatModel):
    """Answers with `script` (a text, a list used in turn, or a function of the messages);
    with no script it echoes the last user message."""

    name = "scripted"

    def __init__(self, script: Script | None = None) -> None:
        super().__init__()
        self.script = script
        self.calls: list[list[Message]] = []  # what it was asked, for plumbing assertions

    def _text(self, messages: list[Message]) -> str:
        if self.script is None:
            return next((m["content"] for m in reversed(messages) if m["role"] == "user"), "")
        if callable(self.script):
            return self.script(messages)
        if isinstance(self.script, list):
            return self.script[(len(self.calls) - 1) % len(self.script)]
        return self.script

    def stream(
        self,
        messages: list[Message],
        *,
        max_tokens: int = 256,
        temperature: float = 0.1,
        stop: list[str] | None = None,
        language: str | None = None,
    ) -> Iterator[str]:
        self.calls.append(messages)
        text = self._text(messages)
        cut = min((text.find(s) for s in stop or [] if s in text), default=len(text))
        words = _WORD.findall(text[:cut])[:max_tokens]
        yield from words
        prompt = sum(rough_tokens(m["content"]) for m in messages)
        self.last_usage = Usage(prompt_tokens=prompt, completion_tokens=len(words))

