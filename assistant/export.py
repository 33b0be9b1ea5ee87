"""A conversation as a document: Markdown with each answer's citations as numbered footnotes, or JSON; and one
answer with its footnotes (the UI's copy button). Input is a session as the store returns it (`get`).

Footnotes are numbered through the whole document ([^1], [^2], ...), in the order the answers cite them; each
gives the passage's title, its source path, its line range and, when it has one, its upstream URL. An [n] an
answer carries without a recorded citation is left as written. Text is the stored text: the export is a file
for the user, not a page, so nothing is escaped beyond what Markdown footnotes need.
"""
from __future__ import annotations

import json
import re
import time
from typing import Any

from .text import citation_marks, rewrite

FORMATS = ("markdown", "json")
LABELS = {"zh": {"q": "问", "a": "答", "lines": "行", "stopped": "（已停止）", "exported": "导出于"},
          "en": {"q": "Q", "a": "A", "lines": "lines", "stopped": "(stopped)", "exported": "Exported"}}


def footnote(c: dict[str, Any], lang: str) -> str:
    """One citation as the text of its footnote: title — source, lines a–b, URL."""
    lines = c.get("lines") or []
    span = f", {LABELS[lang]['lines']} {lines[0]}–{lines[1]}" if len(lines) == 2 else ""
    title = f"{c['title']} — " if c.get("title") else ""
    url = f" <{c['url']}>" if str(c.get("url", "")).startswith(("https://", "http://")) else ""
    return f"{title}`{c.get('source', '')}`{span}{url}"


class _Numbering:
    """Footnote numbers across a document: one per (answer, [n])."""

    def __init__(self) -> None:
        self.notes: list[str] = []

    def answer(self, text: str, citations: list[dict[str, Any]], lang: str) -> str:
        local: dict[int, int] = {}
        by_n = {int(c["n"]): c for c in citations if "n" in c}

        def sub(m: re.Match[str]) -> str:
            n = int(m.group(1))
            if n not in by_n:
                return m.group(0)
            if n not in local:
                self.notes.append(footnote(by_n[n], lang))
                local[n] = len(self.notes)
            return f"[^{local[n]}]"

        return rewrite(text, citation_marks(text), sub)

    def block(self) -> str:
        return "\n".join(f"[^{i}]: {note}" for i, note in enumerate(self.notes, 1))


def _answer_text(m: dict[str, Any], lang: str) -> str:
    return m["content"] + (f" {LABELS[lang]['stopped']}" if m.get("stopped") else "")


def to_markdown(session: dict[str, Any], lang: str = "zh") -> str:
    """The conversation as Markdown: a heading, each question and answer, then the footnotes."""
    t = LABELS[lang]
    notes = _Numbering()
    out = [f"# {session.get('title') or session['id']}", "",
           f"_{t['exported']} {time.strftime('%Y-%m-%d %H:%M', time.localtime())} · {session['id']}_", ""]
    for m in session["messages"]:
        if m["role"] == "user":
            out += [f"**{t['q']}:** {m['content']}", ""]
        else:
            out += [f"**{t['a']}:** {notes.answer(_answer_text(m, lang), m.get('citations') or [], lang)}", ""]
    if notes.notes:
        out += ["---", "", notes.block(), ""]
    return "\n".join(out)


def answer_markdown(session: dict[str, Any], message_id: str, lang: str = "zh") -> str | None:
    """One answer with its own footnotes (numbered from 1), for the clipboard; None when it is not there."""
    m = next((m for m in session["messages"] if m["id"] == message_id and m["role"] == "assistant"), None)
    if m is None:
        return None
    notes = _Numbering()
    text = notes.answer(_answer_text(m, lang), m.get("citations") or [], lang)
    return text + ("\n\n" + notes.block() if notes.notes else "") + "\n"


def to_json(session: dict[str, Any]) -> str:
    """The conversation as JSON: the session as stored (messages with their citations and versions)."""
    return json.dumps({"format": "framework-advisor.conversation/1", "exported": time.time(), **session},
                      ensure_ascii=False, indent=2)


def export(session: dict[str, Any], fmt: str, lang: str = "zh") -> tuple[str, str, str]:
    """(text, media type, file name) of the session in `fmt` (one of FORMATS)."""
    if fmt == "json":
        return to_json(session), "application/json", f"conversation-{session['id'][:8]}.json"
    return to_markdown(session, lang), "text/markdown; charset=utf-8", f"conversation-{session['id'][:8]}.md"
