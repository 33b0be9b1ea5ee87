"""The pinned documents in a question's language: each pinned passage translated once by the chat model and kept
on disk, so an English question reads an English twin of the Chinese article, with the same passage numbers and
headings; the citation check reads the passages' own words, which citations open (answer/pinned.py `twin` builds the
context, llm/llamacpp.py keeps its prefix's KV beside the original's).

Why a twin: the small model answers an English question from the Chinese prefix less completely
(docs/pinned-context.md, "Questions in the other language").

Owns the passage translation prompt (whole passages with tables and lists; assistant/translate.py translates search
queries), the translations file `<cache_dir>/twin/translations-<model>.json` (keyed by the model, the prompt, the
target language and the passage's text: a changed passage is translated again, the others are reused; written
atomically after each passage; a damaged file is logged, removed and rebuilt) and the build lock (one build at a
time; a question that finds a build under way reads the documents as they are).
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
from collections.abc import Callable
from pathlib import Path

from ..answer import pinned as pinning
from ..lang import detect_language
from ..llm.base import ChatModel, Vocabulary

log = logging.getLogger(__name__)

LANGUAGES = ("zh", "en")
PROMPTS = {
    "en": ("Translate the user's Chinese text into English. Keep every name, code span, number, Markdown table row "
           "and list item; translate everything, add nothing. Output only the translation."),
    "zh": ("把用户给出的英文文本翻译成简体中文。保留所有名称、代码、数字、Markdown 表格行和列表项；"
           "全部翻译，不增加任何内容。只输出译文。"),
}
FORMAT = 1


def _needs(ctx: pinning.PinnedContext, lang: str) -> bool:
    """Whether a question in `lang` needs a twin: some pinned passage is in the other language."""
    return any(detect_language(c.text) != lang for c in ctx.chunks)


class Twins:
    """The pinned context in each question language, its translations made once per model and kept on disk."""

    def __init__(self, cache_dir: Path, model: Callable[[], ChatModel], vocabulary: Callable[[], Vocabulary],
                 budget: Callable[[], int]) -> None:
        """`model()`: the chat model that translates (the answering one); `vocabulary()`: its name, file and token
        count, which finding the translations needs (without loading the model where the engine allows it);
        `budget()`: the pinned-token budget a twin must fit, like the documents it translates."""
        self.dir = Path(cache_dir) / "twin"
        self._model = model
        self._vocabulary = vocabulary
        self._budget = budget
        self._lock = threading.Lock()
        # (lang, original system) -> what a question in lang reads: the twin, or the original when it needs none
        self._built: dict[tuple[str, str], pinning.PinnedContext] = {}
        self.translated = 0  # passages this process translated (the rest came from the file)

    def of(self, ctx: pinning.PinnedContext, lang: str, build: bool = True) -> pinning.PinnedContext:
        """`ctx` as a question in `lang` reads it: itself when every passage is in `lang`, else its twin (passages
        not yet translated are translated now, once). The original when the twin would not fit the budget, and
        while another thread is building a twin (a server's first start): that question does not wait minutes.
        `build=False`: the twin only when no passage needs translating (its translations are on disk), else the
        original (the refusal decision reads it: a question refused in milliseconds never waits for a model)."""
        key = (lang, ctx.system)
        if key in self._built:  # decided once per pinned text: a question's hot path detects no languages
            return self._built[key]
        if not ctx.k or lang not in PROMPTS or not _needs(ctx, lang):
            self._remember(key, ctx)
            return ctx
        if not self._lock.acquire(blocking=False):
            log.info("the %s twin of the pinned documents is being built: this question reads them as they are", lang)
            return ctx
        try:
            if key in self._built:
                return self._built[key]
            texts = self._translations(ctx, lang, build)
            if texts is None:
                return ctx
            twin = pinning.twin(ctx, texts, lang, self._vocabulary().count_tokens)
            if twin.tokens > self._budget():
                log.warning("the %s twin of the pinned documents needs %d tokens, over the budget of %d: questions "
                            "in %s read the documents as they are", lang, twin.tokens, self._budget(), lang)
                twin = ctx
            self._remember(key, twin)
            return twin
        finally:
            self._lock.release()

    def _remember(self, key: tuple[str, str], ctx: pinning.PinnedContext) -> None:
        self._built[key] = ctx
        while len(self._built) > 8:  # the pins changed: older contexts are not asked for again
            self._built.pop(next(iter(self._built)))

    def built(self) -> list[str]:
        """The languages this process has a twin for."""
        return sorted({ctx.lang for ctx in self._built.values() if ctx.lang})

    def _translations(self, ctx: pinning.PinnedContext, lang: str, build: bool = True) -> list[str] | None:
        """Each passage in `lang`, from the file or translated now; None, without `build`, when some passage is not
        in the file."""
        vocab = self._vocabulary()  # names the file and the entries; the model itself only translates
        path = self.dir / f"translations-{_safe(vocab.name)}.json"
        entries = self._read(path)
        out = []
        for c in ctx.chunks:
            if detect_language(c.text) == lang:
                out.append(c.text)
                continue
            digest = _digest(vocab, lang, c.text)
            if digest not in entries and not build:
                return None
            if digest not in entries:
                entries[digest] = self._translate(self._model(), c.text, lang)
                self.translated += 1
                self._write(path, vocab, entries)
            out.append(entries[digest])
        return out

    def _translate(self, model: ChatModel, text: str, lang: str) -> str:
        """One passage in `lang`; the passage itself when the model fails or writes nothing usable (an empty text,
        or one far longer than the passage)."""
        limit = min(1024, 2 * model.count_tokens(text) + 64)
        try:
            out = model.complete([{"role": "system", "content": PROMPTS[lang]}, {"role": "user", "content": text}],
                                 max_tokens=limit, temperature=0.0).strip()
        except Exception as exc:  # a twin is an aid: the passage stays as it is
            log.warning("could not translate a pinned passage into %s (%s): kept as it is", lang, exc)
            return text
        if not out or len(out) > 6 * len(text) + 200:
            log.warning("the translation of a pinned passage into %s was not usable: kept as it is", lang)
            return text
        return out

    def _read(self, path: Path) -> dict[str, str]:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            if data.get("format") != FORMAT or not isinstance(data.get("entries"), dict):
                raise ValueError("not a translations file")
            return {str(k): str(v) for k, v in data["entries"].items()}
        except FileNotFoundError:
            return {}
        except (OSError, ValueError, AttributeError, UnicodeDecodeError) as exc:
            log.warning("pinned translations %s not read (%s): translating again", path, exc or type(exc).__name__)
            path.unlink(missing_ok=True)
            return {}

    def _write(self, path: Path, model: Vocabulary, entries: dict[str, str]) -> None:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(f".tmp{os.getpid()}")
            tmp.write_text(json.dumps({"format": FORMAT, "model": model.name, "entries": entries},
                                      ensure_ascii=False, indent=1), encoding="utf-8")
            os.replace(tmp, path)
        except OSError as exc:
            log.warning("could not keep the pinned translations in %s: %s", path, exc)


def _digest(model: Vocabulary, lang: str, text: str) -> str:
    ident = f"{model.name}\0{getattr(model, 'path', '')}\0{PROMPTS[lang]}\0{lang}\0{text}"
    return hashlib.sha256(ident.encode()).hexdigest()[:32]


def _safe(name: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "._-" else "_" for ch in str(name))[:60] or "model"
