"""Document ingestion: every loader on a real file, chunk boundaries and budgets, ids, line ranges, bad input."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from assistant.errors import UserError
from assistant.ingest import (
    DEFAULT_CHUNK_TOKENS,
    LoadError,
    chunk_document,
    discover,
    load_all,
    load_document,
)
from assistant.text import HAN, estimate_tokens, has_cjk
from assistant.types import Document, Section

FIXTURES = Path(__file__).parent / "fixtures" / "ingest"
FRAMEWORK_DOCS = Path(__file__).resolve().parents[1].parent / "shared" / "framework-docs"
CORPUS = Path(__file__).resolve().parents[1] / "corpus"
_WORD = re.compile(f"[A-Za-z0-9_]+|[{HAN}]")  # Latin words, single CJK characters


def assert_lines_hold_text(path: Path, chunks) -> None:
    """Every word of a chunk (fence markers aside) is found in the lines the chunk cites."""
    lines = path.read_text(encoding="utf-8").split("\n")
    for c in chunks:
        lo, hi = c.lines
        assert 1 <= lo <= hi <= len(lines), c.lines
        cited = "\n".join(lines[lo - 1:hi])
        body = "\n".join(t for t in c.text.split("\n") if not t.strip().startswith("```"))
        for w in _WORD.findall(body):
            assert w in cited, (w, c.lines, c.text)


def test_markdown_front_matter_headings_and_table():
    doc = load_document(FIXTURES / "guide.md", FIXTURES)
    assert doc.source == "ingest/guide.md"
    assert doc.title == "Choosing a training framework"
    assert doc.language == "en"
    assert doc.frameworks == ("PyTorch", "JAX")
    assert doc.meta["url"] == "https://example.org/guide" and doc.meta["licence"] == "CC-BY-4.0"
    assert "2026-01-02" in doc.meta["date"]
    paths = [s.heading_path for s in doc.sections]
    assert ("Choosing a training framework", "Comparison") in paths
    assert ("Choosing a training framework", "Setext heading", "Deeper level") in paths
    text = "\n".join(s.text for s in doc.sections)
    assert "HTML comment" not in text and "logo.png" not in text and "pytorch.org" not in text
    assert "model = torch.nn.Linear(4, 4)" in text  # code kept inside its section
    chunks = chunk_document(doc)
    assert all(c.url == "https://example.org/guide" for c in chunks)
    assert chunks[0].heading_path == ("Choosing a training framework",)
    code = next(c for c in chunks if "torch.nn.Linear" in c.text)
    assert code.heading_path == ("Choosing a training framework", "Setext heading")
    assert_lines_hold_text(FIXTURES / "guide.md", chunks)


def test_table_split_repeats_header_and_never_splits_a_row():
    doc = load_document(FIXTURES / "guide.md")
    chunks = [c for c in chunk_document(doc, max_tokens=45) if "| Framework |" in c.text]
    assert len(chunks) >= 2
    for c in chunks:
        rows = c.text.split("\n")
        assert rows[0].startswith("| Framework |") and rows[1].startswith("|---")
        assert all(r.startswith("|") and r.endswith("|") for r in rows)
        assert estimate_tokens(c.text) <= 45
    body = [r for c in chunks for r in c.text.split("\n")[2:]]
    assert len(body) == 4 and len(set(body)) == 4  # every data row once, whole


def test_wide_table_row_split_between_cells_keeps_key_and_budget(tmp_path):
    row = "| PyTorch | " + " | ".join(f"column {k} says something long about distributed training" for k in range(6)) + " |"
    head = "| name | " + " | ".join(f"c{k}" for k in range(6)) + " |"
    p = tmp_path / "wide.md"
    p.write_text(f"# Wide\n\n{head}\n|---|{'---|' * 6}\n{row}\n", encoding="utf-8")
    chunks = chunk_document(load_document(p), max_tokens=60)
    assert len(chunks) > 1
    for c in chunks:
        assert estimate_tokens(c.text) <= 60
        assert "| PyTorch |" in c.text and c.text.startswith("| name |")


def test_rst_headings_directives_roles():
    doc = load_document(FIXTURES / "parallel.rst")
    assert doc.title == "Parallel guide"
    paths = [s.heading_path for s in doc.sections]
    assert paths == [("Parallel guide",), ("Parallel guide", "Data parallel"),
                     ("Parallel guide", "Data parallel", "Details"), ("Parallel guide", "Pipeline parallel")]
    text = "\n".join(s.text for s in doc.sections)
    assert "data parallel" in text and ":ref:" not in text and "dp-label" not in text and "torch.nn.Module" in text
    assert "full replica of the model" in text  # .. note:: content kept
    assert "model = DDP(model)" in text and ":linenos:" not in text
    assert "dp.png" not in text and ":width:" not in text and "parallel_label" not in text
    assert "a link" in text and "example.org" not in text
    chunks = chunk_document(doc)
    assert_lines_hold_text(FIXTURES / "parallel.rst", chunks)


def _notebook(tmp_path: Path) -> Path:
    nb = {"cells": [
        {"cell_type": "markdown", "metadata": {}, "source": ["# Graphs in TensorFlow\n", "\n", "Use `tf.function` to trace."]},
        {"cell_type": "code", "metadata": {}, "execution_count": 1, "source": ["import tensorflow as tf\n", "tf.constant(1)"],
         "outputs": [{"output_type": "stream", "name": "stdout", "text": ["OUTPUT-SHOULD-BE-DROPPED\n"]}]},
        {"cell_type": "markdown", "metadata": {}, "source": ["## Tracing\n", "\n", "Tracing builds a graph once per signature."]},
    ], "metadata": {"kernelspec": {"language": "python"}}, "nbformat": 4, "nbformat_minor": 5}
    p = tmp_path / "graphs.ipynb"
    p.write_text(json.dumps(nb, indent=1), encoding="utf-8")
    return p


def test_notebook_cells_headings_code_and_json_line_numbers(tmp_path):
    p = _notebook(tmp_path)
    doc = load_document(p)
    assert doc.title == "Graphs in TensorFlow" and doc.frameworks[0] == "TensorFlow"
    text = "\n".join(s.text for s in doc.sections)
    assert "import tensorflow as tf" in text and "OUTPUT-SHOULD-BE-DROPPED" not in text
    assert [s.heading_path for s in doc.sections] == [("Graphs in TensorFlow",), ("Graphs in TensorFlow", "Tracing")]
    raw = p.read_text().split("\n")
    for c in chunk_document(doc):
        cited = "\n".join(raw[c.lines[0] - 1:c.lines[1]])
        assert c.text.split("\n")[-1].strip("`") in cited  # last line of the chunk sits in the cited JSON lines


def test_invalid_notebook_is_a_load_error(tmp_path):
    p = tmp_path / "broken.ipynb"
    p.write_text('{"cells": [', encoding="utf-8")
    with pytest.raises(LoadError) as e:
        load_document(p)
    assert e.value.reason.startswith("invalid notebook JSON") and e.value.path == str(p)


def test_html_headings_lists_pre_and_no_scripts():
    doc = load_document(FIXTURES / "page.html")
    assert doc.title == "Sharding page"
    text = "\n".join(s.text for s in doc.sections)
    assert "do not index" not in text and "color: red" not in text
    assert "- Stage 2 also shards gradients." in text and '"stage": 2' in text
    stages = next(s for s in doc.sections if s.heading_path == ("Sharding", "Stages"))
    assert stages.line_start >= 8
    assert "DeepSpeed" in chunk_document(doc)[-1].frameworks


def test_pdf_one_section_per_page(tmp_path):
    mpl = pytest.importorskip("matplotlib")
    mpl.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.backends.backend_pdf import PdfPages

    p = tmp_path / "paper.pdf"
    with PdfPages(p) as pdf:
        for k in (1, 2):
            fig = plt.figure()
            fig.text(0.1, 0.5, f"Page {k} explains pipeline parallelism in DeepSpeed.")
            pdf.savefig(fig)
            plt.close(fig)
    doc = load_document(p)
    assert [s.heading_path for s in doc.sections] == [("p. 1",), ("p. 2",)]
    assert "Page 2 explains pipeline" in doc.sections[1].text
    chunks = chunk_document(doc)
    assert chunks[1].heading_path == (doc.title, "p. 2") and "DeepSpeed" in chunks[1].frameworks


def test_corrupt_pdf_binary_and_skipping(tmp_path):
    (tmp_path / "bad.pdf").write_bytes(b"%PDF-1.4\n this is not a pdf at all")
    (tmp_path / "blob.txt").write_bytes(b"\x00\x01\x02binary\x00")
    (tmp_path / "bad.ipynb").write_text("not json", encoding="utf-8")
    (tmp_path / "ok.md").write_text("# Fine\n\nJAX compiles with XLA.\n", encoding="utf-8")
    (tmp_path / "LICENSE.md").write_text("license text", encoding="utf-8")
    (tmp_path / ".hidden").mkdir()
    (tmp_path / ".hidden" / "x.md").write_text("# hidden", encoding="utf-8")
    docs, skipped = load_all([tmp_path])
    assert [d.title for d in docs] == ["Fine"]
    reasons = {Path(p).name: r for p, r in skipped}
    assert set(reasons) == {"bad.pdf", "blob.txt", "bad.ipynb"}
    assert reasons["blob.txt"] == "binary file"
    assert reasons["bad.pdf"].startswith("corrupt PDF")
    assert reasons["bad.ipynb"].startswith("invalid notebook JSON")


def test_empty_folder_and_missing_path(tmp_path):
    assert load_all([tmp_path]) == ([], [])
    with pytest.raises(UserError) as e:
        discover([tmp_path / "nope"])
    assert e.value.code == "path_not_found" and "nope" in e.value.en and "nope" in e.value.zh


def test_source_is_relative_to_parent_of_root(tmp_path):
    root = tmp_path / "framework-docs"
    f = root / "jax" / "docs" / "a.md"
    f.parent.mkdir(parents=True)
    f.write_text("# A\n\nSome text about sharding arrays.\n", encoding="utf-8")
    [(path, r)] = discover([root])
    doc = load_document(path, r)
    assert doc.source == "framework-docs/jax/docs/a.md"
    assert doc.frameworks[0] == "JAX"  # from the folder name


def test_text_utf8_and_gbk(tmp_path):
    zh = "飞桨分布式训练\n\n飞桨支持数据并行和流水线并行。它也支持张量并行。\n"
    (tmp_path / "u.txt").write_text(zh, encoding="utf-8")
    (tmp_path / "g.txt").write_bytes(zh.encode("gbk"))
    for name in ("u.txt", "g.txt"):
        doc = load_document(tmp_path / name)
        assert doc.language == "zh" and doc.title == "飞桨分布式训练"
        assert "流水线并行" in doc.sections[0].text and "PaddlePaddle" in chunk_document(doc)[0].frameworks
    assert_lines_hold_text(tmp_path / "u.txt", chunk_document(load_document(tmp_path / "u.txt")))


def test_sphinx_gallery_script():
    doc = load_document(FIXTURES / "tutorial.py")
    assert doc.title == "Compiling models"
    assert [s.heading_path for s in doc.sections] == [("Compiling models",), ("Compiling models", "Basic usage")]
    first, second = doc.sections
    assert "JIT-compiling" in first.text and "x = torch.randn(3)" in first.text and "```python" in first.text
    assert "Wrap a function" in second.text and "compiled = torch.compile(f)" in second.text
    assert "# -*- coding" not in first.text
    chunks = chunk_document(doc)
    assert all(c.frameworks[0] == "PyTorch" for c in chunks)
    raw = (FIXTURES / "tutorial.py").read_text().split("\n")
    for c in chunks:
        assert "torch" in "\n".join(raw[c.lines[0] - 1:c.lines[1]])


def _doc(text: str, lang: str = "en") -> Document:
    n = text.count("\n") + 1
    return Document(source="mem.md", title="T", language=lang, sections=[Section(("T", "S"), text, 1, n)])


def test_long_english_section_splits_at_sentence_ends_never_mid_word():
    sentences = [f"Sentence number {k} explains how ZeRO stage {k % 3 + 1} shards optimizer states." for k in range(40)]
    doc = _doc(" ".join(sentences))
    chunks = chunk_document(doc, max_tokens=60)
    assert len(chunks) > 5
    for c in chunks:
        assert estimate_tokens(c.text) <= 60
        assert c.text.endswith(".") and c.text[0].isupper()  # whole sentences
        assert c.heading_path == ("T", "S") and c.language == "en"
    assert " ".join(c.text for c in chunks) == " ".join(sentences)


def test_long_chinese_section_splits_at_sentence_ends():
    sentences = [f"第{k}句话说明飞桨的流水线并行如何切分模型层。" for k in range(60)]
    doc = _doc("".join(sentences), "zh")
    chunks = chunk_document(doc, max_tokens=80)
    assert len(chunks) > 3
    for c in chunks:
        assert estimate_tokens(c.text) <= 80 and c.text.endswith("。") and c.language == "zh"
    assert "".join(c.text for c in chunks) == "".join(sentences)


def test_over_long_sentence_falls_back_to_commas_and_spaces():
    words = " ".join(f"word{k}" for k in range(300))
    chunks = chunk_document(_doc(words), max_tokens=50)
    assert len(chunks) > 3
    for c in chunks:
        assert estimate_tokens(c.text) <= 50
        assert all(re.fullmatch(r"word\d+", w) for w in c.text.split())  # no word cut in two
    assert " ".join(c.text for c in chunks) == words


def test_tiny_tail_merges_and_empty_sections_dropped():
    text = "First sentence is long enough to matter here. " * 6 + "Tail."
    chunks = chunk_document(_doc(text.strip()), max_tokens=80)
    assert all(estimate_tokens(c.text) >= 10 for c in chunks)
    assert chunks[-1].text.endswith("Tail.")
    empty = Document("e.md", "E", "en", [Section(("E",), "   \n\n", 1, 3), Section(("E", "x"), "```\n```", 4, 5)])
    assert chunk_document(empty) == []


def test_ids_are_stable_and_follow_the_rule():
    import hashlib

    a = chunk_document(load_document(FIXTURES / "guide.md", FIXTURES))
    b = chunk_document(load_document(FIXTURES / "guide.md", FIXTURES))
    assert [c.id for c in a] == [c.id for c in b] and len({c.id for c in a}) == len(a)
    c = a[0]
    raw = c.source + "\x1f" + " > ".join(c.heading_path) + "\x1f" + c.text
    assert c.id == hashlib.sha256(raw.encode()).hexdigest()[:16]


def test_mixed_language_note_yields_monolingual_chunks(tmp_path):
    p = tmp_path / "jax.md"
    p.write_text("---\ntitle: JAX 笔记\nframeworks: [JAX]\n---\n# JAX 笔记\n\n## 中文\n\nJAX 使用 jit 即时编译函数，适合科研。"
                 "它的 vmap 可以自动向量化。\n\nJAX is functional and compiles with XLA, which suits research teams well.\n\n"
                 "## English\n\nJAX uses jit to compile functions and vmap to vectorize them automatically.\n",
                 encoding="utf-8")
    chunks = chunk_document(load_document(p))
    langs = [c.language for c in chunks]
    assert "zh" in langs and "en" in langs
    for c in chunks:
        assert (c.language == "zh") == has_cjk(c.text), c.text
    assert_lines_hold_text(p, chunks)


def test_default_chunk_size_and_estimator():
    assert 100 <= DEFAULT_CHUNK_TOKENS <= 250
    assert estimate_tokens("") == 0
    assert estimate_tokens("数据并行" * 10) > estimate_tokens("data" * 10)


def test_corpus_and_framework_docs_all_load_and_chunk():
    if not FRAMEWORK_DOCS.is_dir():
        pytest.skip("../shared/framework-docs is not present")
    docs, skipped = load_all([CORPUS, FRAMEWORK_DOCS])
    assert skipped == []
    assert len(docs) == len(discover([CORPUS, FRAMEWORK_DOCS])) >= 45
    total = 0
    for d in docs:
        chunks = chunk_document(d)
        assert 1 <= len(chunks) <= 200, (d.source, len(chunks))
        total += len(chunks)
        for c in chunks:
            assert c.language in ("zh", "en") and c.frameworks, c.source
            assert estimate_tokens(c.text) <= DEFAULT_CHUNK_TOKENS
            assert c.heading_path[0] == d.title
            if d.source.startswith("corpus/notes/") and len(c.heading_path) > 1:
                assert c.language == {"中文": "zh", "English": "en"}.get(c.heading_path[1], c.language), c.text
        if d.source.endswith((".md", ".rst")):
            assert_lines_hold_text(FRAMEWORK_DOCS.parent / d.source if d.source.startswith("framework-docs")
                                   else CORPUS.parent / d.source, chunks)
    assert 800 <= total <= 4000


def test_link_lists_are_not_indexed_but_prose_with_links_is():
    """A "Sources:" line of URLs and paths became chunks of its own that outranked the pages it names
    ("Which parallelism strategies does Megatron Core support?" found the note's link list first)."""
    text = ("Megatron Core supports tensor, pipeline, context and expert parallelism.\n\n"
            "来源 / Sources: https://github.com/NVIDIA/Megatron-LM/blob/main/megatron/core/README.md, "
            "https://docs.nvidia.com/megatron-core/developer-guide/latest/index.html, framework-docs: "
            "megatron-lm/megatron/core/QuickStart.md, megatron-lm/megatron/core/transformer/moe/README.md\n\n"
            "See https://docs.nvidia.com/megatron-core/ for the full user guide of the library.\n")
    chunks = chunk_document(_doc(text), max_tokens=40)
    joined = " ".join(c.text for c in chunks)
    assert "QuickStart.md" not in joined and "来源" not in joined
    assert "tensor, pipeline" in joined and "for the full user guide" in joined
    # every note ends its sections with such a line; none of them reaches the index
    for note in sorted((CORPUS / "notes").glob("*.md")):
        for c in chunk_document(load_document(note, CORPUS.parent)):
            assert "来源 / Sources" not in c.text and not c.text.startswith("https://"), (note.name, c.text[:80])
