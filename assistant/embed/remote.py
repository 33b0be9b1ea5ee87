"""An Embedder served by an OpenAI-compatible /v1/embeddings endpoint (vLLM, Ollama, llama.cpp server, TEI, ...),
chosen with ASSISTANT_EMBEDDINGS_BASE_URL, so a large build can embed on a GPU machine.

Its identity is `openai:<model>` and the dimension the server returns: the index records both (meta.json
`embedder`, `dim`) as it does for the local embedders, and a service opening that index embeds its queries
with the same model on the server named by the settings. The dimension is measured with one request when the
embedder is made; a server that returns another dimension than the index holds, or than it returned before,
is a clear UserError, never vectors of the wrong size in the store. Texts go as they are (no query/passage
prefixes: a model that needs them, such as E5, gets them from its server's template or not at all).
Time-outs, retries and errors are assistant/openai_http.py's (a request is all or nothing, so every failure
that can pass is retried).
"""
from __future__ import annotations

import logging
from collections.abc import Sequence

import numpy as np

from ..errors import UserError
from ..openai_http import RemoteError, RemotePolicy, make_client, ping, remote_error, retrying
from .base import Embedder

log = logging.getLogger(__name__)
PREFIX = "openai:"
WHAT = ("embedding server", "嵌入服务器")
HINT = "ASSISTANT_EMBEDDINGS_MODEL / ASSISTANT_EMBEDDINGS_BASE_URL"


class OpenAIEmbedder(Embedder):
    """Vectors from `base_url`/embeddings for `model` (empty: the first model the server lists)."""

    def __init__(self, base_url: str, model: str = "", api_key: str = "", policy: RemotePolicy | None = None,
                 batch_size: int = 64, expected_dim: int | None = None) -> None:
        self.base_url = base_url
        self.policy = policy or RemotePolicy()
        self.batch_size = batch_size
        self.retried = 0
        self._client = make_client(base_url, api_key, self.policy, "ASSISTANT_EMBEDDINGS_API_KEY")
        self.model = model or self._first_model()
        self.name = PREFIX + self.model
        self.dim = 0
        self.dim = self._request(["dimension probe"]).shape[1]
        if expected_dim and self.dim != expected_dim:
            raise _dim_error(self.name, self.base_url, self.dim, expected_dim, "the index holds")

    def _first_model(self) -> str:
        try:
            models = retrying(lambda: self._client.models.list().data, self.policy, self._log_retry)
        except Exception as exc:
            raise remote_error(exc, self.base_url, *WHAT, settings_hint=HINT,
                               key_setting="ASSISTANT_EMBEDDINGS_API_KEY") from exc
        if not models:
            raise UserError("engine_no_model", f"{self.base_url} serves no models: set ASSISTANT_EMBEDDINGS_MODEL.",
                            f"{self.base_url} 没有可用模型：请设置 ASSISTANT_EMBEDDINGS_MODEL。", 502)
        return str(models[0].id)

    def _encode(self, texts: Sequence[str], kind: str) -> np.ndarray:
        parts = [self._request(texts[i:i + self.batch_size]) for i in range(0, len(texts), self.batch_size)]
        return np.vstack(parts)

    def _request(self, texts: Sequence[str]) -> np.ndarray:
        # an empty string is refused by some servers (OpenAI's own): one space embeds as "nothing"
        payload = [t if t.strip() else " " for t in texts]
        try:
            response = retrying(lambda: self._client.embeddings.create(
                model=self.model, input=payload, encoding_format="float"), self.policy, self._log_retry)
        except Exception as exc:
            raise remote_error(exc, self.base_url, *WHAT, model=self.model, settings_hint=HINT,
                               key_setting="ASSISTANT_EMBEDDINGS_API_KEY") from exc
        rows = sorted(response.data, key=lambda d: d.index)
        if len(rows) != len(payload):
            raise RemoteError("embedding_count", f"The embedding server at {self.base_url} returned {len(rows)} "
                              f"vectors for {len(payload)} texts.",
                              f"{self.base_url} 的嵌入服务器为 {len(payload)} 段文本返回了 {len(rows)} 个向量。")
        try:
            vectors = np.asarray([r.embedding for r in rows], dtype=np.float32)
        except (TypeError, ValueError) as exc:  # ragged rows: vectors of different sizes in one answer
            raise _dim_error(self.name, self.base_url, -1, self.dim, "expected") from exc
        if vectors.ndim != 2 or (self.dim and vectors.shape[1] != self.dim):
            got = vectors.shape[1] if vectors.ndim == 2 else -1
            raise _dim_error(self.name, self.base_url, got, self.dim, "it returned before")
        return vectors

    def _log_retry(self, exc: BaseException, delay: float) -> None:
        self.retried += 1
        log.warning("embedding server %s: %s; retrying in %.1f s", self.base_url, type(exc).__name__, delay)

    def ping(self) -> None:
        ping(self._client, self.base_url, *WHAT)

    def close(self) -> None:
        self._client.close()


def _dim_error(name: str, base_url: str, got: int, want: int, what: str) -> UserError:
    got_s = str(got) if got >= 0 else "ragged"
    return UserError("embedding_dim",
                     f"The embedding server at {base_url} returns {got_s}-dimensional vectors for {name}, but "
                     f"{what} {want}: it serves another model than the index was built with. Point "
                     "ASSISTANT_EMBEDDINGS_BASE_URL / ASSISTANT_EMBEDDINGS_MODEL at that model, or rebuild the "
                     "index (assistant index build).",
                     f"{base_url} 的嵌入服务器为 {name} 返回 {got_s} 维向量，而{'索引中为' if 'index' in what else '预期为'} "
                     f"{want} 维：它提供的模型与建索引时不同。请让 ASSISTANT_EMBEDDINGS_BASE_URL / "
                     "ASSISTANT_EMBEDDINGS_MODEL 指向该模型，或重建索引（assistant index build）。", 502)
