"""Loaders for the formats that are not plain markup: notebooks, sphinx-gallery scripts, HTML, PDF, text.

Each function takes the file's path (and, where relevant, its decoded text) and returns
`(sections, title, meta)`. Errors are raised as `ValueError(reason)`; `loader.py` turns them
into `LoadError`.

Line numbers:
- .ipynb: the line of the JSON file where each source line of a cell sits (nbformat writes one
  source line per JSON line); when a cell's source is one JSON string, all its lines point at the
  line of `"source"`; a line number never passes the file's last line (JSON written compactly). Outputs
  are dropped.
- HTML: the source line of the element (bs4 `sourceline`), + i for the lines of a <pre>.
- PDF: the line within the page's extracted text; the heading path ends with "p. N".
"""
from __future__ import annotations

import io
import json
import re
from pathlib import Path
from typing import Any

from .markdown import MarkdownStream
from .rst import parse_rst
from .sections import Line, MappedSection, SectionBuilder

_BOILERPLATE = re.compile(r"Licensed under the Apache License|^#+\s*Copyright", re.MULTILINE)


def _source_lines(raw_lines: list[str]) -> list[int]:
    """1-based JSON line number of every `"source"` key, in file order."""
    return [i + 1 for i, t in enumerate(raw_lines) if re.match(r'^\s*"source"\s*:', t)]


def load_notebook(text: str) -> tuple[list[MappedSection], str, dict[str, Any]]:
    try:
        nb = json.loads(text)
        cells = nb["cells"]
    except (json.JSONDecodeError, KeyError, TypeError) as e:
        raise ValueError(f"invalid notebook JSON: {e}") from None
    except RecursionError:
        raise ValueError("invalid notebook JSON: nested too deeply") from None
    raw_lines = text.split("\n")
    src_at = _source_lines(raw_lines)
    lang = str(nb.get("metadata", {}).get("kernelspec", {}).get("language", "python"))
    stream = MarkdownStream()
    k = 0  # index into src_at (code cells and markdown cells both have "source")
    for cell in cells:
        if not isinstance(cell, dict) or "source" not in cell:
            continue
        src = cell["source"]
        at = src_at[k] if k < len(src_at) else 1
        k += 1
        if isinstance(src, list):
            parts = "".join(str(x) for x in src).split("\n")
            # within the file: JSON not written one source line per line (a notebook on one line) ends early
            nums = [min(at + 1 + j, len(raw_lines)) for j in range(len(parts))]
        else:
            parts = str(src).split("\n")
            nums = [at] * len(parts)
        body = "\n".join(parts)
        if _BOILERPLATE.search(body) and len(body) < 1500:
            continue  # licence header cells of the TensorFlow notebooks
        lines = list(zip(nums, parts, strict=True))
        if cell.get("cell_type") == "markdown":
            stream.feed(lines)
        elif cell.get("cell_type") == "code":
            stream.add_code(lines, lang)
    sections, title = stream.finish()
    return sections, title, {}


def load_gallery(text: str) -> tuple[list[MappedSection], str, dict[str, Any]]:
    """A sphinx-gallery script: module docstring and comment blocks are RST, the rest is code."""
    lines = text.split("\n")
    out: list[Line] = []
    i = 0
    m = re.match(r'^((?:\s*#.*\n|\s*\n)*)\s*[rRuU]?("""|\'\'\')', text)
    if m:  # module docstring
        start = m.group(1).count("\n")
        q = m.group(2)
        first = lines[start].split(q, 1)[1]
        j = start
        rest = first
        while q not in rest and j + 1 < len(lines):
            out.append((j + 1, rest))
            j += 1
            rest = lines[j]
        out.append((j + 1, rest.split(q, 1)[0]))
        i = j + 1
    code: list[Line] = []
    while i < len(lines):
        s = lines[i].strip()
        if s.startswith("# %%") or re.fullmatch(r"#{20,}", s):
            _flush_code(code, out)
            i += 1
            while i < len(lines) and lines[i].lstrip().startswith("#"):
                t = lines[i].lstrip()[1:]
                out.append((i + 1, t.removeprefix(" ")))
                i += 1
            out.append((i, ""))
            continue
        code.append((i + 1, lines[i]))
        i += 1
    _flush_code(code, out)
    sections, title = parse_rst(out)
    return sections, title, {}


def _flush_code(code: list[Line], out: list[Line]) -> None:
    while code and not code[0][1].strip():
        code.pop(0)
    while code and not code[-1][1].strip():
        code.pop()
    if code and not all(t.lstrip().startswith("#") for _, t in code):
        out.extend([(code[0][0], ""), (code[0][0], "```python"), *code, (code[-1][0], "```"), (code[-1][0], "")])
    code.clear()


def load_html(text: str) -> tuple[list[MappedSection], str, dict[str, Any]]:
    from bs4 import BeautifulSoup

    soup = BeautifulSoup(text, "html.parser")
    for tag in soup(["script", "style", "noscript", "nav", "footer", "template"]):
        tag.decompose()
    title = soup.title.get_text(" ", strip=True) if soup.title else ""
    b = SectionBuilder()
    blocks = ["h1", "h2", "h3", "h4", "h5", "h6", "p", "pre", "li", "table", "blockquote", "dt", "dd"]
    for el in soup.find_all(blocks):
        if el.find_parent(blocks[6:]):
            continue  # nested inside a block already emitted (p in li, li in li)
        n = el.sourceline or 1
        if el.name[0] == "h" and el.name[1:].isdigit():
            b.heading(int(el.name[1]), el.get_text(" ", strip=True))
            title = title or el.get_text(" ", strip=True)
        elif el.name == "pre":
            code = el.get_text().strip("\n").split("\n")
            b.add(n, "```")
            for j, t in enumerate(code):
                b.add(n + j, t)
            b.add(n + len(code) - 1, "```")
        elif el.name == "table":
            _html_table(el, n, b)
        else:
            t = " ".join(el.get_text(" ", strip=True).split())
            if t:
                b.add(n, ("- " + t) if el.name == "li" else t)
        b.add(n, "")
    return b.finish(), title, {}


def _html_table(el: Any, n: int, b: SectionBuilder) -> None:
    rows = el.find_all("tr")
    for j, tr in enumerate(rows):
        cells = [" ".join(c.get_text(" ", strip=True).split()) for c in tr.find_all(["th", "td"])]
        b.add(tr.sourceline or n, "| " + " | ".join(cells) + " |")
        if j == 0:
            b.add(tr.sourceline or n, "|" + "---|" * len(cells))


def load_pdf(data: bytes, stem: str) -> tuple[list[MappedSection], str, dict[str, Any]]:
    from pypdf import PdfReader
    from pypdf.errors import PdfReadError

    try:
        reader = PdfReader(io.BytesIO(data))
        meta: dict[str, Any] = dict(reader.metadata or {})
        title = str(meta.get("/Title") or "") or stem
        pages = [p.extract_text() or "" for p in reader.pages]
    except (PdfReadError, ValueError, KeyError, TypeError, OSError) as e:
        raise ValueError(f"corrupt PDF: {e}") from None
    b = SectionBuilder()
    for k, page in enumerate(pages, start=1):
        b.set_path((f"p. {k}",))
        for j, t in enumerate(page.split("\n"), start=1):
            b.add(j, t)
    return b.finish(), title, {"pages": len(pages)}


def load_text(text: str, stem: str) -> tuple[list[MappedSection], str, dict[str, Any]]:
    """Plain text: one section; a short first line is taken as the title."""
    b = SectionBuilder()
    lines = text.split("\n")
    for i, t in enumerate(lines, start=1):
        b.add(i, t)
    first = next((t.strip() for t in lines if t.strip()), "")
    title = first if 0 < len(first) <= 60 and not first.endswith(("。", ".", "，", ",")) else stem
    return b.finish(), title, {}


def decode_text(data: bytes) -> str:
    """UTF-8, else GB18030 (a superset of GBK), else charset-normalizer's best guess."""
    if b"\x00" in data[:8192]:
        raise ValueError("binary file")
    for enc in ("utf-8-sig", "gb18030"):
        try:
            return data.decode(enc)
        except UnicodeDecodeError:
            continue
    from charset_normalizer import from_bytes

    # only a guess that keeps ASCII as ASCII: a passage's line numbers count the file's b"\n" bytes, and an EBCDIC
    # guess (b"%" is its newline) would give the text lines the file does not have
    best = next((m for m in from_bytes(data) if _ascii_compatible(m.encoding)), None)
    if best is None:
        raise ValueError("undecodable text (not UTF-8, GBK/GB18030 or a detectable encoding)")
    return str(best)


_ASCII = bytes(range(0x09, 0x7F))


def _ascii_compatible(encoding: str) -> bool:
    try:
        return _ASCII.decode(encoding) == _ASCII.decode("ascii")
    except (UnicodeDecodeError, LookupError):
        return False


def stem_title(path: Path) -> str:
    return path.stem.replace("_", " ").replace("-", " ").strip() or path.name
