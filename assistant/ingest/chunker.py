"""Structure-aware chunking: Document -> Chunks that fit a token budget and cite real lines.

Rules (see docs/chunking.md for the numbers behind DEFAULT_CHUNK_TOKENS):
- a chunk never spans two sections; its heading path is (document title, section, subsection...);
- a section is cut into blocks (paragraphs, fenced code, tables); a block that does not fit is cut
  into sentences (zh 。！？； and en . ! ? ; before whitespace), an over-long sentence at commas,
  then at spaces (never inside a word); code at line ends; tables between rows, with the header
  row repeated in every piece (a row too wide for the budget is split between cells, each piece
  keeping the row's first cell and its column headers);
- units are packed greedily up to max_tokens; Chinese and English prose never share a chunk;
- a tiny trailing piece (< MIN_TOKENS) is merged into, or rebalanced with, the piece before it;
- a paragraph that is only a list of links or file paths (the notes' "来源 / Sources:" lines) is not
  indexed: it states nothing, and its URL words (megatron/core/...) outranked the passages it points at.
"""
from __future__ import annotations

import bisect
import hashlib
import re
from collections.abc import Callable
from dataclasses import dataclass

from assistant.frameworks import find_frameworks
from assistant.lang import detect_language
from assistant.text import cjk_count, estimate_tokens, sentence_ends, table_cells
from assistant.types import Chunk, Document, Section

from .sections import line_numbers

DEFAULT_CHUNK_TOKENS = 160
# bumped when the same file would give different chunks: an index built by another version re-chunks
# every file (vectors of unchanged chunks are still reused from the embedding cache)
CHUNKER_VERSION = 4  # 3: chunks carry licence, publisher and date; synced pages a line-anchored url. 4: a
# header-only table is kept, a wide row stays within the budget
MIN_TOKENS = 30
TokenCounter = Callable[[str], int]

_SOFT_BREAKS = (re.compile(r"[，、,：:]\s*"), re.compile(r"\s+"))
_LATIN_WORD = re.compile(r"[A-Za-z]{2,}")
_URL = re.compile(r"https?://\S+|\S+/\S+")  # URLs and paths are not prose
_FILE_NAME = re.compile(r"[\w.-]+\.(md|rst|txt|py|ipynb|html?|pdf)", re.IGNORECASE)
_REF_LABEL = re.compile(r"^\s*(来源|参考|出处|Sources?|References?|See also)(\s*/\s*\w+)?\s*[:：]", re.IGNORECASE)


@dataclass
class _Unit:
    """A piece of one section: text, its original line range, and how it joins the unit before it."""

    text: str
    lo: int
    hi: int
    block: int  # index of the block it came from; units of one block join without a separator
    lang: str | None  # "zh" | "en" | None (code, tables without CJK, short fragments)
    fresh: bool = False  # starts a new chunk (the continuation of a split table)


class _Block:
    def __init__(self, kind: str, lines: list[str], nums: list[int]) -> None:
        self.kind, self.text, self.nums = kind, "\n".join(lines), nums
        self.starts = [0]
        for t in lines[:-1]:
            self.starts.append(self.starts[-1] + len(t) + 1)

    def span(self, a: int, b: int, index: int) -> _Unit | None:
        """The unit for text[a:b] (trailing whitespace kept so that neighbours rejoin exactly)."""
        piece = self.text[a:b]
        if not piece.strip():
            return None
        a2 = a + len(piece) - len(piece.lstrip())
        b2 = a + len(piece.rstrip())
        lo = self.nums[bisect.bisect_right(self.starts, a2) - 1]
        hi = self.nums[bisect.bisect_right(self.starts, max(b2 - 1, a2)) - 1]
        return _Unit(piece, lo, hi, index, _lang_tag(piece, self.kind))


def _lang_tag(text: str, kind: str) -> str | None:
    """The prose language of a unit, or None when it has too little prose to say (code, URLs, labels
    like "来源 / Sources:"); None units join a chunk of either language."""
    t = _URL.sub(" ", text)
    if cjk_count(t) >= 4:
        return detect_language(t)
    if kind == "prose" and len(_LATIN_WORD.findall(t)) >= 6:
        return "en"
    return None


def is_reference_list(text: str) -> bool:
    """A paragraph that only lists links or paths (with an optional "Sources:" label): not evidence."""
    words = [w for w in re.split(r"[\s,，;；]+", _REF_LABEL.sub("", text))
             if w.strip("-*:：") and not w.endswith((":", "："))]  # inner labels ("framework-docs:") aside
    links = sum(1 for w in words if _URL.fullmatch(w) or _FILE_NAME.fullmatch(w))
    return links >= 2 and links >= 0.7 * len(words)


def _blocks(section: Section) -> list[_Block]:
    lines, nums = section.text.split("\n"), line_numbers(section)
    out: list[_Block] = []
    i = 0
    while i < len(lines):
        s = lines[i].strip()
        if not s:
            i += 1
            continue
        j = i + 1
        if s.startswith(("```", "~~~")):
            kind = "code"
            while j < len(lines) and not lines[j].strip().startswith(s[:3]):
                j += 1
            j = min(j + 1, len(lines))
        elif s.startswith("|"):
            kind = "table"
            while j < len(lines) and lines[j].strip().startswith("|"):
                j += 1
        else:
            kind = "prose"
            while j < len(lines) and lines[j].strip() and not lines[j].strip().startswith(("```", "~~~", "|")):
                j += 1
        if not (kind == "prose" and is_reference_list("\n".join(lines[i:j]))):
            out.append(_Block(kind, lines[i:j], nums[i:j]))
        i = j
    return out


def _cut(text: str, max_tokens: int, count: TokenCounter, level: int = 0) -> list[tuple[int, int]]:
    """Spans of text, each within max_tokens, cut at sentence ends, then commas, then spaces."""
    if count(text) <= max_tokens:
        return [(0, len(text))]
    if level > 2:
        return _hard_cut(text, max_tokens, count)
    ends = sentence_ends(text) if level == 0 else [m.end() for m in _SOFT_BREAKS[level - 1].finditer(text)]
    bounds = [e for e in ends if 0 < e < len(text)]
    pieces = list(zip([0, *bounds], [*bounds, len(text)], strict=True))
    spans: list[tuple[int, int]] = []
    for a, b in pieces:
        if spans and count(text[spans[-1][0]:b]) <= max_tokens:
            spans[-1] = (spans[-1][0], b)
        elif count(text[a:b]) <= max_tokens:
            spans.append((a, b))
        else:
            spans.extend((a + x, a + y) for x, y in _cut(text[a:b], max_tokens, count, level + 1))
    return spans


def _hard_cut(text: str, max_tokens: int, count: TokenCounter) -> list[tuple[int, int]]:
    """Last resort (a CJK run without punctuation, a very long token): cut between characters,
    preferring a boundary next to a CJK character so that no Latin word is split."""
    spans, a = [], 0
    while a < len(text):
        b = a + 1
        while b < len(text) and count(text[a:b + 1]) <= max_tokens:
            b += 1
        if b < len(text):
            for c in range(b, a, -1):
                if cjk_count(text[c - 1:c + 1]) or not (text[c - 1].isalnum() and text[c].isalnum()):
                    b = c
                    break
        spans.append((a, b))
        a = b
    return spans


def _units(block: _Block, index: int, max_tokens: int, count: TokenCounter) -> list[_Unit]:
    if block.kind == "table" and count(block.text) > max_tokens:
        return _table_units(block, index, max_tokens, count)
    if block.kind == "code" and count(block.text) > max_tokens:
        bounds = [m.end() for m in re.finditer(r"\n", block.text)]
        spans: list[tuple[int, int]] = []
        for a, b in zip([0, *bounds], [*bounds, len(block.text)], strict=True):
            if spans and count(block.text[spans[-1][0]:b]) <= max_tokens:
                spans[-1] = (spans[-1][0], b)
            else:
                spans.extend((a + x, a + y) for x, y in _cut(block.text[a:b], max_tokens, count, 2))
    else:
        spans = _cut(block.text, max_tokens, count)
    return [u for a, b in spans if (u := block.span(a, b, index))]


def _table_units(block: _Block, index: int, max_tokens: int, count: TokenCounter) -> list[_Unit]:
    """Split a table between rows; every piece starts with the header row (and its --- line)."""
    rows = block.text.split("\n")
    head = 2 if len(rows) > 1 and re.fullmatch(r"\|?[\s:|-]+\|?", rows[1].strip()) else 1
    header = "\n".join(rows[:head])
    if head >= len(rows):  # a header and no rows (or one "| ..." line of prose): cut as text, not lost
        return [u for a, b in _cut(block.text, max_tokens, count, 1) if (u := block.span(a, b, index))]
    units: list[_Unit] = []
    cur: list[int] = []
    for r in range(head, len(rows)):
        if count(header + "\n" + rows[r]) > max_tokens:  # one row too wide for the budget
            if cur:
                units.append(_table_unit(block, "\n".join([header, *(rows[k] for k in cur)]), cur[-1], index))
                cur = []
            units.extend(_table_unit(block, t, r, index) for t in _wide_row(rows[0], rows[r], max_tokens, count))
            continue
        if cur and count("\n".join([header, *(rows[k] for k in cur), rows[r]])) > max_tokens:
            units.append(_table_unit(block, "\n".join([header, *(rows[k] for k in cur)]), cur[-1], index))
            cur = []
        cur.append(r)
    if cur:
        units.append(_table_unit(block, "\n".join([header, *(rows[k] for k in cur)]), cur[-1], index))
    return units


def _wide_row(header: str, row: str, max_tokens: int, count: TokenCounter) -> list[str]:
    """A row that cannot fit with its header: split it between cells (never inside one), each piece
    a small table of the row's first cell (its key) plus some columns, under their own headers."""
    heads, cells = table_cells(header), table_cells(row)
    heads += [""] * (len(cells) - len(heads))

    def table(cols: list[int]) -> str:
        keep = [0, *cols]
        return "\n".join(["| " + " | ".join(heads[k] for k in keep) + " |", "|" + "---|" * len(keep),
                          "| " + " | ".join(cells[k] for k in keep) + " |"])

    pieces: list[str] = []
    cols: list[int] = []
    for k in range(1, len(cells)):
        if cols and count(table([*cols, k])) > max_tokens:
            pieces.append(table(cols))
            cols = []
        if count(table([k])) > max_tokens:  # a single cell over budget: its text is cut as prose
            lead = f"{cells[0]} / {heads[k]}: "
            if count(lead) > max_tokens // 2:  # a key or header this long keeps its start only
                lead = lead[:_cut(lead, max_tokens // 2, count, 3)[0][1]].rstrip() + "…: "
            text = cells[k]
            pieces.extend(lead + text[a:b] for a, b in _cut(text, max_tokens - count(lead), count))
            continue
        cols.append(k)
    if cols:
        pieces.append(table(cols))
    return pieces


def _table_unit(block: _Block, text: str, last_row: int, index: int) -> _Unit:
    return _Unit(text + "\n", block.nums[0], block.nums[last_row], index, _lang_tag(text, "table"), fresh=True)


def _join(units: list[_Unit]) -> str:
    out = ""
    for k, u in enumerate(units):
        same_block = k and units[k - 1].block == u.block and not u.fresh
        out = out + u.text if same_block or not out else out.rstrip() + "\n\n" + u.text
    return re.sub(r"\n{3,}", "\n\n", out).strip()


def _lang_of(units: list[_Unit]) -> str | None:
    return next((u.lang for u in units if u.lang), None)


def _pack(units: list[_Unit], max_tokens: int, count: TokenCounter) -> list[list[_Unit]]:
    groups: list[list[_Unit]] = []
    cur: list[_Unit] = []
    for u in units:
        lang = _lang_of(cur)
        clash = lang is not None and u.lang is not None and u.lang != lang
        if cur and (u.fresh or clash or count(_join([*cur, u])) > max_tokens):
            groups.append(cur)
            cur = []
        cur.append(u)
    if cur:
        groups.append(cur)
    return _fix_tail(groups, max_tokens, count)


def _fix_tail(groups: list[list[_Unit]], max_tokens: int, count: TokenCounter) -> list[list[_Unit]]:
    """Merge a tiny last group into the one before it, or move units over until it is not tiny."""
    if len(groups) < 2 or count(_join(groups[-1])) >= MIN_TOKENS:
        return groups
    prev, last = groups[-2], groups[-1]
    a, b = _lang_of(prev), _lang_of(last)
    if a and b and a != b or last[0].fresh:
        return groups
    if count(_join(prev + last)) <= max_tokens:
        return [*groups[:-2], prev + last]
    while len(prev) > 1 and count(_join(last)) < MIN_TOKENS and count(_join([prev[-1], *last])) <= max_tokens:
        last.insert(0, prev.pop())
    return groups


def chunk_id(source: str, heading_path: tuple[str, ...], text: str) -> str:
    return hashlib.sha256((source + "\x1f" + " > ".join(heading_path) + "\x1f" + text).encode()).hexdigest()[:16]


def _heading_path(doc: Document, section: Section) -> tuple[str, ...]:
    path = tuple(section.heading_path)
    if path and path[0] == doc.title:
        path = path[1:]
    return (doc.title, *path)


def _meaningful(text: str) -> bool:
    body = "\n".join(t for t in text.split("\n") if not t.strip().startswith(("```", "~~~")))
    return re.search(r"\w", body) is not None


def passage_url(meta: dict[str, object], lo: int, hi: int) -> str:
    """The link of a passage: its upstream file at the pinned commit with a line anchor when the page was synced
    (meta `lines_url`), else the document's own `url` (front matter), else ''."""
    template = str(meta.get("lines_url") or "")
    if template:
        return template.replace("{start}", str(lo)).replace("{end}", str(hi))
    return str(meta.get("url") or "")


def chunk_section(doc: Document, section: Section, max_tokens: int, count: TokenCounter) -> list[Chunk]:
    units: list[_Unit] = []
    for k, block in enumerate(_blocks(section)):
        units.extend(_units(block, k, max_tokens, count))
    path = _heading_path(doc, section)
    # a chunk of code or links only takes the language of the prose around it
    section_lang = _lang_of(units) or doc.language
    chunks = []
    for group in _pack(units, max_tokens, count):
        text = _join(group)
        if not _meaningful(text):
            continue
        found = find_frameworks(text + " " + " ".join(path[1:]))
        lo, hi = min(u.lo for u in group), max(u.hi for u in group)
        chunks.append(Chunk(
            id=chunk_id(doc.source, path, text), text=text, source=doc.source, title=doc.title,
            heading_path=path, language=_lang_of(group) or section_lang,
            frameworks=tuple(dict.fromkeys([*doc.frameworks, *found])),
            lines=(lo, hi), url=passage_url(doc.meta, lo, hi), licence=str(doc.meta.get("licence", "")),
            publisher=str(doc.meta.get("source", "")), date=str(doc.meta.get("date", "")),
        ))
    return chunks


def chunk_document(doc: Document, max_tokens: int = DEFAULT_CHUNK_TOKENS,
                   count_tokens: TokenCounter | None = None) -> list[Chunk]:
    """Chunks of doc in reading order; ids are stable and unique within the document."""
    count = count_tokens or estimate_tokens
    seen: set[str] = set()
    out: list[Chunk] = []
    for section in doc.sections:
        for c in chunk_section(doc, section, max_tokens, count):
            if c.id not in seen:
                seen.add(c.id)
                out.append(c)
    return out
