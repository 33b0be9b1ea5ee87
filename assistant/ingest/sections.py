"""Building sections from source lines while remembering where every text line came from.

Each loader turns its format into `(line_number, text)` pairs and heading events; `SectionBuilder`
groups them into `MappedSection`s. A `MappedSection` is a `Section` (the shared domain type) with
one extra field, `line_map`: the 1-based line of the original file for every line of `text`.
The chunker uses it so that a chunk's `lines` point at the real lines even when the loader
dropped markup lines (directives, front matter, notebook JSON) in between.
"""
from __future__ import annotations

from dataclasses import dataclass

from assistant.types import Section

Line = tuple[int, str]  # (1-based line number in the original file, text)


@dataclass(frozen=True)
class MappedSection(Section):
    line_map: tuple[int, ...] = ()


def line_numbers(section: Section) -> list[int]:
    """Original line number of each line of section.text (linear fallback for plain Sections)."""
    n = section.text.count("\n") + 1
    lm = getattr(section, "line_map", ())
    if len(lm) == n:
        return list(lm)
    return [min(section.line_start + i, section.line_end) for i in range(n)]


class SectionBuilder:
    """Collects lines under the current heading path; a heading closes the running section."""

    def __init__(self) -> None:
        self.sections: list[MappedSection] = []
        self.path: tuple[str, ...] = ()
        self._lines: list[Line] = []

    def heading(self, level: int, title: str) -> None:
        self._flush()
        title = " ".join(title.split())
        parent = self.path[: max(level - 1, 0)]
        self.path = (*parent, title) if title else parent

    def set_path(self, path: tuple[str, ...]) -> None:
        self._flush()
        self.path = path

    def add(self, lineno: int, text: str) -> None:
        self._lines.append((lineno, text.rstrip()))

    def last(self) -> Line | None:
        return self._lines[-1] if self._lines else None

    def pop_last(self) -> Line:
        return self._lines.pop()

    def finish(self) -> list[MappedSection]:
        self._flush()
        return self.sections

    def _flush(self) -> None:
        lines = self._lines
        self._lines = []
        while lines and not lines[0][1].strip():
            lines.pop(0)
        while lines and not lines[-1][1].strip():
            lines.pop()
        if not lines:
            return
        nums = [n for n, _ in lines]
        self.sections.append(MappedSection(
            heading_path=self.path,
            text="\n".join(t for _, t in lines),
            line_start=min(nums),
            line_end=max(nums),
            line_map=tuple(nums),
        ))
