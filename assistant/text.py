"""Text in both languages: CJK ranges, token estimates, search tokens, sentences and citation markers.

Every module that needs to know "is this Chinese", "how many tokens is this", "what are its search words", "where
do its sentences end" or "which [n] in it cite a source" asks here, so the answer is the same everywhere (which
language a chunk is, which words BM25 indexes and the question is searched with, which sentences a citation is
checked against, which markers the check, the chat's links and the export's footnotes read).
Which language a whole text is in (a threshold over these counts) is assistant/lang.py.
"""
from __future__ import annotations

import logging
import math
import re
import unicodedata
from collections.abc import Callable
from typing import Any

# ---- scripts ------------------------------------------------------------------------------------------
# Han ideographs: CJK Extension A, the Unified Ideographs, the Compatibility Ideographs. Character-class
# bodies, to be used inside [...] (f"[{HAN}]").
HAN = "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
CJK_PUNCT = "\u3000-\u303f"  # 、。「」《》 and the ideographic space
FULLWIDTH = "\uff00-\uffef"  # ！？（），：； and full-width Latin
_HAN = re.compile(f"[{HAN}]")


def is_cjk(ch: str) -> bool:
    """Whether ch (one character) is a Han ideograph."""
    return bool(_HAN.fullmatch(ch))


def has_cjk(text: str) -> bool:
    return _HAN.search(text) is not None


def cjk_count(text: str) -> int:
    """Han ideographs in text."""
    return len(_HAN.findall(text))


# ---- valid Unicode ------------------------------------------------------------------------------------
_SURROGATE = re.compile("[\ud800-\udfff]")


def valid_unicode(text: str) -> str:
    """text with its lone surrogates replaced by U+FFFD (paired ones are joined into their character). A JSON or
    YAML escape such as "\\ud800" decodes to a lone surrogate, which no UTF-8 encoder (Chroma, the embedders'
    tokenizers, SQLite, a JSON response) accepts: text from files and requests passes here first."""
    if not _SURROGATE.search(text):
        return text
    return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


def valid_strings(value: Any) -> Any:
    """value (a string, or lists and dicts of them, as JSON and YAML give) with every string valid_unicode."""
    if isinstance(value, str):
        return valid_unicode(value)
    if isinstance(value, list):
        return [valid_strings(v) for v in value]
    if isinstance(value, dict):
        return {valid_strings(k): valid_strings(v) for k, v in value.items()}
    return value


# ---- token estimates ------------------------------------------------------------------------------------
# A fast token-count estimate for the chat model's tokenizer (Qwen2.5), with no model needed. Calibrated on
# ../shared/framework-docs and corpus/ against the real tokenizer (llama.cpp, vocab only); see docs/chunking.md
# for the measurements. CJK characters and other characters cost very different amounts, so they are counted
# apart. The constants lean high on purpose: a chunk that the estimate says fits must also fit under the real
# tokenizer. The chunker sizes chunks with it, so changing it changes every chunk id of the index.
_WIDE = re.compile(f"[{CJK_PUNCT}{HAN}{FULLWIDTH}]")
_LETTER = re.compile(r"[A-Za-z]")
_DIGIT = re.compile(r"[0-9]")  # Qwen2.5 splits numbers into single digits
_SPACE = re.compile(r"\s")
_PUNCT = re.compile(r"[!-/:-@\[-`{-~]")
# tokens per character, fitted by least squares on 1,892 pieces of the corpus against the real
# tokenizer, then rounded up (docs/chunking.md); "other" is emoji, accents, box drawing...
PER_CJK, PER_LETTER, PER_DIGIT, PER_SPACE, PER_PUNCT, PER_OTHER = 0.8, 0.28, 1.0, 0.12, 0.6, 1.5


def estimate_tokens(text: str) -> int:
    """Estimated Qwen2.5 tokens of text: a median 1.2x over the real count, under it for ~7% of pieces."""
    wide = len(_WIDE.findall(text))
    letters = len(_LETTER.findall(text))
    digits = len(_DIGIT.findall(text))
    spaces = len(_SPACE.findall(text))
    punct = len(_PUNCT.findall(text))
    other = len(text) - wide - letters - digits - spaces - punct
    return math.ceil(wide * PER_CJK + letters * PER_LETTER + digits * PER_DIGIT + spaces * PER_SPACE
                     + punct * PER_PUNCT + other * PER_OTHER)


def rough_tokens(text: str) -> int:
    """A rule of thumb where no tokenizer is at hand and nothing is sized by it bit-for-bit: ~1 token per Han
    character, ~4 other characters per token, plus one. It is what ChatModel.count_tokens falls back to (the
    scripted and remote engines), what remote usage is reported as when the server says nothing, and how the
    session store budgets history. It is not estimate_tokens: moving these budgets onto the calibrated estimate
    would change which evidence and history fit, so that is a change of its own, to be measured."""
    cjk = cjk_count(text)
    return cjk + max(0, len(text) - cjk) // 4 + 1


# ---- search tokens ----------------------------------------------------------------------------------------
# jieba words for Chinese, lower-cased words (with dots and dashes kept, so `tf.function` and `megatron-lm`
# stay whole, plus their parts) for English; stop words dropped. The keyword index (index/keyword.py) is
# built from these tokens, and retrieval, evidence selection and citation checking compare with them.
_WORD = re.compile(f"[a-z0-9][a-z0-9_.\\-]*[a-z0-9]|[a-z0-9]|[{HAN}]+")
_STOP = frozenset(
    """a an the of to in on for and or is are was were be been it its this that these those with as by at from
    what which who how why when where do does did can could should would will i we you they he she my our your
    there their than then so if not no yes about into over use used using also more most such one two
    的 了 和 是 在 与 及 或 有 也 就 都 而 把 被 对 等 中 上 下 为 以 之 这 那 个 吗 呢 吧 啊 什么 怎么 如何 哪个 哪些 可以 一个 我们 你们
    他们 它 它们 还是 是否 进行 使用 通过 需要 支持""".split()
)

_jieba_ready = False


def jieba_tokenizer():
    global _jieba_ready
    import jieba

    if not _jieba_ready:
        jieba.setLogLevel(logging.WARNING)
        for term in ("张量并行", "流水线并行", "数据并行", "序列并行", "专家并行", "混合精度", "动转静", "飞桨", "零冗余",
                     "分布式训练", "计算图", "动态图", "静态图", "自动并行", "混合并行", "显存", "国产化"):
            jieba.add_word(term)
        _jieba_ready = True
    return jieba


def tokenize(text: str) -> list[str]:
    """Search tokens of a text in either language."""
    low = text.lower()
    out: list[str] = []
    for m in _WORD.finditer(low):
        tok = m.group(0)
        if is_cjk(tok[0]):
            out.extend(w for w in jieba_tokenizer().lcut(tok) if w not in _STOP)
        elif tok not in _STOP:
            out.append(tok)
            if "." in tok or "-" in tok or "_" in tok:
                out.extend(p for p in re.split(r"[._\-]", tok) if p and p not in _STOP)
    return out


def content_terms(text: str) -> set[str]:
    """The search tokens that carry content: no single Latin letter, but a digit does ("stage 2" is not "stage 3")."""
    return {t for t in tokenize(text) if len(t) > 1 or not t.isascii() or t.isdigit()}


# ---- sentences ----------------------------------------------------------------------------------------------
# Two splitters, on purpose: the chunker's cut points (sentence_ends) decide chunk boundaries and so every chunk
# id of the index, while split_sentences decides which sentences of an answer carry which citation markers and
# which sentences of a passage are evidence. Their rules differ (the chunker also ends sentences at ; and before
# list items, and at "." after any character; answers keep their markers with the sentence) and each is fixed
# by what depends on it, so neither is written in terms of the other.

# zh 。！？； and en . ! ? ; before whitespace (plus closing quotes), or the start of a list item
_CHUNK_SENTENCE_END = re.compile(r"(?:[。！？；][”’」』）)]*\s*|[.!?;][\"'”’)\]]*(?:\s+|$)|\n(?=\s*(?:[-*+] |\d+[.)] )))")


def sentence_ends(text: str) -> list[int]:
    """Offsets just after each sentence end of text (trailing whitespace included): where the chunker may cut."""
    return [m.end() for m in _CHUNK_SENTENCE_END.finditer(text)]


# A sentence ends at 。！？；!? or at . followed by space/end (not inside 3.14 or tf.function), plus any closing
# quotes/brackets and trailing citation markers like [1][2] or [1], [2].
_SENT_END = re.compile(
    r"(?<=[。！？；!?])(?:[”’」』）)\]]*)(?:\s*[,，、]?\s*\[\d+(?:\s*[,，]\s*\d+)*\])*\s*"
    r"|(?<=[a-z0-9)\]`\"'])\.(?:\s*[,，、]?\s*\[\d+(?:\s*[,，]\s*\d+)*\])*(?=\s|$)\s*",
    re.IGNORECASE,
)


def table_cells(row: str) -> list[str]:
    """The cells of a markdown table row ("| JAX | Google | ... |" -> ["JAX", "Google", "..."]): the chunker packs
    rows under their header by them, and the citation check reads a row's first cell as its subject."""
    return [c.strip() for c in row.strip().strip("|").split("|")]


# a list item's number ("1.", "2)", "3、") at the end of a piece, alone or after a sentence's end, a colon or markers:
# the sentence end after a digit cuts it from its item ("1.", "Text.[1] 2." of "1. Text.[1] 2. More."), not "stage 2."
_NEXT_NUMBER = re.compile(r"(?:^|(?<=[\]。！？；.!?：:])\s*|(?<=[\]:])\s+)(\d{1,2}[.)、])$")
# a sentence that begins a list item: "- …", "* …", "• …", "① …", "（1）…", "1. …", "2) …", "3、…", and
# reStructuredText's auto-numbered "#. …" / "#) …" (docutils numbers them; the passage keeps the page's own words)
LIST_ITEM = re.compile(r"(?:[-*•]\s+|[①-⑩]\s*|[（(]\d{1,2}[)）]\s*|(?P<n>\d{1,2}|#)(?P<sep>[.)、）])\s*)(?=\S)")


def split_sentences(text: str) -> list[str]:
    """Split text into sentences, keeping each sentence's own citation markers with it (answers and passages); a list
    item's number stays with its item's first sentence."""
    out: list[str] = []
    for block in re.split(r"\n\s*\n|\n(?=\s*(?:[-*•]|(?:\d+|#)[.)、])\s)", text):
        block = block.strip()
        if not block:
            continue
        start = 0
        pieces: list[str] = []
        for m in _SENT_END.finditer(block):
            end = m.end()
            piece = block[start:end].strip()
            if piece:
                pieces.append(piece)
            start = end
        rest = block[start:].strip()
        if rest:
            pieces.append(rest)
        number = ""  # the next item's number, cut from the end of the piece before
        for i, piece in enumerate(pieces):
            piece = f"{number} {piece}" if number else piece
            number = ""
            tail = _NEXT_NUMBER.search(piece) if i + 1 < len(pieces) else None
            if tail:  # "…applications)[1] 2." of an inline list "1. … [1] 2. … [1] 3. …"
                piece, number = piece[:tail.start()].rstrip(), tail.group(1)
            if piece:
                out.append(piece)
    return out


def is_code_block(sentence: str) -> bool:
    """Whether a passage's sentence (a piece of `split_sentences`) is a fenced code block: it begins with its fence."""
    return sentence.lstrip().startswith("```")


def item_body(sentence: str) -> str:
    """A list item's sentence without its number or bullet ("1. PaddleHub (…)" -> "PaddleHub (…)"): what it says."""
    item = LIST_ITEM.match(sentence)
    return sentence[item.end():] if item else sentence


def join_sentences(sentences: list[str]) -> str:
    """Sentences as one text again (the check's kept ones): no space after a Chinese character or punctuation or
    before a Chinese character, else one space; a list item on a line of its own, numbered items numbered again in
    order (an item the check removed leaves no gap: "1. … 3. …" reads "1. … 2. …")."""
    out = ""
    number = 0
    for s in sentences:
        item = LIST_ITEM.match(s)
        if item and item.group("n"):
            number += 1
            s = f"{number}{item.group('sep')} {s[item.end():]}"
        if not out:
            out = s
        elif item:
            out += "\n" + s
        elif re.search(f"[{HAN}。！？；]", out[-1]) or re.match(f"[{HAN}]", s):
            out += s
        else:
            out += " " + s
    return out.strip()


# a subject that is only a pronoun ("这个包名……", "This API ...", "It ..."); 此外/其次/其实/其他/那么 are not pronouns
_PRONOUN_START = re.compile(r"^[*_|>#\-•\s]*(?:(?:这|那|它|该|此|其)(?!外|次|实|他|么)|(?:This|That|These|Those|It|Its|They|Their)\b)")


def starts_with_pronoun(sentence: str) -> bool:
    """Whether a sentence (or a table cell / list item, markup ignored) takes its subject from the text before it."""
    return bool(_PRONOUN_START.match(sentence))


# a subject that is only a pronoun standing for one named thing: "它" / "它的" / "其", "It" / "Its" (not "它们",
# "其中", nor a demonstrative with a noun of its own, "这个包名……", "This API ...", which names another thing)
_BARE_PRONOUN = re.compile(r"^(?P<lead>[*_|>#\-•\s]*)(?:(?P<zh>它的|它(?!们)|其(?!外|次|实|他|中|余))|(?P<en>Its|It)\b)")


def resolve_pronoun(sentence: str, name: str) -> str | None:
    """`sentence` with its bare pronoun subject said as `name` ("它在分布式训练上……" -> "PaddlePaddle在分布式训练上……",
    "Its API ..." -> "JAX's API ..."); None when its subject is not such a pronoun."""
    m = _BARE_PRONOUN.match(sentence)
    if not m:
        return None
    return m.group("lead") + said_as(m.group("zh") or m.group("en"), name) + sentence[m.end():]


def said_as(pronoun: str, name: str) -> str:
    """What `name` is said as in place of `pronoun`: "它的" / "其" -> "X的", "its" / "their" -> "X's", else "X"."""
    if pronoun in ("它的", "其"):
        return name + "的"
    if pronoun.lower() in ("its", "their"):
        return name + "'s"
    return name


def normalise(text: str) -> str:
    """Full-width to half-width, lower case, collapsed spaces."""
    return re.sub(r"\s+", " ", unicodedata.normalize("NFKC", text)).strip().lower()


# ---- citation markers -----------------------------------------------------------------------------------
# One source's marker as answers carry them, "[1]": numbers from 1 (sources are numbered from 1; "x[0]" indexes),
# never right after "=" ("shape=[4]") and never in a code span ("`dims[1]`"): those are what the answer states. A
# code span here has no space in it: a sentence cut inside one ("… `tf.[1] If you …") leaves a lone backtick, and
# a span read from it to the next one would swallow the real marker.
CITATION_NUMBER = r"[1-9]\d{0,5}"  # at most 6 digits: int() refuses more than 4,300, and no source has so many
CITATION = re.compile(rf"(?<!=)\[({CITATION_NUMBER})\]")
_CODE_SPAN = re.compile(r"`[^`\s]+`")


def outside_code(pattern: re.Pattern[str], text: str) -> list[re.Match[str]]:
    """`pattern`'s matches in `text` whose first group (or the match, without groups) starts outside code spans."""
    code = [m.span() for m in _CODE_SPAN.finditer(text)]
    return [m for m in pattern.finditer(text) if not any(a <= m.start(1 if m.re.groups else 0) < b for a, b in code)]


def citation_marks(text: str) -> list[re.Match[str]]:
    """The text's citation markers "[n]" (group 1: n), in order: the ones renumbering, links and footnotes read."""
    return outside_code(CITATION, text)


def rewrite(text: str, matches: list[re.Match[str]], repl: Callable[[re.Match[str]], str]) -> str:
    """`text` with each of `matches` (of it, in order, not overlapping) replaced by `repl(match)`."""
    for m in reversed(matches):
        text = text[: m.start()] + repl(m) + text[m.end():]
    return text
