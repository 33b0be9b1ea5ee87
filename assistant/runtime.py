"""The engines the answers run on, loaded on first use: the index (its directory or a Chroma server) and the retriever
over its live generation (reopened when a build replaces it; a generation whose embedder this process cannot
reproduce is refused), the embedder, the chat model, and the question translator when translation is on. `load`
brings them up together at start-up, the model on a second thread while the index opens."""
from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from .embed import Embedder, embedder_for
from .index.identity import EmbedderStatus, compare
from .index.location import IndexLocation, open_index
from .llm.base import ChatModel, Vocabulary
from .retrieval import RetrievalParams, Retriever
from .settings import Settings
from .translate import QueryTranslator, create_translator

log = logging.getLogger(__name__)


class Engines:
    def __init__(self, settings: Settings, chat_model: ChatModel | None = None,
                 embedder: Embedder | None = None) -> None:
        self.settings = settings
        self._embedder = embedder
        self._llm = chat_model
        self._retriever: Retriever | None = None
        self._gen_name: str | None = None
        self._index: IndexLocation | None = None  # the index directory or Chroma server (opened on first use)
        self.embedder_status: EmbedderStatus | None = None  # the live generation's embedder against the settings
        self._lock = threading.RLock()  # the retriever and its index generation
        self._llm_lock = threading.Lock()  # the model: loading it must not block searches
        self._vocab: Vocabulary | None = None  # the model's name and token count from its vocabulary alone
        self._vocab_tried = False  # None from the factory: this engine needs the model for them
        self._vocab_lock = threading.Lock()
        self._translator: QueryTranslator | None = None
        self._translator_lock = threading.Lock()
        self._warmed: str | None = None  # the system message the model holds as its cached prefix
        self._warm_lock = threading.Lock()
        self.params = RetrievalParams(dense_weight=settings.dense_weight)

    @property
    def embedder(self) -> Embedder:
        if self._embedder is None:
            meta = self.index.current_meta()
            self._embedder = embedder_for(self.settings, meta.embedder if meta else None, meta.dim if meta else None)
        return self._embedder

    @property
    def index(self) -> IndexLocation:
        """Where the index lives: settings.index_dir, or the Chroma server of settings.chroma_url."""
        if self._index is None:
            self._index = open_index(self.settings)
        return self._index

    @property
    def retriever(self) -> Retriever:
        """The retriever over the live index generation; reopened when a build has replaced it (in this process,
        another one, or another replica of a Chroma-server index). A generation whose embedder this process
        cannot reproduce is refused (assistant/index/identity.py)."""
        with self._lock:
            gen = self.index.require()
            if self._retriever is None or gen != self._gen_name:
                old = self._retriever
                snap = self.index.snapshot(gen)
                status = compare(snap.meta, self.settings.embedder, self._embedder_for(snap.embedder_name, snap.meta.dim))
                if status.status != "ok":
                    log.warning("index %s: %s", gen, status.en)
                if status.refuse:
                    snap.close()
                    raise status.error()
                self.embedder_status = status
                self._retriever = Retriever(snap, self.embedder, self.params)
                self._gen_name = gen
                if old is not None:
                    old.snap.close()
            return self._retriever

    def _embedder_for(self, name: str, dim: int | None = None) -> Embedder:
        """The embedder a generation needs: the loaded one when it has that name, else the one it names."""
        if self._embedder is None or self._embedder.name != name:
            self._embedder = embedder_for(self.settings, name, dim)
        return self._embedder

    @property
    def llm(self) -> ChatModel:
        with self._llm_lock:
            if self._llm is None:
                from .llm.factory import create_chat_model

                self._llm = create_chat_model(self.settings)
                self._vocab = None  # the model counts from now on: its stand-in's memory goes
            return self._llm

    @property
    def model_loaded(self) -> bool:
        """Whether the chat model's weights are loaded in this process."""
        return self._llm is not None

    def vocabulary(self) -> Vocabulary:
        """The chat model as the pinned context sees it (its name, file and token count): the loaded model, else
        (llama.cpp) its vocabulary loaded alone, so the pinned context can be sized and its translations found, and
        a question refused, without loading the weights; the other engines load the model."""
        if self._llm is None:
            with self._vocab_lock:
                if not self._vocab_tried and self._llm is None:
                    from .llm.factory import create_vocabulary

                    self._vocab = create_vocabulary(self.settings)
                    self._vocab_tried = True
            vocab = self._vocab  # read once: the model's load may drop it meanwhile (the counts are the same)
            if vocab is not None:
                return vocab
        return self.llm

    def count_tokens(self, text: str) -> int:
        """`text`'s length in the chat model's tokens (`vocabulary()`'s count)."""
        return self.vocabulary().count_tokens(text)

    @property
    def translator(self) -> QueryTranslator | None:
        """The question translator when settings.translate_queries is on, else None. It has its own model
        instance (settings.translate_model, or the remote engine): one llama.cpp context serves one thread."""
        if not self.settings.translate_queries:
            return None
        with self._translator_lock:
            if self._translator is None:
                self._translator = create_translator(self.settings)
            return self._translator

    def translate(self, question: str) -> str | None:
        """The question in the other language when translation is on and succeeds, else None."""
        tr = self.translator
        return tr.translate(question) if tr is not None else None

    def warm(self, system: str) -> None:
        """Make `system` the model's cached prefix unless it already is: loaded from its file in a fraction of a
        second, or computed once and kept (llm/llamacpp.py `warmup`). Every fact answer calls this before its turn,
        so a process that never ran load() (`assistant ask`, `assistant eval`) reuses the prefix file as a server
        does, and a short prompt that displaced it (a selection answer's) costs no second prefill."""
        with self._warm_lock:
            if self._warmed == system:
                return
            self.llm.warmup(system)
            self._warmed = system

    def load(self, warm: bool, prefix: Callable[[], str], also: Callable[[], Any]) -> None:
        """Load index, embedder and model now (the server calls this at start-up).

        The model (memory-mapped weights, then its warmed system prompt, restored from disk when it was
        kept there) loads on a second thread while the index opens: llama.cpp releases the GIL, so the two
        overlap on two cores instead of adding up. `prefix()`: the system prompt to warm (the pinned context, made of
        the index's passages); `also()`: what else wants the open index before answers come (the router's classifier).
        """
        failed: list[BaseException] = []
        index_open = threading.Event()

        started = time.perf_counter()

        def load_model() -> None:
            try:
                llm = self.llm
                self.translate("ZeRO 分布式训练")  # loads and warms the translating model, when translation is on
                loaded = time.perf_counter()
                if warm:
                    index_open.wait()  # the pinned prefix is made of the index's passages
                    self.warm(prefix())
                log.info("model loaded in %.1f s, warmed in %.1f s (%s)", loaded - started,
                         time.perf_counter() - loaded, getattr(llm, "warmed_from", "") or "no cache")
            except BaseException as exc:  # re-raised on the caller's thread below
                failed.append(exc)

        model_thread = threading.Thread(target=load_model, name="assistant-load-model", daemon=True)
        model_thread.start()
        try:
            # one search loads jieba's dictionary and the embedder's graph, which otherwise cost the first
            # user ~2.5 s before the sources appear
            self.retriever.search("ZeRO 分布式训练 warm-up", k=1)
            also()
            log.info("index and embedder loaded in %.1f s", time.perf_counter() - started)
        finally:
            index_open.set()
            model_thread.join()
        if failed:
            raise failed[0]

    def index_generation(self) -> str:
        """Names one build of one index: the live generation's directory (absolute), or on a Chroma server
        <url>/<prefix>/<generation>."""
        snap = self.retriever.snap
        return snap.location

    def ping(self) -> None:
        """Raise a UserError when an engine cannot answer now: a Chroma server, the live generation (maybe a new one)
        with its embedder, a remote generation or embedding server (local engines have nothing to ask)."""
        self.index.ping()
        self.retriever  # noqa: B018 (opens a new live generation, and refuses an embedder it cannot reproduce)
        if self._llm is not None:
            self._llm.ping()
        if self._embedder is not None:
            self._embedder.ping()

    def stats(self) -> dict[str, Any]:
        snap = self.retriever.snap
        langs: dict[str, int] = {}
        fws: dict[str, int] = {}
        for c in snap.chunks:
            langs[c.language] = langs.get(c.language, 0) + 1
            for f in c.frameworks:
                fws[f] = fws.get(f, 0) + 1
        return {"generation": snap.name, "documents": len({c.source for c in snap.chunks}),
                "chunks": len(snap.chunks), "languages": langs, "frameworks": dict(sorted(fws.items())),
                "embedder": snap.embedder_name, "skipped": [list(s) for s in snap.meta.skipped],
                "chunk_tokens": snap.meta.chunk_tokens}

    def close(self) -> None:
        if self._llm is not None:
            self._llm.close()
        if self._translator is not None:
            self._translator.close()
        if self._retriever is not None:
            self._retriever.snap.close()
