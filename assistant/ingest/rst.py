"""reStructuredText -> sections.

Owns: section titles (underline, or overline + underline, any punctuation character; levels are
assigned in order of first appearance, as docutils does), directives (code blocks become fenced
code, admonitions keep their text, images/toctrees/labels/comments are dropped) and inline roles
(`:ref:`text <label>`` -> text). Not a full docutils parser: tables and field lists stay as text.
"""
from __future__ import annotations

import re

from .sections import Line, MappedSection, SectionBuilder

_ADORN = re.compile(r"^([!-/:-@\[-`{-~])\1{2,}\s*$")
_DIRECTIVE = re.compile(r"^(\s*)\.\.\s+([\w:.-]+)::\s*(.*)$")
_EXPLICIT = re.compile(r"^(\s*)\.\.(?:\s|$)")  # comments, link targets (.. _label:), substitutions
_OPTION = re.compile(r"^\s*:[\w -]+:(?:\s.*)?$")
_ROLE = re.compile(r":[\w:.+-]+:`([^`]*)`")
_LINK = re.compile(r"`([^`<]+?)\s*<[^>`]+>`_{1,2}")
_TARGET_REF = re.compile(r"`([^`]+)`_{1,2}(?!\w)")
_CODE = {"code-block", "code", "sourcecode", "testcode", "ipython", "doctest", "jupyter-execute", "code-cell"}
_DROP = {"image", "figure", "toctree", "raw", "contents", "include", "literalinclude", "meta", "only",
         "currentmodule", "module", "automodule", "autosummary", "autofunction", "autoclass", "automethod",
         "highlight", "role", "default-role", "csv-table", "list-table", "graphviz", "plot", "tab-set",
         "customcarditem", "galleryitem", "grid", "grid-item-card", "testsetup", "testcleanup", "index"}


def role_text(m: re.Match[str]) -> str:
    inner = m.group(1).strip()
    label = re.match(r"^(.*?)\s*<[^>]*>$", inner, re.DOTALL)
    if label and label.group(1):
        inner = label.group(1)
    return inner.lstrip("~!")


def clean_inline(text: str) -> str:
    text = _ROLE.sub(lambda m: "`" + role_text(m) + "`", text)
    text = _LINK.sub(r"\1", text)
    return _TARGET_REF.sub(r"\1", text)


def _indent(s: str) -> int:
    return len(s) - len(s.lstrip()) if s.strip() else 1 << 30


class _Parser:
    def __init__(self, builder: SectionBuilder) -> None:
        self.b = builder
        self.styles: list[tuple[str, bool]] = []  # heading styles in order of first appearance
        self.title = ""

    def run(self, lines: list[Line]) -> None:
        i = 0
        while i < len(lines):
            i = self._step(lines, i)

    def _step(self, lines: list[Line], i: int) -> int:
        n, raw = lines[i]
        nxt = lines[i + 1][1] if i + 1 < len(lines) else ""
        if raw.lstrip().startswith("```"):  # fenced code handed over by the sphinx-gallery loader
            return self._fenced(lines, i)
        over = _ADORN.match(raw)
        if over and i + 2 < len(lines) and lines[i + 2][1].strip()[:1] == over.group(1) \
                and _ADORN.match(lines[i + 2][1]) and lines[i + 1][1].strip():
            self._heading(lines[i + 1][1], over.group(1), True)
            return i + 3
        under = _ADORN.match(nxt)
        if under and raw.strip() and not raw[0].isspace() and not _ADORN.match(raw) \
                and (i == 0 or not lines[i - 1][1].strip()):
            self._heading(raw, under.group(1), False)
            return i + 2
        d = _DIRECTIVE.match(raw)
        if d:
            return self._directive(lines, i, d)
        if _EXPLICIT.match(raw):
            return self._skip_block(lines, i)
        self.b.add(n, clean_inline(raw))
        return i + 1

    def _heading(self, raw: str, char: str, overline: bool) -> None:
        style = (char, overline)
        if style not in self.styles:
            self.styles.append(style)
        level = self.styles.index(style) + 1
        text = " ".join(clean_inline(raw).replace("`", "").replace("**", "").split())
        if level == 1 and not self.title:
            self.title = text
        self.b.heading(level, text)

    def _block_end(self, lines: list[Line], i: int, base: int) -> int:
        """Index after the indented body that follows line i (body lines are indented past `base`)."""
        j = i + 1
        while j < len(lines) and _indent(lines[j][1]) > base:
            j += 1
        while j > i + 1 and not lines[j - 1][1].strip():
            j -= 1
        return j

    def _skip_block(self, lines: list[Line], i: int) -> int:
        return self._block_end(lines, i, _indent(lines[i][1]))

    def _directive(self, lines: list[Line], i: int, d: re.Match[str]) -> int:
        base, name, arg = len(d.group(1)), d.group(2).lower(), d.group(3).strip()
        end = self._block_end(lines, i, base)
        short = name.split(":")[-1]
        if short in _DROP or name.startswith("auto"):
            return end
        body = [ln for ln in lines[i + 1:end]]
        while body and (not body[0][1].strip() or _OPTION.match(body[0][1])):
            body.pop(0)
        if short in _CODE:
            self._code(body, arg.split()[0] if arg else "python", lines[i][0])
            return end
        if arg and short not in ("glossary", "container", "tab-item", "dropdown", "rubric"):
            self.b.add(lines[i][0], clean_inline(arg))  # ".. note:: Some text" keeps its text
        elif arg and short == "rubric":
            self.b.add(lines[i][0], clean_inline(arg))
        dedent = min((_indent(t) for _, t in body), default=0)
        sub = _Parser(self.b)
        sub.styles = self.styles
        sub.run([(n, t[dedent:] if t.strip() else "") for n, t in body])
        return end

    def _code(self, body: list[Line], lang: str, n0: int) -> None:
        if not body:
            return
        dedent = min(_indent(t) for _, t in body)
        self.b.add(body[0][0], "")
        self.b.add(body[0][0], "```" + lang)
        for n, t in body:
            self.b.add(n, t[dedent:])
        self.b.add(body[-1][0], "```")
        self.b.add(body[-1][0], "")

    def _fenced(self, lines: list[Line], i: int) -> int:
        j = i + 1
        while j < len(lines) and not lines[j][1].lstrip().startswith("```"):
            j += 1
        for n, t in lines[i:j + 1]:
            self.b.add(n, t)
        return j + 1


def parse_rst(lines: list[Line], builder: SectionBuilder | None = None) -> tuple[list[MappedSection], str]:
    """Parse reStructuredText lines -> (sections, document title = first top-level title)."""
    b = builder or SectionBuilder()
    p = _Parser(b)
    p.run(lines)
    return b.finish(), p.title
