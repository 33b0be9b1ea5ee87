"""Hybrid retrieval: dense (Chroma, multilingual embedder) + keyword (jieba BM25), fused by weighted scores.

- The query is expanded with bilingual concept terms and framework aliases for the keyword side
  (张量并行 -> tensor parallelism, 飞桨 -> PaddlePaddle), so a Chinese question reaches English passages.
- Fusion: score = w * cosine + (1 - w) * bm25 / (bm25 + s), with cosine computed exactly for every
  candidate from either side (vectors are held in memory), plus a small boost for chunks about a
  framework the question names. The weights were tuned on the dev split (docs/retrieval.md).
- A comparison question (two or more frameworks named) gets evidence for each side, interleaved.
- Optionally the question's translation into the other language (assistant/translate.py, written by a chat
  model) joins in: its embedding is one more query vector, and passages in the other language get their keyword
  score from the question's tokens plus the translation's (docs/retrieval.md, query translation).
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from .embed import Embedder
from .filters import Filters
from .frameworks import expand_terms, find_frameworks
from .index.builder import keyword_text
from .index.snapshot import IndexSnapshot
from .index.store import where_clause
from .lang import detect_language
from .lexicon import refers_to_article
from .text import tokenize
from .types import Chunk, Hit


@dataclass
class RetrievalParams:
    dense_weight: float = 0.2  # tuned on the dev split: docs/retrieval.md
    cross_dense_weight: float = 0.5  # weight of the dense side for passages in the other language
    # ... when the query comes with its translation, the keyword side speaks that language too (chosen on the
    # dev split: docs/retrieval.md, query translation)
    translated_cross_dense_weight: float = 0.2
    bm25_saturation: float = 8.0  # s in bm25 / (bm25 + s)
    framework_boost: float = 0.06
    other_framework_penalty: float = 0.06  # passages only about frameworks the question does not name
    candidates: int = 40
    mode: str = "hybrid"  # "hybrid" | "dense" | "bm25"
    expand_dense: bool = True  # also embed the query with its cross-language terms; keep the better cosine
    article_boost: float = 0.1  # "according to the article" / "文章中" points at the reference article
    # passages of the frameworks a question names that join the candidates whatever their rank overall: among
    # 2,000 chunks another framework's pages with the same words ("distributed training API") can take every place
    named_candidates: int = 10
    # diversity and primary sources in the final top k (docs/retrieval.md, issue 33): at most this many passages of
    # one file (0: no cap), and an official page ranks above one of our notes (corpus/notes/) that paraphrases it
    # (vectors at least `paraphrase_cosine` alike, same framework) when it scores within `note_yield` of the note
    max_per_source: int = 2
    note_yield: float = 0.05
    paraphrase_cosine: float = 0.7


def _note_of(source: str) -> str:
    """The framework of one of our notes (corpus/notes/<framework>.md: a summary that paraphrases the official
    pages), else ''."""
    _, sep, name = ("/" + source).partition("/corpus/notes/")
    fws = find_frameworks(name.rsplit(".", 1)[0].replace("-", " ")) if sep else []
    return fws[0] if fws else ""


def _official_of(source: str) -> str:
    """The framework whose official documentation a page is (framework-docs/<framework>/...), else ''."""
    _, sep, rest = source.partition("framework-docs/")
    fws = find_frameworks(rest.split("/", 1)[0]) if sep else []
    return fws[0] if fws else ""


class Retriever:
    def __init__(self, snapshot: IndexSnapshot, embedder: Embedder, params: RetrievalParams | None = None) -> None:
        self.snap = snapshot
        self.embedder = embedder
        self.params = params or RetrievalParams()
        self._vectors = self._load_vectors()
        self._last_query: tuple[tuple[str, str | None, str, bool], list[np.ndarray]] | None = None
        self._rows_of: dict[str, list[int]] = {}
        self._texts: dict[int, np.ndarray] = {}  # _text_vectors
        self._mean_length: float | None = None  # _avgdl

    def _load_vectors(self) -> np.ndarray:
        """Every chunk's vector, in the order of `snap.chunks` (one bulk read at start-up)."""
        dim = int(self.snap.meta.dim or self.embedder.dim)
        return self.snap.store.vectors([c.id for c in self.snap.chunks], dim)

    # ---- public -------------------------------------------------------------------------------
    def search(self, query: str, k: int = 5, filters: Filters | None = None,
               translation: str | None = None, readings: Mapping[str, str] | None = None) -> list[Hit]:
        """The k best passages for `query`; `translation` is the query in the other language, when known.
        `readings`: passages (by chunk id) also readable in the query's language (a pinned document's twin,
        answering/twin.py): such a passage ranks as the better of its own words and that reading, each scored as
        search scores any passage. The snapshot stays open until the search is done, even if a new generation
        replaces it meanwhile."""
        with self.snap.in_use():
            return self._search(query, k, filters, translation, readings or {})

    def _search(self, query: str, k: int, filters: Filters | None, translation: str | None,
                readings: Mapping[str, str]) -> list[Hit]:
        filters = filters or Filters()
        fws = find_frameworks(query)
        qvecs = self._query_vectors(query, translation)  # embedded once, shared by every side of a comparison
        if len(fws) >= 2 and not filters.framework:
            return self._comparison(query, qvecs, fws, k, filters, translation, readings)
        return self._ranked(query, qvecs, k, filters, fws, translation, readings)

    def similarities(self, query: str, chunks: Sequence[Chunk], translation: str | None = None,
                     texts: Sequence[str] = ()) -> list[float]:
        """The cosine between the query, embedded as search embeds it, and each of these passages (of this
        snapshot), ranked or not: on the multilingual embedding alone, so a question and a passage in different
        languages compare as closely as in one (the fused score's keyword side does not cross languages). The
        answer reads it for the pinned passages: how close the question is to the documents always in context.
        `texts`: the same passages in other words (their twin's translations, in the chunks' order); a passage is
        then as close as the closer of its two readings (a question is closer to a passage in its own language)."""
        if not chunks or self.params.mode == "bm25":
            return [0.0] * len(chunks)
        qvecs = self._query_vectors(query, translation)
        with self.snap.in_use():
            rows = [self.snap.row_of.get(c.id) for c in chunks]
            present = [r for r in rows if r is not None]
            if present:
                vecs = self._vectors[np.asarray(present)]
                sims = np.max(np.stack([vecs @ v for v in qvecs]), axis=0)
        it = iter(sims.tolist() if present else [])
        out = [next(it) if r is not None else 0.0 for r in rows]
        if texts:
            tv = self._text_vectors(tuple(texts))
            other = np.max(np.stack([tv @ v for v in qvecs]), axis=0).tolist()
            out = [max(a, b) for a, b in zip(out, other, strict=True)]
        return out

    def _text_vectors(self, texts: tuple[str, ...]) -> np.ndarray:
        """The passage vectors of `texts`, embedded once (the last few sets kept: a twin per question language)."""
        key = hash(texts)
        if key not in self._texts:
            self._texts[key] = np.asarray(self.embedder.passages(list(texts)), dtype=np.float32)
            while len(self._texts) > 4:
                self._texts.pop(next(iter(self._texts)))
        return self._texts[key]

    def around(self, chunk: Chunk) -> list[Chunk]:
        """The chunk with the passages just before and after it in its section (same document and heading path), in
        document order; [chunk] when it has none or is not of this generation."""
        row = self.snap.row_of.get(chunk.id)
        if row is None:
            return [chunk]
        chunks = self.snap.chunks

        def same(r: int) -> bool:
            return 0 <= r < len(chunks) and (chunks[r].source, chunks[r].heading_path) == (chunk.source, chunk.heading_path)
        return [chunks[r] for r in (row - 1, row, row + 1) if r == row or same(r)]

    def query_vector(self, query: str, translation: str | None = None) -> np.ndarray:
        """The query's own embedding, as search embedded it (the router's classifier reads it: not embedded twice)."""
        return self._query_vectors(query, translation)[0]

    def knows(self, term: str) -> bool:
        """Whether the indexed documents have every search token of `term` somewhere (the refusal policy asks: a
        subject the documents name is covered even when the passages retrieved for a question missed it)."""
        toks = tokenize(term)
        return bool(toks) and all(self.snap.keyword.has(t) for t in toks)

    def explain(self, query: str, hits: list[Hit], translation: str | None = None) -> dict[str, Any]:
        """Why the hits rank as they do: the terms the keyword side searched, and per hit the terms it matched,
        the dense weight its fused score used and its keyword score after saturation (score = w * dense +
        (1 - w) * keyword_saturated, plus the framework and article adjustments: `adjustment`)."""
        p = self.params
        qlang = detect_language(query)
        terms = list(dict.fromkeys(tokenize(query) + [t for term in expand_terms(query) for t in tokenize(term)]))
        extra = [t for t in dict.fromkeys(tokenize(translation)) if t not in terms] if translation else []
        rows = []
        for h in hits:
            cross = h.chunk.language != qlang
            searched = terms + extra if cross else terms
            have = set(tokenize(keyword_text(h.chunk)))
            w = float(self._fuse(np.array([1.0]), np.array([0.0]), np.array([cross]), bool(translation))[0])
            sat = h.keyword / (h.keyword + p.bm25_saturation) if p.mode != "dense" else 0.0
            fused = w * h.dense + (1 - w) * sat if p.mode == "hybrid" else h.score
            rows.append({"matched_terms": [t for t in searched if t in have], "dense_weight": round(w, 4),
                         "keyword_saturated": round(sat, 6), "adjustment": round(h.score - fused, 6),
                         "cross_language": cross})
        return {"terms": terms, "translation_terms": extra, "mode": p.mode, "bm25_saturation": p.bm25_saturation,
                "hits": rows}

    # ---- internals ------------------------------------------------------------------------------
    def _query_vectors(self, query: str, translation: str | None = None) -> list[np.ndarray]:
        """The query's embedding, plus that of the query with its cross-language terms when it has any, plus
        that of its translation when given."""
        key = (query, translation, self.params.mode, self.params.expand_dense)
        last = self._last_query  # one answer embeds its question once for search and for similarities
        if last is not None and last[0] == key:
            return last[1]
        vecs = self._embed_query(query, translation)
        self._last_query = (key, vecs)
        return vecs

    def _embed_query(self, query: str, translation: str | None) -> list[np.ndarray]:
        p = self.params
        if p.mode == "bm25":
            return [self.embedder.query(query)]
        qvec = self.embedder.query(query)
        extra = expand_terms(query) if p.expand_dense else []
        vecs = [qvec, self.embedder.query(query + " " + " ".join(extra[:12]))] if extra else [qvec]
        return vecs + [self.embedder.query(translation)] if translation else vecs

    def _keyword_hits(self, tokens: list[str], filters: Filters, want: int = 0, depth: int = 3) -> dict[int, float]:
        """BM25 scores of the best `want` (default `candidates`) rows that pass the filters, among the best
        `candidates` x `depth` overall."""
        want = want or self.params.candidates
        kw: dict[int, float] = {}
        for row, s in self.snap.keyword.search(tokens, k=self.params.candidates * depth):
            if filters.accepts(self.snap.chunks[row]):
                kw[row] = s
                if len(kw) >= want:
                    break
        return kw

    def _named_rows(self, qvec: np.ndarray, fws: list[str], filters: Filters) -> set[int]:
        """The `named_candidates` best rows by meaning among the passages of the named frameworks."""
        if not self._rows_of:  # framework -> its rows, built once per snapshot
            for i, c in enumerate(self.snap.chunks):
                for fw in c.frameworks:
                    self._rows_of.setdefault(fw, []).append(i)
        named = sorted({r for fw in fws for r in self._rows_of.get(fw, [])})
        rows = np.array([r for r in named if filters.accepts(self.snap.chunks[r])], dtype=np.int64)
        if not len(rows):
            return set()
        sims = self._vectors[rows] @ qvec
        top = np.argsort(-sims)[: self.params.named_candidates]
        return {int(rows[i]) for i in top}

    def _ranked(self, query: str, qvecs: list[np.ndarray], k: int, filters: Filters,
                fws: list[str], translation: str | None = None,
                readings: Mapping[str, str] | None = None) -> list[Hit]:
        p = self.params
        qvec = qvecs[0]
        qlang = detect_language(query)
        rows: set[int] = set()
        named = bool(fws and p.named_candidates and not filters.framework)  # the named frameworks' own candidates
        if p.mode != "bm25":
            for cid, _sim in self.snap.store.query(qvec, p.candidates, where_clause(filters)):
                rows.add(self.snap.row_of[cid])
            if named:
                rows |= self._named_rows(qvec, fws, filters)
        kw: dict[int, float] = {}
        kw_other = kw  # keyword scores of passages in the other language
        tokens: list[str] = []
        if p.mode != "dense":
            tokens = tokenize(query) + [t for term in expand_terms(query) for t in tokenize(term)]
            kw = kw_other = self._keyword_hits(tokens, filters)
            if named:
                kw.update(self._keyword_hits(tokens, replace(filters, framework=tuple(fws)), p.named_candidates,
                                             depth=25))
            rows.update(kw)
            if translation:
                kw_other = self._keyword_hits(tokens + tokenize(translation), filters)
                rows.update(r for r in kw_other if self.snap.chunks[r].language != qlang)
        rows.update(self.snap.row_of[cid] for cid in readings or () if cid in self.snap.row_of)
        rows = {r for r in rows if filters.accepts(self.snap.chunks[r])}
        if not rows:
            return []
        idx = np.fromiter(rows, dtype=np.int64)
        dense = np.max(np.stack([self._vectors[idx] @ v for v in qvecs]), axis=0)
        cross = np.array([self.snap.chunks[int(r)].language != qlang for r in idx], dtype=bool)
        bm = np.array([(kw_other if c else kw).get(int(r), 0.0) for r, c in zip(idx, cross, strict=True)],
                      dtype=np.float32)
        score = self._fuse(dense, bm, cross, translated=bool(translation))
        if readings:
            self._read(idx, readings, qvecs, tokens, dense, bm, score)
        if fws and p.framework_boost:
            wanted = set(fws)
            score = score + p.framework_boost * np.array(
                [bool(wanted & set(self.snap.chunks[int(r)].frameworks)) for r in idx], dtype=np.float32)
        if fws and p.other_framework_penalty:
            # a passage only about frameworks the question does not name is evidence about something else
            wanted = set(fws)
            score = score - p.other_framework_penalty * np.array(
                [bool(self.snap.chunks[int(r)].frameworks) and not wanted & set(self.snap.chunks[int(r)].frameworks)
                 for r in idx], dtype=np.float32)
        if p.article_boost and refers_to_article(query):
            score = score + p.article_boost * np.array(
                [self.snap.chunks[int(r)].is_article for r in idx], dtype=np.float32)
        score = self._primary_first(idx, score, max(4 * k, 20))
        order = np.argsort(-score)[: max(4 * k, 20)]
        hits = [Hit(self.snap.chunks[int(idx[i])], float(score[i]), float(dense[i]), float(bm[i])) for i in order]
        return self._diverse(hits, k)

    def _read(self, idx: np.ndarray, readings: Mapping[str, str], qvecs: list[np.ndarray], tokens: list[str],
              dense: np.ndarray, bm: np.ndarray, score: np.ndarray) -> None:
        """Each candidate with a reading in the query's language scored on that reading as search scores a passage
        in the query's language (dense: its vector; keywords: BM25 with the index's statistics, headings and
        frameworks added as `keyword_text` adds them); where the reading scores better, it replaces the passage's
        own scores in place. The reading's language is the query's by contract (a twin made for it), not detected:
        a translated table row that keeps a few Chinese words ("Graph范式", "微软") is still English."""
        position = {cid: j for j, cid in enumerate(readings)}
        at = [(i, position[cid]) for i, r in enumerate(idx) if (cid := self.snap.chunks[int(r)].id) in position]
        if not at:
            return
        texts = tuple(readings.values())  # embedded as a whole, once (`similarities` reads the same set)
        rdense = np.max(np.stack([self._text_vectors(texts)[[j for _, j in at]] @ v for v in qvecs]), axis=0) \
            if self.params.mode != "bm25" else np.zeros(len(at), dtype=np.float32)
        texts = tuple(texts[j] for _, j in at)
        chunks = [replace(self.snap.chunks[int(idx[i])], text=t) for (i, _), t in zip(at, texts, strict=True)]
        rbm = np.asarray(self.snap.keyword.score_texts(tokens, [keyword_text(c) for c in chunks], self._avgdl()),
                         dtype=np.float32) if tokens else np.zeros(len(at), dtype=np.float32)
        rscore = self._fuse(rdense, rbm, np.zeros(len(at), dtype=bool))
        for j, (i, _) in enumerate(at):
            if rscore[j] > score[i]:
                score[i], dense[i], bm[i] = rscore[j], max(dense[i], rdense[j]), rbm[j]

    def _avgdl(self) -> float:
        """The indexed chunks' mean length in keyword tokens (BM25's length norm): kept with the keyword index, or
        computed once per snapshot for an index built before it was kept."""
        if self._mean_length is None:
            self._mean_length = self.snap.keyword.mean_length or (
                float(np.mean([len(tokenize(keyword_text(c))) or 1 for c in self.snap.chunks]))
                if self.snap.chunks else 1.0)
        return self._mean_length

    def _primary_first(self, idx: np.ndarray, score: np.ndarray, top: int) -> np.ndarray:
        """The scores with each note passage (corpus/notes/<framework>.md) among the best `top` put just below the
        lowest page of that framework's official documentation (framework-docs/<framework>/) that says the same (its
        vector at least `paraphrase_cosine` like the note's) and scores within `note_yield` of it: the official page
        ranks first, the note keeps a later place."""
        p = self.params
        if p.note_yield <= 0:
            return score
        score = score.copy()
        order = [int(i) for i in np.argsort(-score)[:top]]
        official = [(i, _official_of(self.snap.chunks[int(idx[i])].source)) for i in order]
        official = [(i, fw) for i, fw in official if fw]
        for i in order:
            fw = _note_of(self.snap.chunks[int(idx[i])].source)
            if not fw:
                continue
            va = self._vectors[int(idx[i])]
            close = [score[j] for j, ofw in official
                     if ofw == fw and score[i] - p.note_yield <= score[j] <= score[i]
                     and float(self._vectors[int(idx[j])] @ va) >= p.paraphrase_cosine]
            if close:
                score[i] = min(close) - 1e-4
        return score

    def _diverse(self, hits: list[Hit], k: int) -> list[Hit]:
        """The first k of `hits` with at most `max_per_source` passages of one file; the places left are filled by
        the passages held back, in order, when there are not enough others."""
        cap = self.params.max_per_source
        if cap <= 0:
            return hits[:k]
        out: list[Hit] = []
        held: list[Hit] = []
        per: dict[str, int] = {}
        for h in hits:
            if per.get(h.chunk.source, 0) < cap:
                per[h.chunk.source] = per.get(h.chunk.source, 0) + 1
                out.append(h)
            else:
                held.append(h)
            if len(out) == k:
                return out
        return out + held[: k - len(out)]

    def _fuse(self, dense: np.ndarray, bm: np.ndarray, cross: np.ndarray, translated: bool = False) -> np.ndarray:
        p = self.params
        if p.mode == "dense":
            return dense
        sat = bm / (bm + p.bm25_saturation)
        if p.mode == "bm25":
            return sat
        # Keywords rarely match across languages (only the expanded terms do), so for a passage in the
        # other language the dense side carries more of the evidence, unless a translation gave it keywords.
        w = np.where(cross, p.translated_cross_dense_weight if translated else p.cross_dense_weight, p.dense_weight)
        return w * dense + (1 - w) * sat

    def _comparison(self, query: str, qvecs: list[np.ndarray], fws: list[str], k: int,
                    filters: Filters, translation: str | None = None,
                    readings: Mapping[str, str] | None = None) -> list[Hit]:
        """Evidence for each side: the best passages per named framework, interleaved, then the overall best."""
        per_side = max(2, k // len(fws))
        lists = [self._ranked(query, qvecs, per_side, filters.only(fw), [fw], translation, readings)
                 for fw in fws[:4]]
        overall = self._ranked(query, qvecs, k, filters, fws, translation, readings)
        out: list[Hit] = []
        seen: set[str] = set()
        for i in range(per_side):
            for lst in lists:
                if i < len(lst) and lst[i].chunk.id not in seen:
                    out.append(lst[i])
                    seen.add(lst[i].chunk.id)
        for h in overall:
            if h.chunk.id not in seen:
                out.append(h)
                seen.add(h.chunk.id)
        # keep the strongest first while guaranteeing each side a place in the top k
        return sorted(self._diverse(out, k), key=lambda h: -h.score)
