"""The index on a Chroma server (ASSISTANT_CHROMA_URL): its generations, the live-generation pointer and the
chunk texts all live in the server, so that every replica reads the same index and sees a new build.

Collections of one index (P = settings.chroma_prefix, default "advisor"; one server can hold several indexes):
    P-meta        the catalogue: one record per published generation, id "meta:<gen>" (document: its IndexMeta
                  as JSON, the same record as a local meta.json), and the pointer, id "live" (document: the
                  live generation's name)
    P-gen-<ns>    one generation: ids, vectors, filter fields, and each chunk (document: the chunk's JSON,
                  metadata `row`: its position), see store.py
A build (builder.py) writes P-gen-<ns> completely, then its meta record, then upserts "live": one record write,
the moment the generation goes live. A generation collection without a meta record, or newer than the live one
and never pointed to, is a build that did not finish (killed, or failed); the next build removes it, and a
search never opens it (searches open only what "live" names). The BM25 side is not stored: each process builds
it in memory from the live generation's chunk texts when it opens that generation (see IndexSnapshot.from_parts).
Replicas read the pointer at most every `refresh_s` seconds and reopen when it changed.
"""
from __future__ import annotations

import logging
import time
from typing import Any
from urllib.parse import urlsplit

from ..errors import UserError
from .snapshot import IndexMeta, IndexSnapshot, index_missing, meta_from_json, meta_to_json
from .store import VectorStore

log = logging.getLogger(__name__)
LIVE = "live"
_ONE = [[1.0]]  # the catalogue's records carry a 1-d placeholder vector: Chroma stores a vector with every record


def _unreachable(url: str, exc: BaseException) -> UserError:
    reason = (str(exc).splitlines() or [type(exc).__name__])[0][:200]
    return UserError("chroma_unreachable",
                     f"The Chroma server at {url} does not answer ({reason}). Start it (chroma run --path DIR "
                     "--host HOST --port PORT) or fix ASSISTANT_CHROMA_URL.",
                     f"{url} 上的 Chroma 服务没有响应（{reason}）。请启动它（chroma run --path DIR --host HOST "
                     "--port PORT）或修改 ASSISTANT_CHROMA_URL。", status=503)


def connect(url: str) -> Any:
    """A chromadb.HttpClient for `http(s)://host:port`; a UserError when the URL is malformed or nobody answers."""
    import chromadb
    from chromadb.config import Settings as ChromaSettings

    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UserError("chroma_url", f"ASSISTANT_CHROMA_URL must look like http://host:port, not {url!r}.",
                        f"ASSISTANT_CHROMA_URL 的格式应为 http://host:port，而不是 {url!r}。")
    port = parts.port or (443 if parts.scheme == "https" else 8000)
    try:
        client = chromadb.HttpClient(host=parts.hostname, port=port, ssl=parts.scheme == "https",
                                     settings=ChromaSettings(anonymized_telemetry=False))
        client.heartbeat()
    except Exception as exc:  # noqa: BLE001 - httpx and chromadb raise several kinds for "not there"
        raise _unreachable(url, exc) from exc
    return client


def _gen_time(name: str) -> int:
    return int(name.split("-")[1])


class ServerIndex:
    """One index (a collection prefix) in a Chroma server; the same methods as location.LocalIndex."""

    def __init__(self, url: str, prefix: str = "advisor", refresh_s: float = 1.0) -> None:
        self.url = url.rstrip("/")
        self.prefix = prefix
        self.refresh_s = refresh_s
        self._client = connect(self.url)
        self._catalogue = self._call(lambda: self._client.get_or_create_collection(
            f"{prefix}-meta", embedding_function=None))
        self._live: tuple[float, str | None] | None = None

    def _call(self, fn: Any) -> Any:
        try:
            return fn()
        except UserError:
            raise
        except Exception as exc:  # noqa: BLE001 - a connection error from any call is the same finding
            if type(exc).__name__ in ("NotFoundError",):
                raise
            import httpx

            if isinstance(exc, httpx.HTTPError | ConnectionError | OSError):
                raise _unreachable(self.url, exc) from exc
            raise

    # ---- the pointer and the catalogue ------------------------------------------------------------
    def live(self, fresh: bool = False) -> str | None:
        """The live generation's name (None: no index yet); re-read from the server at most every refresh_s."""
        now = time.monotonic()
        if not fresh and self._live is not None and now - self._live[0] < self.refresh_s:
            return self._live[1]
        got = self._call(lambda: self._catalogue.get(ids=[LIVE], include=["documents"]))
        name = got["documents"][0] if got["ids"] else None
        self._live = (now, name)
        return name

    def require(self) -> str:
        name = self.live()
        if name is None:
            log.info("no index in %s (prefix %s)", self.url, self.prefix)
            raise index_missing()
        return name

    def meta(self, gen: str) -> IndexMeta | None:
        got = self._call(lambda: self._catalogue.get(ids=[f"meta:{gen}"], include=["documents"]))
        return meta_from_json(got["documents"][0]) if got["ids"] else None

    def current_meta(self) -> IndexMeta | None:
        gen = self.live(fresh=True)
        return self.meta(gen) if gen else None

    def location(self, gen: str) -> str:
        return f"{self.url}/{self.prefix}/{gen}"

    def describe(self) -> str:
        return f"{self.url} (collections {self.prefix}-*)"

    def ping(self) -> None:
        self._call(self._client.heartbeat)

    # ---- generations ------------------------------------------------------------------------------
    def collection(self, gen: str) -> str:
        return f"{self.prefix}-{gen}"

    def store(self, gen: str) -> VectorStore:
        return self._call(lambda: VectorStore(client=self._client, name=self.collection(gen)))

    def snapshot(self, gen: str) -> IndexSnapshot:
        meta = self.meta(gen)
        if meta is None:
            raise index_missing()
        store = self.store(gen)
        chunks = self._call(store.chunks)
        return IndexSnapshot.from_parts(gen, self.location(gen), meta, chunks, lambda: store)

    def generations(self) -> list[str]:
        """Names of the generation collections present (published or not), oldest first."""
        head = f"{self.prefix}-gen-"
        names = [c.name for c in self._call(lambda: self._client.list_collections(limit=100_000))]
        return sorted((n.removeprefix(f"{self.prefix}-") for n in names if n.startswith(head)), key=_gen_time)

    def new_generation(self) -> tuple[str, VectorStore]:
        gen = f"gen-{time.time_ns()}"
        return gen, self.store(gen)

    def publish(self, gen: str, meta: IndexMeta) -> None:
        """The generation's meta record, then the pointer: after this every replica's next check opens `gen`."""
        self._call(lambda: self._catalogue.upsert(ids=[f"meta:{gen}"], embeddings=_ONE, documents=[meta_to_json(meta)]))
        self._call(lambda: self._catalogue.upsert(ids=[LIVE], embeddings=_ONE, documents=[gen]))
        self._live = None

    def drop(self, gen: str) -> None:
        self._call(lambda: self._catalogue.delete(ids=[f"meta:{gen}"]))
        try:
            self._call(lambda: self._client.delete_collection(self.collection(gen)))
        except Exception as exc:  # noqa: BLE001 - already gone is fine
            if type(exc).__name__ != "NotFoundError" and "does not exist" not in str(exc):
                raise

    def remove_unpublished(self) -> None:
        """Drop what a killed or failed build left: generations newer than the live one (never pointed to)."""
        live = self.live(fresh=True)
        for gen in self.generations():
            if gen != live and (live is None or _gen_time(gen) > _gen_time(live)):
                self.drop(gen)

    def prune(self, keep_previous: int) -> None:
        live = self.live(fresh=True)
        old = [g for g in self.generations() if g != live and (live is None or _gen_time(g) < _gen_time(live))]
        for gen in old[: max(0, len(old) - keep_previous)]:
            self.drop(gen)
