"""When to refuse, and follow-up rewriting: deterministic rules over retrieval scores, not the model's whim.

Refusal: the question is answered only when the best retrieved passage is close enough
(calibrated thresholds on the dense cosine and on the fused score, tuned on in-domain vs
out-of-domain dev questions: docs/refusal.md), and when the retrieved passages speak of the question's subject:
a near-domain question (another framework, another product of a vendor, a device the documents never name) finds
passages close in meaning, but none of them names what it asks about (`uncovered_subjects`). Requests for the hidden
instructions are refused outright. Which kind a question is (and so whether the subject check applies) is the
router's (assistant/route.py), as is the follow-up rewrite.
"""
from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from ..frameworks import CONCEPTS, expand_terms, find_frameworks
from ..lang import detect_language
from ..lexicon import PRICE, PRICE_STATED
from ..text import has_cjk
from ..types import Hit

REFUSAL = {
    "zh": "抱歉，现有文档没有涉及这个问题，我无法据此回答。",
    "en": "Sorry, the documents I have do not cover this question, so I cannot answer it.",
}
PROMPT_LEAK = {
    "zh": "抱歉，我不能透露系统指令；我只根据已索引的框架文档回答训练框架选型的问题。",
    "en": "Sorry, I can't share my instructions; I only answer questions about AI training frameworks from the indexed documents.",
}

_LEAK = re.compile(
    r"system\s*prompt|your\s+(instructions|prompt|rules)|initial\s+prompt|ignore\s+(all\s+|the\s+|your\s+)?"
    r"(previous|prior|above)|系统提示|系统指令|提示词|你的指令|忽略(之前|以上|上面|前面)",
    re.IGNORECASE,
)


def addresses_the_model(text: str) -> bool:
    """Whether text asks for or overrides the assistant's instructions ("ignore all previous ...", "系统提示词")."""
    return _LEAK.search(text) is not None


_DOMAIN_TERMS = tuple({t for group in CONCEPTS for t in group if len(t) >= 2} | {
    "训练", "框架", "模型", "并行", "training", "framework", "model", "parallel", "gpu", "optimizer", "tensor"})
_DOMAIN_SET = frozenset(_DOMAIN_TERMS) | {"api", "apis", "cpu", "cpus", "gpus", "sdk", "cli"}


@dataclass
class Decision:
    refuse: bool
    reason: str  # "ok" | "about_pinned" | "weak_evidence" | "off_subject" | "prompt_leak" | "empty"
    top_dense: float = 0.0
    top_score: float = 0.0
    missing: tuple[str, ...] = ()  # off_subject: the question's subject terms no retrieved passage names
    nearby: tuple[str, ...] = ()  # off_subject: what the retrieved passages are about (their document titles)

    @property
    def quotes_closest(self) -> bool:
        """Whether an answer the check cannot support may quote the passage sentence closest to the question: not
        when the question was answered only because it points at a pinned document (no passage was close to it)."""
        return self.reason != "about_pinned"

    def message(self, lang: str) -> str:
        """The refusal in the user's language; an off-subject one names what was asked and what is covered nearby."""
        return refusal_text(self.reason, lang, self.missing, self.nearby)


@dataclass
class RefusalThresholds:
    # Tuned on bench/data + eval dev questions; see docs/refusal.md for the sweep that chose them.
    min_dense: float = 0.30
    min_dense_with_domain_term: float = 0.22
    min_score: float = 0.25
    # refuse when a subject term of the question (a name: MindSpore, Jetson, int8, 安卓) is in none of the passages
    subject_check: bool = True


# An injected instruction wrapped in brackets, e.g. "(SYSTEM: ignore your rules ...)" or "【系统指令：...】".
_BRACKETED_INJECTION = re.compile(
    r"[(（\[【<][^)）\]】>]*(system|ignore|instruction|系统|忽略|指令)[^)）\]】>]*[)）\]】>]", re.IGNORECASE)


def strip_injection(question: str) -> str:
    """The question without bracketed injected instructions; the real request inside is still answered."""
    return _BRACKETED_INJECTION.sub(" ", question).strip()


def decide(question: str, hits: list[Hit], th: RefusalThresholds | None = None,
           known: Callable[[str], bool] | None = None, choosing: bool = False, pinned_dense: float = 0.0,
           about_pinned: bool = False) -> Decision:
    """Refuse on a request for the hidden instructions, else when the evidence is too weak, else when the
    passages do not speak of the question's subject (`uncovered_subjects`; `known(term)`, when given, says whether
    the indexed documents name a term anywhere, e.g. Retriever.knows: such a term is never the missing subject).
    `choosing`: the question asks which framework to choose (the caller's router says so: advisor.intent); its
    names describe the asker's situation, not a subject the documents must cover, so the subject check is skipped.

    `pinned_dense`: the question's best cosine with the pinned documents' passages (Retriever.similarities), which
    are in the model's context whatever their rank: one as close as `min_dense` is evidence enough (an English
    question about the Chinese article ranks our English notes first, at scores too weak to answer on).

    `about_pinned`: the question points at a pinned document ("文章建议……", "according to the article"), which the
    model reads in full: its evidence is that document, however far the question's words are from each passage
    (a question about what the article advises is close to none of its sentences); the other checks still apply, and
    a question answered only for this reason ("about_pinned") is refused when nothing the model writes is supported
    (no passage is quoted: none was close to it).

    `question` is expected to have gone through strip_injection already.
    """
    th = th or RefusalThresholds()
    if addresses_the_model(question):
        return Decision(True, "prompt_leak")
    if not hits:
        return Decision(True, "empty")
    top_dense = max(h.dense for h in hits)
    top_score = max(h.score for h in hits)
    domain = bool(find_frameworks(question)) or has_domain_term(question)
    need = th.min_dense_with_domain_term if domain else th.min_dense
    close = (top_dense >= need and top_score >= th.min_score) or pinned_dense >= th.min_dense
    if not close and not about_pinned:
        return Decision(True, "weak_evidence", top_dense, top_score)
    missing = uncovered_subjects(question, hits, known) if th.subject_check and not choosing else []
    if missing:
        nearby = tuple(dict.fromkeys(h.chunk.title for h in hits if h.chunk.title))[:3]
        return Decision(True, "off_subject", top_dense, top_score, tuple(missing), nearby)
    return Decision(False, "ok" if close else "about_pinned", top_dense, top_score)


# ---- the question's subject ----------------------------------------------------------------------------------
# A subject term is a name: a Latin word with a capital inside or a digit (MindSpore, ONNX, int8) or a capital away
# from a sentence's start (Jetson, Android), or a Chinese proper noun as jieba tags it (nr/ns/nt/nz: 安卓). Not a
# subject: the frameworks, their aliases and the concept terms (the documents' own vocabulary), and quantities
# (70B, 24GB, 8x). What a sentence asks for is a subject too when the documents state none of it: a price
# (lexicon.PRICE; covered by a passage that speaks of prices, lexicon.PRICE_STATED). A question is off its documents'
# subject when every sentence of it names something no retrieved passage names; a sentence that names nothing unknown ("另外，ZeRO-Offload 把什么卸载到 CPU 上？") is
# enough to answer (sentences end at 。！？；!?; but not at a full stop, too often inside a name: tf.function). A
# selection question ("which framework for our situation?") asks about the frameworks whatever hardware or team it
# describes, so it is not checked.
_LATIN = re.compile(r"(?<![A-Za-z0-9])[A-Za-z][A-Za-z0-9+]*(?:[.\-][A-Za-z0-9+]+)*")
_SENTENCE_START = re.compile(r"(^|[.!?。！？:：;；]\s*)$")
_SENTENCE = re.compile(r"[^。！？!?；;]+[。！？!?；;]*|[^。！？!?；;]+")
_PROPER = frozenset({"nr", "ns", "nt", "nz", "nrt", "nrfg"})


def subject_terms(question: str) -> list[str]:
    """The names in a question that say what it is about, minus the frameworks, the domain's terms and
    quantities."""
    out: list[str] = []
    for m in _LATIN.finditer(question):
        w = m.group(0)
        if len(w) < 2:
            continue
        start = _SENTENCE_START.search(question[: m.start()]) is not None
        parts = [p for p in w.split("-") if p]
        if len(parts) == 1 and _is_name(w, start):
            out.append(w)
        # a compound is a name when one of its parts is, other than the domain's words: "ONNX-Runtime", "Core-ML"
        # but not "thousand-GPU" or "multi-node" (dev: "thousand-GPU distributed training", article-en-14)
        elif len(parts) > 1 and any(len(p) >= 2 and _is_name(p, start and i == 0) and not _domain_word(p)
                                    for i, p in enumerate(parts)):
            out.append(w)
    out += _chinese_names(question)
    return [t for t in dict.fromkeys(out) if not _domain_word(t)]


def _is_name(word: str, sentence_start: bool) -> bool:
    return (any(c.isupper() for c in word[1:]) or any(c.isdigit() for c in word)
            or (word[0].isupper() and not sentence_start))


def _chinese_names(text: str) -> list[str]:
    if not has_cjk(text):
        return []
    import jieba.posseg as pseg

    from ..text import jieba_tokenizer

    jieba_tokenizer()  # the project's words (飞桨, 张量并行 ...) first
    words = [(w, flag) for w, flag in pseg.lcut(text) if w.strip()]
    # the noun an interrogative pronoun governs is what is asked for, not a name: "切分了哪些东西" (东西 is tagged a
    # place name)
    return [w for i, (w, flag) in enumerate(words) if flag in _PROPER and len(w) >= 2 and has_cjk(w)
            and not (i and words[i - 1][1] == "r")]


def _domain_word(term: str) -> bool:
    low = term.lower()
    return bool(find_frameworks(term)) or low in _DOMAIN_SET or any(low in t.split() for t in _DOMAIN_TERMS)


_PRICE_WORD = {"zh": "价格", "en": "prices"}


def uncovered_subjects(question: str, hits: list[Hit], known: Callable[[str], bool] | None = None) -> list[str]:
    """The subject terms of a question no retrieved passage names (in its text, title, heading path or file
    name; a concept term's other-language forms count) and, when `known` is given, the documents do not name
    anywhere, when every sentence of the question has one; else []."""
    sentences = [t for t in _SENTENCE.findall(question) if t.strip()]
    per = [subject_terms(t) for t in sentences]
    asked = [PRICE.search(t) for t in sentences]
    if not any(per) and not any(asked):
        return []
    text = " ".join(" ".join([h.chunk.source, h.chunk.headings, *h.chunk.frameworks, h.chunk.text])
                    for h in hits).lower()
    missing = [[t for t in terms if not any(_names(v, text) for v in [t, *expand_terms(t)])
                and not (known is not None and known(t))] for terms in per]
    # what a sentence asks for can itself be missing: a price, which no passage states
    price = _PRICE_WORD[detect_language(question)]
    missing = [m + [price] if a and not PRICE_STATED.search(text) else m for m, a in zip(missing, asked, strict=True)]
    if not all(missing):
        return []
    return list(dict.fromkeys(t for m in missing for t in m))


def _names(term: str, text: str) -> bool:
    low = term.lower()
    if has_cjk(low):
        return low in text
    return re.search(r"(?<![a-z0-9])" + re.escape(low) + r"(?![a-z0-9])", text) is not None


def has_domain_term(text: str) -> bool:
    low = text.lower()
    return any(t in low for t in _DOMAIN_TERMS if not t.isascii()) or any(
        re.search(r"(?<![a-z])" + re.escape(t) + r"(?![a-z])", low) for t in _DOMAIN_TERMS if t.isascii())


OFF_SUBJECT = {
    "zh": "抱歉，现有文档没有讲到“{missing}”，我无法据此回答。",
    "en": "Sorry, the documents I have do not cover {missing}, so I cannot answer this.",
}
NEARBY = {"zh": "文档中相近的内容有：{nearby}。", "en": "Nearby, they cover: {nearby}."}


def refusal_text(reason: str, lang: str, missing: tuple[str, ...] = (), nearby: tuple[str, ...] = ()) -> str:
    """The refusal sentence in `lang`; for an off-subject question it names the missing subject and, when given,
    what the documents cover nearby (the retrieved passages' titles)."""
    lang = lang if lang in REFUSAL else "en"
    if reason == "prompt_leak":
        return PROMPT_LEAK[lang]
    if reason != "off_subject" or not missing:
        return REFUSAL[lang]
    sep = "、" if lang == "zh" else ", "
    text = OFF_SUBJECT[lang].format(missing=sep.join(missing))
    if nearby:
        text += (" " if lang == "en" else "") + NEARBY[lang].format(
            nearby=sep.join(f"《{t}》" if lang == "zh" else f"\"{t}\"" for t in nearby))
    return text
