"""Markdown (CommonMark-ish, with the MyST and Jekyll bits the framework docs use) -> sections.

Owns: YAML front matter, ATX and setext headings, fenced code kept verbatim inside its section,
and removal of markup that only adds noise to retrieval (HTML comments and tags, images, link
targets, MyST labels and roles). Works on `(line_number, text)` pairs so that notebooks can feed
their cells through it with their own line numbers.
"""
from __future__ import annotations

import re
from typing import Any

import yaml

from .sections import Line, MappedSection, SectionBuilder

_ATX = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$")
_SETEXT = re.compile(r"^ {0,3}(=+|-+)[ \t]*$")
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})\s*(.*)$")
_IMAGE = re.compile(r"!\[[^\]]*\]\([^)]*\)")
_LINK = re.compile(r"\[([^\]]*)\]\([^)\s]*(?:\s+\"[^\"]*\")?\)")
_REF_LINK = re.compile(r"\[([^\]]+)\]\[[^\]]*\]")
_TAG = re.compile(r"</?[A-Za-z][^<>]*>")
_MYST_ROLE = re.compile(r"\{[\w:.-]+\}`([^`]*)`")
_DROP_LINE = re.compile(
    r"^\s*(?:\([\w.-]+\)=\s*|\+\+\+.*|\{%.*%\}\s*|\{:.*\}\s*|\[[^\]]+\]:\s+\S+.*|:[\w-]+:.*)$"
)
_CODE_INFO = re.compile(r"^\{?(code-cell|code-block|code|sourcecode)\}?\s*(.*)$")
ADMONITION = re.compile(r"^\{[\w-]+\}")


def split_front_matter(lines: list[Line]) -> tuple[dict[str, Any], list[Line]]:
    """YAML front matter at the top of the file -> (meta, remaining lines). Bad YAML is ignored."""
    if not lines or lines[0][1].strip() != "---":
        return {}, lines
    for i in range(1, len(lines)):
        if lines[i][1].strip() in ("---", "..."):
            try:
                meta = yaml.safe_load("\n".join(t for _, t in lines[1:i])) or {}
            except (yaml.YAMLError, RecursionError):  # RecursionError: "[[[[..." nested thousands deep
                meta = {}
            return (meta if isinstance(meta, dict) else {}), lines[i + 1:]
    return {}, lines


def clean_inline(text: str) -> str:
    """Drop images and HTML tags, keep the text of links and MyST roles."""
    text = _IMAGE.sub("", text)
    text = _LINK.sub(r"\1", text)
    text = _REF_LINK.sub(r"\1", text)
    text = _MYST_ROLE.sub(r"`\1`", text)
    text = re.sub(r"<br\s*/?>", " ", text, flags=re.IGNORECASE)
    return _TAG.sub("", text)


def heading_text(raw: str) -> str:
    text = clean_inline(raw)
    text = re.sub(r"\{#[^}]*\}\s*$", "", text)  # kramdown/pandoc anchors
    text = text.replace("``", "").replace("`", "").replace("**", "")
    return " ".join(text.split()).strip(" #")


class _Parser:
    def __init__(self, builder: SectionBuilder) -> None:
        self.b = builder
        self.title = ""
        self.fence = ""  # the fence marker of the open code block, "" when outside code
        self.in_comment = False
        self.code_started = False
        self.admonitions: list[str] = []  # fence markers of open MyST admonitions

    def feed(self, lines: list[Line]) -> None:
        for i, (n, raw) in enumerate(lines):
            if self.fence:
                self._in_fence(n, raw)
            elif self.in_comment or "<!--" in raw:
                self._comment(n, raw)
            else:
                self._line(n, raw, lines[i - 1][1] if i else "")
        self.fence = ""  # a notebook cell closes its own unterminated fence

    def _in_fence(self, n: int, raw: str) -> None:
        s = raw.strip()
        if s.startswith(self.fence[:3]) and set(s) <= set(self.fence[0]) and len(s) >= len(self.fence):
            self.fence = ""
            self.b.add(n, "```")
        elif self.code_started or not re.match(r"^:[\w-]+:", s):  # MyST code-cell options come first
            self.code_started = True
            self.b.add(n, raw)

    def _comment(self, n: int, raw: str) -> None:
        if not self.in_comment:
            before, _, after = raw.partition("<!--")
            if "-->" in after:
                self._line(n, before + after.split("-->", 1)[1], "")
                return
            if before.strip():
                self._line(n, before, "")
            self.in_comment = True
        elif "-->" in raw:
            self.in_comment = False
            rest = raw.split("-->", 1)[1]
            if rest.strip():
                self._line(n, rest, "")

    def _line(self, n: int, raw: str, prev: str) -> None:
        m = _FENCE.match(raw)
        if m and self.admonitions and not m.group(2).strip() and m.group(1) == self.admonitions[-1]:
            self.admonitions.pop()  # end of a MyST admonition: its content was ordinary Markdown
            return None
        if m:
            return self._open_fence(n, m.group(1), m.group(2).strip())
        m = _ATX.match(raw)
        if m:
            return self._heading(len(m.group(1)), m.group(2) or "")
        m = _SETEXT.match(raw)
        last = self.b.last()
        if m and prev.strip() and last and last[1] == clean_inline(prev).rstrip() and not _is_special(prev):
            _, last_text = self.b.pop_last()
            return self._heading(1 if m.group(1)[0] == "=" else 2, last_text)
        if _DROP_LINE.match(raw):
            return None
        text = clean_inline(raw)
        if text.strip() or not raw.strip():
            self.b.add(n, text)
        return None

    def _open_fence(self, n: int, marker: str, info: str) -> None:
        code = _CODE_INFO.match(info)
        if ADMONITION.match(info) and not code:  # ```{note} ... ```: prose, not code
            self.admonitions.append(marker)
            return
        self.fence = marker
        self.code_started = False
        lang = (code.group(2).split() or ["python"])[0] if code else info.split(" ")[0]
        self.b.add(n, "```" + lang)

    def _heading(self, level: int, raw: str) -> None:
        text = heading_text(raw)
        if level == 1 and not self.title:
            self.title = text
        self.b.heading(level, text)


def _is_special(line: str) -> bool:
    s = line.strip()
    return s.startswith(("|", ">", "- ", "* ", "```", "<")) or bool(_SETEXT.match(line))


def parse_markdown(lines: list[Line], builder: SectionBuilder | None = None) -> tuple[list[MappedSection], str]:
    """Parse Markdown lines (front matter already removed) -> (sections, first H1 title)."""
    b = builder or SectionBuilder()
    p = _Parser(b)
    p.feed(lines)
    return b.finish(), p.title


class MarkdownStream:
    """Feed several Markdown fragments (notebook cells) into one section tree."""

    def __init__(self) -> None:
        self.builder = SectionBuilder()
        self.parser = _Parser(self.builder)

    def feed(self, lines: list[Line]) -> None:
        self.parser.feed(lines)

    def add_code(self, lines: list[Line], lang: str = "python") -> None:
        if not any(t.strip() for _, t in lines):
            return
        self.builder.add(lines[0][0], "")
        self.builder.add(lines[0][0], "```" + lang)
        for n, t in lines:
            self.builder.add(n, t)
        self.builder.add(lines[-1][0], "```")
        self.builder.add(lines[-1][0], "")

    def finish(self) -> tuple[list[MappedSection], str]:
        return self.builder.finish(), self.parser.title
