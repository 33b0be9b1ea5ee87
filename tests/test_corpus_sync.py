"""`assistant corpus sync` against real git repositories made here (file:// URLs, partial fetch allowed) and
against mirror folders: files + cache lock, a no-op second sync, a commit change that re-fetches one file,
clear errors that leave the cache as it was, upstream links in chunks, and (when ../shared/framework-docs is
present) a mirror sync + index build in which a docs question finds the official page without --docs."""
from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from assistant.corpus.manifest import Source, load_manifest, sha256
from assistant.corpus.sync import CACHE_LOCK, docs_root, read_cache_lock, sync
from assistant.errors import UserError

REPO = Path(__file__).resolve().parents[1]


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), "-c", "user.email=t@example.org", "-c", "user.name=t", *args],
                          check=True, capture_output=True, text=True).stdout.strip()


def commit(repo: Path, files: dict[str, str], msg: str) -> str:
    for rel, text in files.items():
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_text(text, encoding="utf-8")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", msg)
    return git(repo, "rev-parse", "HEAD")


@pytest.fixture()
def upstream(tmp_path: Path) -> tuple[Path, str, str]:
    """A repository with two commits: the second changes docs/guide/zero.md only."""
    repo = tmp_path / "up"
    repo.mkdir()
    git(repo, "init", "-q")
    git(repo, "config", "uploadpack.allowFilter", "true")  # as GitHub: blob:none partial fetches
    c1 = commit(repo, {"LICENSE": "Apache License 2.0\n", "docs/guide/zero.md": "# ZeRO\n\nStage 1 shards states.\n",
                       "docs/guide/offload.md": "# Offload\n\nZeRO-Offload moves states to CPU.\n",
                       "docs/other.txt": "not taken\n"}, "one")
    c2 = commit(repo, {"docs/guide/zero.md": "# ZeRO\n\nStage 3 also shards parameters.\n"}, "two")
    return repo, c1, c2


def manifest(tmp_path: Path, repo: Path, commit: str, paths: list[object], name: str = "sources.yaml") -> Path:
    import yaml

    m = tmp_path / name
    m.write_text(yaml.safe_dump({"sources": [{
        "id": "deepspeed", "framework": "DeepSpeed", "repo": repo.as_uri(), "web": "https://github.com/example/ds",
        "commit": commit, "licence": "Apache-2.0", "attribution": "From example/ds; Apache-2.0.", "paths": paths}]}),
        encoding="utf-8")
    return m


def run(m: Path, cache: Path, **kw: object):
    return sync(load_manifest(m), cache, pinned_lock=m.parent / "no-pins.json", log=lambda s: None, **kw)


def test_sync_fetches_exact_files_then_noop_then_only_the_changed_file(tmp_path: Path, upstream) -> None:
    repo, c1, c2 = upstream
    cache = tmp_path / "cache"
    m = manifest(tmp_path, repo, c1, ["LICENSE", "docs/guide/*.md"])
    r = run(m, cache)
    root = docs_root(cache)
    assert sorted(r.fetched) == ["deepspeed/LICENSE", "deepspeed/docs/guide/offload.md", "deepspeed/docs/guide/zero.md"]
    assert not (root / "deepspeed/docs/other.txt").exists()
    assert (root / "deepspeed/docs/guide/zero.md").read_text() == "# ZeRO\n\nStage 1 shards states.\n"
    lock = read_cache_lock(root)
    e = lock["files"]["deepspeed/docs/guide/zero.md"]
    assert e["commit"] == c1 and e["sha256"] == sha256((root / e["local"]).read_bytes()) and e["origin"] == "upstream"
    assert e["url"] == f"https://github.com/example/ds/blob/{c1}/docs/guide/zero.md" and e["licence"] == "Apache-2.0"

    # nothing changed: nothing fetched, no git run (the repository may even be gone), lock untouched
    before = (root / CACHE_LOCK).stat().st_mtime_ns
    moved = repo.rename(tmp_path / "gone")
    r2 = run(m, cache)
    assert r2.nothing_changed and r2.unchanged == 3 and (root / CACHE_LOCK).stat().st_mtime_ns == before
    moved.rename(repo)

    # a new commit: only the file whose blob changed is fetched and rewritten
    offload_ino = (root / "deepspeed/docs/guide/offload.md").stat().st_ino
    m = manifest(tmp_path, repo, c2, ["LICENSE", "docs/guide/*.md"])
    r3 = run(m, cache)
    assert r3.fetched == ["deepspeed/docs/guide/zero.md"] and r3.unchanged == 2
    assert "Stage 3" in (root / "deepspeed/docs/guide/zero.md").read_text()
    assert (root / "deepspeed/docs/guide/offload.md").stat().st_ino == offload_ino
    assert all(f["commit"] == c2 for f in read_cache_lock(root)["files"].values())

    # a per-path commit override pins one file back; a path dropped from the manifest leaves the cache
    m = manifest(tmp_path, repo, c2, ["LICENSE", {"path": "docs/guide/zero.md", "commit": c1}])
    r4 = run(m, cache)
    assert r4.fetched == ["deepspeed/docs/guide/zero.md"] and r4.removed == ["deepspeed/docs/guide/offload.md"]
    assert "Stage 1" in (root / "deepspeed/docs/guide/zero.md").read_text()
    assert not (root / "deepspeed/docs/guide/offload.md").exists()


def test_errors_are_clear_and_leave_the_cache_as_it_was(tmp_path: Path, upstream) -> None:
    repo, c1, c2 = upstream
    cache = tmp_path / "cache"
    run(manifest(tmp_path, repo, c1, ["docs/guide/zero.md"]), cache)
    root = docs_root(cache)
    snapshot = {p: p.read_bytes() for p in root.rglob("*") if p.is_file()}

    with pytest.raises(UserError) as e:
        run(manifest(tmp_path, repo, c2, ["docs/guide/zero.md", "docs/missing.md"]), cache)
    assert e.value.code == "missing_path" and "docs/missing.md" in e.value.en and "提交" in e.value.zh

    with pytest.raises(UserError) as e:
        run(manifest(tmp_path, tmp_path / "no-such-repo", c2, ["docs/guide/zero.md"]), cache)
    assert e.value.code == "upstream_unreachable" and "--mirror" in e.value.en

    with pytest.raises(UserError) as e:
        run(manifest(tmp_path, repo, "0" * 40, ["docs/guide/zero.md"]), cache)
    assert e.value.code in ("commit_missing", "upstream_unreachable") and "0000000000" in e.value.en

    # a pinned hash that the upstream file does not have: refused, nothing written
    m = manifest(tmp_path, repo, c2, ["docs/guide/zero.md"])
    pins = tmp_path / "pins.json"
    pins.write_text(json.dumps({"files": [{"id": "deepspeed", "path": "docs/guide/zero.md", "commit": c2,
                                           "sha256": "0" * 64, "blob": "1" * 40, "checked": "git blob"}]}))
    with pytest.raises(UserError) as e:
        sync(load_manifest(m), cache, pinned_lock=pins, log=lambda s: None)
    assert e.value.code == "hash_mismatch"

    assert {p: p.read_bytes() for p in root.rglob("*") if p.is_file()} == snapshot
    assert not list(cache.glob(".staging-*"))


def test_mirror_sync_then_upstream_reports_what_differs(tmp_path: Path, upstream) -> None:
    repo, c1, c2 = upstream
    mirror = tmp_path / "mirror"
    (mirror / "deepspeed/docs/guide").mkdir(parents=True)
    (mirror / "deepspeed/LICENSE").write_text("Apache License 2.0\n")
    (mirror / "deepspeed/docs/guide/zero.md").write_text("# ZeRO\n\nan older local copy\n")
    cache = tmp_path / "cache"
    m = manifest(tmp_path, repo, c2, ["LICENSE", "docs/guide/zero.md"])
    r = run(m, cache, mirror=mirror)
    root = docs_root(cache)
    assert sorted(r.fetched) == ["deepspeed/LICENSE", "deepspeed/docs/guide/zero.md"] and r.origin.startswith("mirror")
    e = read_cache_lock(root)["files"]["deepspeed/docs/guide/zero.md"]
    assert e["sha256"] == sha256(b"# ZeRO\n\nan older local copy\n") and e["origin"].startswith("mirror")
    assert run(m, cache, mirror=mirror).nothing_changed

    with pytest.raises(UserError) as err:
        run(manifest(tmp_path, repo, c2, ["docs/guide/offload.md"], name="bad.yaml"), cache, mirror=mirror)
    assert err.value.code == "missing_path" and "mirror" in err.value.en

    up = run(m, cache)  # the LICENSE is the same blob upstream: kept; zero.md differs: fetched and reported
    assert up.fetched == ["deepspeed/docs/guide/zero.md"] and up.unchanged == 1
    assert any("zero.md" in d and "mirror" in d for d in up.differs)
    assert all(f["origin"] == "upstream" for f in read_cache_lock(root)["files"].values())


def test_cli_sync_and_settings_pick_up_the_cache(tmp_path: Path, upstream, monkeypatch) -> None:
    from assistant.cli import main
    from assistant.settings import load_settings

    repo, c1, _ = upstream
    m = manifest(tmp_path, repo, c1, ["docs/guide/zero.md"])
    cache = tmp_path / "cache"
    monkeypatch.setenv("ASSISTANT_CORPUS_CACHE_DIR", str(cache))
    assert str(docs_root(cache)) not in load_settings().docs
    assert main(["corpus", "sync", "--manifest", str(m), "--pinned-lock", str(tmp_path / "none.json")]) == 0
    assert load_settings().docs[-1] == str(docs_root(cache))
    assert load_settings(docs=["x"]).docs == ["x"]  # an explicit docs list is taken as given
    assert main(["corpus", "sync", "--manifest", str(m), "--source", "nope"]) == 2


def test_the_repository_manifest_covers_the_shared_mirror(shared_docs: Path) -> None:
    """corpus/sources.yaml lists exactly the files of ../shared/framework-docs, and the pinned lock their hashes."""
    sources: list[Source] = load_manifest()
    listed = {f"{s.id}/{p.pattern}" for s in sources for p in s.paths}
    on_disk = {p.relative_to(shared_docs).as_posix() for p in shared_docs.rglob("*")
               if p.is_file() and p.name != "SOURCES.md"}
    assert listed == on_disk
    pins = json.loads((REPO / "corpus/sources.lock.json").read_text())["files"]
    assert {f"{e['id']}/{e['path']}" for e in pins} == on_disk
    assert all(sha256((shared_docs / e["id"] / e["path"]).read_bytes()) == e["sha256"] for e in pins)


@pytest.mark.slow  # embeds corpus/ + one source: about 40 s of CPU, 2 min on a busy machine
def test_mirror_sync_then_default_build_finds_the_official_page(tmp_path: Path, shared_docs: Path, monkeypatch,
                                                                capsys) -> None:
    """From a fresh install: `corpus sync --mirror` + `index build` (no --docs) -> a docs question is answered
    from the official page, whose passages link upstream at the pinned commit with their licence. One source
    (jax) keeps it quick; the gold path comes from eval/gold_fact.jsonl."""
    from assistant.cli import main
    from assistant.service import AssistantService
    from assistant.settings import load_settings

    case = next(json.loads(ln) for ln in (REPO / "eval/gold_fact.jsonl").read_text().splitlines()
                if json.loads(ln)["id"] == "fact-zh-16")
    gold = [s for s in case["source_files"] if s.startswith("framework-docs/")]
    monkeypatch.setenv("ASSISTANT_CORPUS_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("ASSISTANT_INDEX_DIR", str(tmp_path / "index"))
    monkeypatch.setenv("ASSISTANT_STATE_DIR", str(tmp_path / "state"))
    assert main(["corpus", "sync", "--mirror", str(shared_docs), "--source", "jax"]) == 0
    assert main(["corpus", "sync", "--mirror", str(shared_docs), "--source", "jax"]) == 0
    assert "up to date" in capsys.readouterr().out
    # also given another framework-docs folder (as `make index` did with ../shared/framework-docs): its pages
    # have the synced pages' source names, so it is left out and each page is indexed once
    other = tmp_path / "elsewhere" / "framework-docs"
    shutil.copytree(shared_docs / "jax", other / "jax")
    assert main(["index", "build", "--no-progress", "--json", "--docs", str(other)]) == 0
    out = capsys.readouterr()
    assert json.loads(out.out)["chunks"] > 0 and "not indexed" in out.err

    svc = AssistantService(load_settings(model="scripted", backend="scripted"))
    hits = svc.search(case["question"], k=5)
    sources = [h.chunk.source for h in hits]
    assert any(s.endswith(g) for s in sources for g in gold), sources
    page = next(h.chunk for h in hits if h.chunk.source.startswith("framework-docs/jax/"))
    commit = next(p.commit for s in load_manifest() if s.id == "jax" for p in s.paths)
    path = page.source.removeprefix("framework-docs/jax/")
    assert page.url == (f"https://github.com/jax-ml/jax/blob/{commit}/{path}"
                        f"?plain=1#L{page.lines[0]}-L{page.lines[1]}")
    assert page.licence == "Apache-2.0"
    chunks = svc.retriever.snap.chunks
    assert len({c.source for c in chunks if c.source.startswith("framework-docs/jax/")}) == 6  # its 7 files, LICENSE aside
    assert not any("elsewhere" in c.source for c in chunks)
    article = next(c for c in chunks if c.is_article)
    assert article.publisher == "AI门户网" and article.date == "2026-03-27"
    svc.close()


def test_synced_chunks_link_upstream_and_the_sources_panel_shows_it(tmp_path: Path, upstream) -> None:
    from assistant.ingest import chunk_document, discover, load_document
    from assistant.types import Chunk
    from ui.web import TEXT, provenance_html

    repo, c1, _ = upstream
    cache = tmp_path / "cache"
    run(manifest(tmp_path, repo, c1, ["LICENSE", "docs/guide/zero.md"]), cache)
    root = docs_root(cache)
    files = discover([root])
    assert [f.relative_to(root).as_posix() for f, _ in files] == ["deepspeed/docs/guide/zero.md"]  # LICENSE, lock: no
    doc = load_document(*files[0])
    assert doc.source == "framework-docs/deepspeed/docs/guide/zero.md"
    chunks = chunk_document(doc)
    assert chunks and all(c.licence == "Apache-2.0" for c in chunks)
    a, b = chunks[0].lines
    assert chunks[0].url == f"https://github.com/example/ds/blob/{c1}/docs/guide/zero.md?plain=1#L{a}-L{b}"

    shown = provenance_html(chunks[0], TEXT["en"])
    assert f'href="https://github.com/example/ds/blob/{c1}/docs/guide/zero.md?plain=1#L{a}-L{b}"' in shown
    assert 'rel="noopener noreferrer nofollow"' in shown and "licence: Apache-2.0" in shown
    evil = Chunk("x", "t", "corpus/x.md", "T", (), "en", (), (1, 2), url="javascript:alert(1)",
                 publisher="<b>AI门户网</b>", date="2026-03-27")
    shown = provenance_html(evil, TEXT["zh"])
    assert "href" not in shown and "<b>" not in shown and "&lt;b&gt;AI门户网&lt;/b&gt; · 2026-03-27" in shown
