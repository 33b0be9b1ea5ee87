"""The question-kind classifier: is a question asking which framework to choose ("selection") or something else
("fact")? A logistic regression over the embedder's query vectors, trained on the dev phrasings shipped with the
package (assistant/route_phrasings.jsonl, written by bench/route_phrasings.py from eval/'s dev sets), once per
embedder at first use and cached (in memory, and on disk when a cache folder is given), so it works for whichever
embedder the index uses. It reads a vector the retriever already computed; it never embeds a question itself.

Owns the training data's loading, the model and its cache; the router (assistant/route.py) owns what the
probability decides.
"""
from __future__ import annotations

import functools
import hashlib
import json
import logging
import threading
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .embed import Embedder

log = logging.getLogger(__name__)

PHRASINGS = Path(__file__).with_name("route_phrasings.jsonl")
# chosen by 5-fold cross-validation on the dev phrasings (bench/route_accuracy.py --cv): the cosine-scale inputs
# times SCALE, a light L2 penalty, classes weighted to balance
SCALE = 10.0
L2 = 1e-3
STEPS = 800
RATE = 0.5


def load_phrasings(path: Path = PHRASINGS) -> list[dict[str, str]]:
    """The labelled phrasings: {text, kind, lang, case}."""
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def fit(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, float]:
    """Class-balanced L2 logistic regression by gradient descent on `x * SCALE`: (weights, bias)."""
    x = x * SCALE
    w = np.zeros(x.shape[1])
    b = 0.0
    pos = max(float(y.sum()), 1.0)
    weight = np.where(y == 1, (len(y) - pos) / pos, 1.0)
    weight /= weight.mean()
    for _ in range(STEPS):
        p = 1.0 / (1.0 + np.exp(-(x @ w + b)))
        g = (p - y) * weight
        w -= RATE * (x.T @ g / len(y) + L2 * w)
        b -= RATE * float(g.mean())
    return w, b


@dataclass(frozen=True)
class KindClassifier:
    """P(selection) for a query vector of the embedder it was trained for."""

    embedder: str
    weights: np.ndarray
    bias: float

    def selection_probability(self, vector: np.ndarray) -> float:
        z = float(np.asarray(vector, dtype=np.float64) @ self.weights * SCALE + self.bias)
        return 1.0 / (1.0 + np.exp(-z))


_TRAINED: dict[str, KindClassifier] = {}
_LOCK = threading.Lock()


def embedder_key(embedder: Embedder) -> str:
    return f"{embedder.name}-{embedder.dim}"


@functools.cache
def _digest(path: Path) -> str:
    """The phrasings' hash, read once per process (package data: it does not change while the service runs; each
    question asks for the classifier)."""
    return hashlib.sha256(path.read_bytes()).hexdigest()[:12]


def classifier_for(embedder: Embedder, cache_dir: Path | None = None,
                   path: Path = PHRASINGS) -> KindClassifier | None:
    """The classifier for this embedder: trained on the phrasings at first use (one batch of query embeddings),
    then kept in memory and, with `cache_dir`, on disk (keyed by the embedder and the phrasings' hash). None when
    the embedder cannot embed (the router then decides by its wording rules)."""
    key = f"{embedder_key(embedder)}-{_digest(path)}"
    with _LOCK:
        if key in _TRAINED:
            return _TRAINED[key]
        file = cache_dir / f"route-kind-{key}.npz" if cache_dir is not None else None
        clf = None
        if file is not None and file.exists():
            try:
                saved = np.load(file)
                clf = KindClassifier(key, saved["weights"], float(saved["bias"]))
            except (OSError, ValueError, KeyError) as exc:
                log.warning("route classifier cache %s unreadable (%s): retraining", file, exc)
        if clf is None:
            rows = load_phrasings(path)
            try:
                x = embedder.queries([r["text"] for r in rows]).astype(np.float64)
            except Exception as exc:  # an embedder that cannot answer: the rules decide
                log.warning("route classifier not trained: the embedder failed (%s)", exc)
                return None
            w, b = fit(x, np.array([r["kind"] == "selection" for r in rows], dtype=np.float64))
            clf = KindClassifier(key, w, b)
            if file is not None:
                try:
                    file.parent.mkdir(parents=True, exist_ok=True)
                    np.savez(file, weights=w, bias=np.array(b))
                except OSError as exc:
                    log.warning("route classifier not cached in %s (%s)", file, exc)
        _TRAINED[key] = clf
        return clf
