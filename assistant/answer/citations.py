"""Citations you can trust: parse [n], drop numbers that point at no source, check every factual
sentence against the passages, keep supported citations, attach the best-supported source where the
model cited nothing or cited wrongly, and drop sentences no source supports.

Support of a sentence by a passage = max over the passage's sentences (a code block read with the sentence before it,
which says what it is for) of
    0.55 * cosine(multilingual embedding) + 0.45 * term overlap (share of the sentence's content terms,
    expanded across languages, found in the passage sentence),
minus 0.5 x the share of the sentence's specific terms (numbers, API names such as torch.compile, acronyms
such as FSDP, framework names) that the passage (with its page title and headings) does not contain in any
language: a sentence that reuses a passage's words but adds a version number or the wrong framework is the small
model's usual invention.
A sentence that restates the question (half its words or more are the question's) is also scored with the term
overlap of what it adds: the share of its new words in the passage sentence, capped by the share of all its words
that the sentence's new words and the passage (with its headings) hold, and only against a passage about every
framework the question names; the better of the two scores counts. A paraphrased question's words are not the page's.
A negated sentence ("lacks", "没有要求") scores 0.3 less against each passage sentence that negates nothing
(`lexicon.NEGATION`): the passage's words with their sense turned round.
The model (1.5B) rarely cites by itself (shared/notes/models.md), so alignment does the real work.

A kept sentence that nearly copies one passage sentence is shown in the passage's own words (`_quote`): the small
model's remaining errors keep a passage's words and shift their meaning, which no similarity score can see.
"""
from __future__ import annotations

import dataclasses
import functools
import re
from collections.abc import Iterable
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field

import numpy as np

from ..embed import Embedder
from ..frameworks import (
    CONCEPTS,
    FRAMEWORKS,
    expand_terms,
    find_frameworks,
    frameworks_of,
    names_only,
    sentence_frameworks,
)
from ..lang import detect_language
from ..lexicon import ARTICLE_CLAIM, NEGATION, USER_SITUATION
from ..text import (
    CITATION_NUMBER,
    LIST_ITEM,
    citation_marks,
    cjk_count,
    content_terms,
    is_code_block,
    item_body,
    join_sentences,
    outside_code,
    resolve_pronoun,
    rewrite,
    split_sentences,
    starts_with_pronoun,
    tokenize,
)
from ..types import SNIPPET_MAX, Citation, Numbering
from .prompt import INSTRUCTION_LINES, Source

# A citation marker: "[1]", "[1, 2]", "【1】", "[1], [2]" (the commas go too). At most 6 digits a number: a longer one is
# no source number, and int() refuses more than 4,300 digits (a ValueError out of the check). Not a marker: a
# bracket that holds a 0 (sources are numbered from 1: "x[0]" indexes), one right after "=" ("shape=[4,8]") and one
# inside a code span ("`dims[1]`"): what the answer states, which the check must keep (text.CITATION: one source's).
_MARK = re.compile(rf"(?<!=)\s*[,，、]?\s*[\[【]\s*({CITATION_NUMBER}(?:\s*[,，、]\s*{CITATION_NUMBER})*)\s*[\]】]")
_LITERAL_MARK = re.compile(r"\s*[\[【]\s*n\s*[\]】]", re.IGNORECASE)  # the instruction's "[n]" copied verbatim
_NUMBER = re.compile(r"(?<![A-Za-z0-9_.-])\d+(?:\.\d+)*")
_IDENT = re.compile(r"(?<![A-Za-z0-9_-])(?:[A-Za-z][A-Za-z0-9_-]*(?:[._][A-Za-z0-9_-]+)+(?:\(\))?"
                    r"|[A-Za-z]*[A-Z][A-Za-z]*\d*[A-Z][A-Za-z0-9_-]*|[A-Z]{2,}\d*)")
_CODE = re.compile(r"`([^`\n]{2,80})`")
_ENUMERATOR = re.compile(r"[（(]\d{1,2}[)）]|(?:^|(?<=[：:，,；;]))\s*\d{1,2}[.、)）](?!\d)")
SPECIFIC_PENALTY = 0.5
ATTRIBUTION_PENALTY = 0.3
SPLICE_PENALTY = 1.0
ELSEWHERE_PENALTY = 1.0  # a claim about frameworks the passage never names: unsupported whatever the wording
POLARITY_PENALTY = 0.3  # a negated claim against a passage sentence that negates nothing: the words turned round
CODE_PENALTY = 1.0  # code in backticks the passage does not contain: what a reader would run is invented
# plain framework names (checked as frameworks, in any spelling); API names such as torch.compile stay specific
_FRAMEWORK_WORDS = ({n.lower() for n in FRAMEWORKS} | {n.lower().replace("-", "") for n in FRAMEWORKS}
                    | {"torch", "paddle", "megatron", "colossal"})
# a lead-in ending in a colon, and what follows it; a list after the colon (1. / - / （1）/ ①) is not split
_LEAD_IN = re.compile(r"^(?P<lead>[^：:`]{4,}?(?:：|:(?=\s)))\s*(?P<rest>\S.{3,})$", re.DOTALL)
# a sentence whose subject is only a pronoun ("这个包名……", "This API ...", "It ...") takes its subject from the
# sentence before; the passage can confirm only the predicate, so such a sentence needs a higher score
# (0.80: of the 25 such sentences in five hand-labelled samples, eval/handcheck/, every supported one scored >= 0.85
# and the unsupported ones up to 0.72 apart from verbatim copies, so 0.70 let some through)
DEICTIC_THRESHOLD = 0.80
RESTATED_SHARE = 0.5  # a sentence at least this much of whose words are the question's restates it
CITED_MARGIN = 0.30  # a cited source scoring this much below the best source gives way to it
# A sentence that is a near-copy of one passage sentence (support >= QUOTE_THRESHOLD) is shown in the passage's own
# words: the small model's remaining errors keep the passage's words and shift their meaning ("recommends" for
# "can use", "It" for the wrong subject, a range read as its ends; hand-checked samples in eval/handcheck/)
QUOTE_THRESHOLD = 0.60
QUOTE_MAX_GROWTH = 2.5  # a short claim ("推荐使用飞桨。") is not replaced by a long passage sentence
_CONTEXT_BOUND = re.compile(r"\b(?:above|below|following|here|these|those|former|latter)\b|如下|以下|上述|下面|下列|上面|前面|前者|后者",
                            re.IGNORECASE)
_LABEL = re.compile(r"^\s*(?:\*\*[^*]{1,40}\*\*\s*[:：]|[-*•]\s+|\d{1,2}[.、)）]\s*)")  # "**Team**:", "- ", "2. "
_FACT_MIN_ZH = 6
_FACT_MIN_EN = 4


@dataclass
class CheckedAnswer:
    text: str
    citations: list[Citation]
    dropped_numbers: list[int] = field(default_factory=list)
    removed_sentences: list[str] = field(default_factory=list)
    quoted_sentences: list[tuple[str, str]] = field(default_factory=list)  # (model's sentence, passage's words)
    factual_sentences: int = 0
    supported_sentences: int = 0


@dataclass(frozen=True)
class Support:
    """How the passages support the sentences: `scores[i, j]` of sentence i by source j; `sentences[j]`, source j's
    sentences; `best[i, j]`, which of them a citation of source j for sentence i shows (its snippet: the closest
    one that also names the sentence's specific terms); `unturned[i, j]`, the score without the polarity penalty (a
    near-copy turned round is still quoted in the passage's words)."""

    scores: np.ndarray
    sentences: list[list[str]]
    best: np.ndarray
    unturned: np.ndarray


def parse_markers(sentence: str) -> tuple[str, list[int]]:
    """The sentence without its [n] markers, and the numbers in order of appearance."""
    nums: list[int] = []
    # until none is left: removing the "[1]" of "[[1]2]" makes a new marker "[2]", which would otherwise stay in the
    # answer as a citation nobody checked
    while True:
        found = outside_code(_MARK, sentence)
        literal = outside_code(_LITERAL_MARK, sentence)
        if not found and not literal:
            return sentence.strip(), nums
        for m in found:
            nums.extend(int(x) for x in re.split(r"[,，、]", m.group(1)) if x.strip())
        sentence = rewrite(sentence, sorted(found + literal, key=lambda m: m.start()), lambda m: "")


def is_factual(sentence: str) -> bool:
    cjk = cjk_count(sentence)
    words = len(re.findall(r"[A-Za-z]+", sentence))
    return cjk >= _FACT_MIN_ZH or words >= _FACT_MIN_EN or (cjk >= 3 and words >= 1)


def _terms(text: str) -> set[str]:
    toks = set(tokenize(text))
    for t in expand_terms(text):
        toks.update(tokenize(t))
    return toks


def specific_terms(sentence: str) -> set[str]:
    """Numbers, API-like identifiers, acronyms and framework names a sentence states (lower case)."""
    terms = set()
    for m in _IDENT.finditer(sentence):
        raw = m.group(0).rstrip(".").removesuffix("()")
        if re.fullmatch(r"[A-Z]{2,}s", raw):  # GPUs, TPUs: the passage may say GPU
            raw = raw[:-1]
        t = raw.lower()
        if t not in _FRAMEWORK_WORDS:  # framework names are checked as frameworks below, in any spelling
            terms.add(t)
    # a bare number is specific (47%, 1.11, stage 3); one glued to a unit (100B, 40GB, 7x) is often written
    # in words in the other language (千亿, 130 亿), so it is left to the similarity score
    plain = _ENUMERATOR.sub(" ", sentence)  # list numbers (（1）, 2.) state nothing
    terms |= {m.group(0) for m in _NUMBER.finditer(plain) if not re.match(r"[A-Za-z]", plain[m.end():m.end() + 1])}
    terms |= {"fw:" + f for f in find_frameworks(sentence)}
    return {t for t in terms if t}


def code_spans(sentence: str) -> set[str]:
    """Code in backticks (`pip install megatron-fsdp`, `--bind_cores_to_rank`), lower case, spaces collapsed."""
    return {" ".join(m.group(1).split()).lower().removesuffix("()") for m in _CODE.finditer(sentence)}


def _found(term: str, low: str, frameworks: set[str]) -> bool:
    if term.startswith("fw:"):
        return term[3:] in frameworks
    if term in low:
        return True
    last = term.rsplit(".", 1)[-1]  # tf.distribute.MirroredStrategy where the passage says MirroredStrategy
    if last != term and len(last) >= 4 and last in low:
        return True
    for group in CONCEPTS:  # the same concept named in the other language counts
        if term in group and any(g in low for g in group):
            return True
    return False


def missing_share(sentence_terms: set[str], passage: str, frameworks: set[str]) -> float:
    """Share of a sentence's specific terms that the passage lacks; `frameworks` are those the passage is about
    (its chunk's tags and the ones its text names)."""
    if not sentence_terms:
        return 0.0
    low = passage.lower()
    return sum(not _found(t, low, frameworks) for t in sentence_terms) / len(sentence_terms)


class CitationChecker:
    def __init__(self, embedder: Embedder, threshold: float = 0.40, drop_unsupported: bool = True,
                 deictic_threshold: float = DEICTIC_THRESHOLD, quote_threshold: float | None = QUOTE_THRESHOLD) -> None:
        self.embedder = embedder
        self.threshold = threshold
        self.deictic_threshold = max(threshold, deictic_threshold)
        self.drop_unsupported = drop_unsupported
        self.quote_threshold = quote_threshold  # None: never replace the model's wording

    def support_matrix(self, sentences: list[str], sources: list[Source],
                       subjects: list[set[str]] | None = None) -> tuple[np.ndarray, list[list[str]]]:
        """support[i, j] of sentence i by source j, and each source's sentences (`support`'s scores and
        sentences)."""
        found = self.support(sentences, sources, subjects)
        return found.scores, found.sentences

    def support(self, sentences: list[str], sources: list[Source], subjects: list[set[str]] | None = None,
                question: str = "") -> Support:
        """How each source supports each sentence. subjects[i]: the frameworks a label before sentence i made its
        subject ("PaddlePaddle: <sentence>"). `question`: what the answer answers; a sentence that restates it
        (`RESTATED_SHARE` of its words are the question's) is also scored on what it adds (`_added_overlap`)."""
        # checked against the whole passage a citation opens (what the user will read), not only the trimmed
        # evidence the model saw
        texts = [s.hit.chunk.text for s in sources]
        src_sents = [_with_lead_ins(split_sentences(t) or [t]) for t in texts]
        flat = [x for ss in src_sents for x in ss]
        shape = (len(sentences), len(sources))
        if not sentences or not flat:
            return Support(np.zeros(shape), src_sents, np.zeros(shape, dtype=int), np.zeros(shape))
        vecs = self.embedder.passages(sentences + flat)
        sv, pv = vecs[: len(sentences)], vecs[len(sentences):]
        cos = sv @ pv.T
        # the sentence's own terms are the denominator; a term also counts when the passage has it in the
        # other language (the expansions), so expansions can only help a match, never dilute it
        own = [max(1, len(set(tokenize(s)))) for s in sentences]
        sent_terms = [_terms(s) for s in sentences]
        flat_terms = [set(tokenize(x)) for x in flat]
        overlap = np.array([[min(1.0, len(st & ft) / n) for ft in flat_terms]
                            for st, n in zip(sent_terms, own, strict=True)])
        added = _added_overlap(sentences, sent_terms, flat_terms, _passage_terms(sources, src_sents, flat_terms),
                               question) if question else None
        # across languages the two texts share no terms by construction (an English answer from the Chinese article):
        # there the multilingual embedding's similarity stands for both halves
        sent_zh = np.array([detect_language(x) == "zh" for x in sentences])
        flat_zh = np.array([detect_language(x) == "zh" for x in flat])
        crossed = sent_zh[:, None] != flat_zh[None, :]
        overlap = np.where(crossed, np.maximum(overlap, cos), overlap)
        pair = 0.55 * cos + 0.45 * overlap
        support = np.zeros((len(sentences), len(sources)))
        specific = [specific_terms(x) for x in sentences]
        codes = [code_spans(x) for x in sentences]
        fws = [set(s.hit.chunk.frameworks) for s in sources]
        passage_fws = [frameworks_of(t, f) for f, t in zip(fws, texts, strict=True)]  # once per source
        # a term or code the passage's title or headings state is stated for it ("torch.compile" under the page
        # "Introduction to torch.compile")
        headed = [f"{s.hit.chunk.headings} {t}" for s, t in zip(sources, texts, strict=True)]
        penalty = np.array([[missing_share(st, t, f) for f, t in zip(passage_fws, headed, strict=True)]
                            for st in specific])
        best = np.zeros(shape, dtype=int)
        start = 0
        # the snippet shown for a citation is the passage sentence that matches best and also names the
        # sentence's specific terms (stage 2, torch.compile), not merely the most similar one
        claim_fws = [{t[3:] for t in st if t.startswith("fw:")} for st in specific]  # named frameworks
        sent_fws = [f for t, ss in zip(texts, src_sents, strict=True) for f in sentence_frameworks(t, ss)]
        # attribution: a passage sentence about other frameworks only cannot carry a claim about this one
        # ("TensorFlow: mature, for experienced teams" does not support "PaddlePaddle is mature ...")
        other = np.array([[bool(cf and sf and not cf & sf) for sf in sent_fws] for cf in claim_fws], dtype=bool)
        pair = pair - ATTRIBUTION_PENALTY * other
        # polarity: a negated claim against a passage sentence that negates nothing ("TensorFlow lacks a rich model
        # library" beside "a rich model library ... decides"); a near-copy turned round is still quoted (`Support.unturned`)
        negated = np.array([NEGATION.search(x) for x in sentences], dtype=bool)
        plain_flat = np.array([not NEGATION.search(x) for x in flat], dtype=bool)
        turned = POLARITY_PENALTY * (negated[:, None] & plain_flat[None, :])
        unturned = np.zeros(shape)
        own_terms = [{t for t in tokenize(x) if len(t) > 1 or not t.isascii()} for x in sentences]
        asked_fws = set(find_frameworks(question)) if added is not None else set()
        for j, ss in enumerate(src_sents):
            block = pair[:, start : start + len(ss)]
            if added is not None and asked_fws <= passage_fws[j]:
                # the question's words are granted only by a passage about what it asks of: "Paddle uses
                # torch.distributed.elastic ..." (dev fact-en-26) restates a question about Paddle, and a PyTorch
                # passage says the rest
                alt = 0.55 * cos[:, start : start + len(ss)] + 0.45 * added[:, start : start + len(ss)] \
                    - ATTRIBUTION_PENALTY * other[:, start : start + len(ss)]
                block = np.maximum(block, alt)
            # a claim spliced from a sentence about another framework: the share of its words that only
            # such sentences of the passage contain
            terms_j = flat_terms[start : start + len(ss)]
            spliced = np.zeros(len(sentences))
            for i, off in enumerate(other[:, start : start + len(ss)]):
                if off.any():
                    inc = set().union(*(t for t, o in zip(terms_j, off, strict=True) if o))
                    comp = set().union(*(t for t, o in zip(terms_j, off, strict=True) if not o))
                    spliced[i] = len((own_terms[i] & inc) - comp) / max(1, len(own_terms[i]))
            # a passage about other frameworks only, naming none of the claim's, cannot carry it at all
            # ("JAX supports TPUs via TPUClusterResolver" cited to TensorFlow's hardware passage)
            # the same when a label made a framework the claim's subject ("PaddlePaddle: ... your TensorFlow graph")
            elsewhere = np.array([bool(cf and passage_fws[j] and not cf & passage_fws[j])
                                  or bool(subjects and subjects[i] and not subjects[i] & passage_fws[j])
                                  for i, cf in enumerate(claim_fws)])
            flat_text = " ".join(headed[j].split()).lower()
            no_code = np.array([any(c not in flat_text for c in cs) for cs in codes])
            penalties = (SPECIFIC_PENALTY * penalty[:, j] + SPLICE_PENALTY * spliced + ELSEWHERE_PENALTY * elsewhere
                         + CODE_PENALTY * no_code)
            support[:, j] = (block - turned[:, start : start + len(ss)]).max(axis=1) - penalties
            unturned[:, j] = block.max(axis=1) - penalties
            local = np.array([[missing_share(st, x, frameworks_of(x, fws[j])) for x in ss] for st in specific])
            best[:, j] = (block - 0.2 * local).argmax(axis=1)
            start += len(ss)
        return Support(support, src_sents, best, unturned)

    def check(self, answer: str, sources: list[Source], user_text: str = "", question: str = "") -> CheckedAnswer:
        """`user_text`: what the user wrote (the question, with earlier turns); a sentence that restates it or
        describes the user's situation is not a claim any passage can support, and is removed even when cited.
        `question`: what the answer answers; an answer of a word or two ("47%。") is checked said with it."""
        valid = {s.n for s in sources}
        by_n = {s.n: (j, s) for j, s in enumerate(sources)}
        raw: list[str] = []
        subjects: list[set[str]] = []
        leads: set[int] = set()
        for sentence in split_sentences(answer):
            pieces = split_lead_in(sentence)
            label = set(find_frameworks(pieces[0])) if len(pieces) == 2 and len(pieces[0]) <= 40 else set()
            if len(pieces) == 2:
                leads.add(len(raw))
            raw.extend(pieces)
            subjects.extend([set(), label] if len(pieces) == 2 else [set()])
        parsed = [parse_markers(s) for s in raw]
        plain = [p[0] for p in parsed]
        # a piece whose subject is a bare pronoun is also scored said with the framework the piece before names
        resolved = _resolved_pronouns(plain)  # piece -> (the piece before, the piece said so)
        bare = _bare_answers(plain, question)  # piece -> the question with it, read instead of the piece
        said_so = {**{i: said for i, (_, said) in resolved.items()}, **bare}
        rows = {i: len(plain) + k for k, i in enumerate(said_so)}  # the said-so piece's row
        groups = sibling_groups(sources)
        # the sections' outlines are scored beside the passages, in one pass (each sentence embedded once)
        asked = [question] if bare else []  # the question alone, which a bare answer must add to
        found = self.support([item_body(x) for x in plain] + list(said_so.values()) + asked,  # an item without its number
                             sources + [outline_source(sources, g) for g in groups],
                             subjects + [set() for _ in said_so] + [set() for _ in asked], question)
        support, src_sents = found.scores, found.sentences
        for i in bare:  # the question alone may be close to a passage: the answer counts only where it agrees more
            support[rows[i]] = np.where(support[rows[i]] > support[-1], support[rows[i]], 0.0)
        outline: np.ndarray | None = support[:, len(sources):] if groups else None
        support, src_sents = support[:, : len(sources)], src_sents[: len(sources)]
        out_sents: list[str] = []
        placed: list[int] = []
        debris: set[int] = set()  # out_sents that state nothing: a label, an enumerator ("2."), "Sources:"
        spoken, heard = "", 0  # the answer's words so far (`_bare`, of out_sents[:heard]): not said again
        used: dict[int, Citation] = {}
        kept: set[int] = set()  # the pieces kept (supported)
        result = CheckedAnswer("", [])
        for i, (text, nums) in enumerate(parsed):
            result.dropped_numbers.extend(n for n in nums if n not in valid)
            nums = [n for n in dict.fromkeys(nums) if n in valid]
            placed.append(len(out_sents))  # piece i's sentence, if it is kept, is out_sents[placed[i]]
            if not is_factual(text) and i not in bare:
                if re.search(r"\w", text):  # drop debris such as a lone "." left by the model
                    debris.add(len(out_sents))
                    out_sents.append(text)
                continue
            result.factual_sentences += 1
            if restates_user(text, user_text) or repeats_instructions(text):
                result.removed_sentences.append(text)
                continue
            pronoun = starts_with_pronoun(text)
            row = i  # the support matrix's row read for this piece
            if i in bare:  # "Zero 1 和 Zero 2。" read as the question's answer, at the plain bar
                row = rows[i]
            elif i in resolved and resolved[i][0] in kept:
                # its pronoun stands for the one framework of the kept piece before ("PaddlePaddle 由百度主导。它
                # 推出了……"): a claim naming its subject, which the attribution rules check like any other
                row, pronoun = rows[i], False
            bar = self.deictic_threshold if pronoun else self.threshold
            if pronoun and not result.supported_sentences:
                # nothing kept before it names what the pronoun means: the answer "这是……组合" restates the
                # question, and a passage that says it verbatim means the passage's own subject
                bar = float("inf")
            # a cited source far weaker than the best one is not where the claim came from: the citation must
            # open the passage that says it ("[1], [2], [3], [4]" after a note's verbatim sentence kept only [1])
            best = float(support[row].max()) if len(sources) else 0.0
            keep = [n for n in nums if support[row, by_n[n][0]] >= max(bar, best - CITED_MARGIN)]
            if not keep and len(sources):
                j = int(np.argmax(support[row]))
                if support[row, j] >= bar:
                    keep = [sources[j].n]
            # a sentence its section's outline supports better than any one passage lists the section's items
            if (outline is not None and not pronoun and i not in bare
                    and float(outline[row].max()) > (best if keep else -1.0)):
                listed = _listed(text, outline[row], groups, sources, bar)
                if listed:
                    result.supported_sentences += 1
                    kept.add(i)
                    for j, score in listed:
                        if sources[j].n not in used or used[sources[j].n].support < score:
                            used[sources[j].n] = citation_record(sources[j], lead(sources[j].hit.chunk.text), score)
                    marks = "".join(f"[{sources[j].n}]" for j, _ in listed)
                    out_sents.append(text[:-1] + marks + text[-1] if text[-1:] in ":：" else text + marks)
                    continue
            if not keep:
                if not self.drop_unsupported:
                    out_sents.append(text)
                else:
                    result.removed_sentences.append(text)
                continue
            result.supported_sentences += 1
            kept.add(i)
            if ARTICLE_CLAIM.search(text) and not any(by_n[n][1].hit.chunk.is_article for n in keep):
                text = _neutral_attribution(text)
            top = max(keep, key=lambda n: support[row, by_n[n][0]])
            j = by_n[top][0]
            snippet = _snippet(text, src_sents[j], int(found.best[row, j]))  # one or two passage sentences
            chunk = by_n[top][1].hit.chunk
            # a near-copy is shown in the passage's words even when the claim turned them round
            quote = self._quote(text, snippet, float(found.unturned[row, j]), set(chunk.frameworks), chunk.is_article)
            # already said: the model repeated itself, two sentences copied the same passage sentence, or a quote of
            # two passage sentences holds this claim too ("... configuration json*. No code changes are needed.")
            spoken += _bare("".join(out_sents[heard:]))  # what was added since the last sentence's turn
            heard = len(out_sents)
            said = _bare(quote or text)
            if said and said in spoken:
                continue
            if quote and not _LABEL.match(quote):  # a quote of two passage sentences says only what is new
                fresh = [x for x in split_sentences(quote) if _bare(x) not in spoken]
                if not fresh:
                    continue
                quote = " ".join(fresh)
            if quote:
                result.quoted_sentences.append((text, quote))
                mark = text[: len(text) - len(item_body(text))]  # a list item stays one
                text, keep = (quote if quote.startswith(mark) else mark + quote), [top]
            for n in keep:
                j, src = by_n[n]
                score = float(support[row, j])
                if n not in used or used[n].support < score:
                    shown = quote or (snippet if n == top else _snippet(text, src_sents[j], int(found.best[row, j])))
                    used[n] = citation_record(src, shown, score)
            marks = "".join(f"[{n}]" for n in keep)
            out_sents.append(text[:-1] + marks + text[-1] if text[-1:] in ":：" else text + marks)
        placed.append(len(out_sents))
        # a label ("- PipeDream:") whose claim was removed goes too when nothing it could head follows: the answer's
        # end, or another piece that states nothing ("- Torch DDP Plugin: - Hybrid Parallel Plugin: ...")
        labels = {placed[k] for k in leads
                  if placed[k + 1] > placed[k] and placed[k + 2] == placed[k + 1] and placed[k] in debris
                  and (placed[k] + 1 == len(out_sents) or placed[k] + 1 in debris)}
        out_sents = [x for k, x in enumerate(out_sents) if k not in labels]
        if not result.supported_sentences and result.removed_sentences:
            # Nothing survived the check: keep nothing rather than an unsupported answer.
            result.text = ""
        else:
            result.text = join_sentences(out_sents)
        result.citations = [used[n] for n in sorted(used)]
        return result

    def _quote(self, claim: str, passage_sentence: str, score: float, frameworks: frozenset[str] | set[str] = frozenset(),
               is_article: bool = False) -> str:
        """The passage's own words for a claim that nearly copies them, or "" to keep the claim: only a
        self-contained sentence in the claim's language (no table, code, link, list item or bracketed reference
        number, no pronoun or "above" pointing at its neighbours) that is not much longer than the claim and still names every number, API and
        framework the claim names (a claim merged from two sentences is quoted as both, or kept). A label such as
        "**团队**：" stays."""
        if self.quote_threshold is None or score < self.quote_threshold:
            return ""
        label = _LABEL.match(claim)
        body = claim[label.end():] if label else claim
        quote = " ".join(passage_sentence.split())
        parts = split_sentences(quote)
        lang = detect_language(quote)
        if (not quote or _LABEL.match(quote) or "|" in quote or "`" * 3 in quote or "http" in quote or quote[-1] in ":："
                or any(starts_with_pronoun(x) for x in parts) or _CONTEXT_BOUND.search(quote) or not is_factual(quote)
                or (ARTICLE_CLAIM.search(quote) and not is_article)  # the check's own rule for "the article"
                or _MARK.search(quote)  # a reference-list "[1]" would read as one of the answer's citations
                or len(quote) > QUOTE_MAX_GROWTH * max(len(body), 1)
                or lang != detect_language(body)
                or missing_share(specific_terms(body), quote, frameworks_of(quote, frameworks))
                or re.sub(r"\W", "", quote) == re.sub(r"\W", "", body)):
            return ""
        if quote[-1] not in "。！？；.!?;":
            quote += "。" if lang == "zh" else "."
        return (claim[: label.end()] if label else "") + quote


QUOTE_LEAD = {
    "zh": "我没能写出资料能够支持的回答，资料中与问题最接近的原文是：",
    "en": "I could not write an answer the documents support, so here is the passage closest to your question:",
}


# a sentence whose every content term is another text's (at least 4 of them) only echoes that text
ECHO_MIN_TERMS = 4


def _passage_terms(sources: list[Source], src_sents: list[list[str]], flat_terms: list[set[str]]) -> list[set[str]]:
    """For each passage sentence (in `flat_terms`' order), the terms of its whole passage and headings."""
    out: list[set[str]] = []
    for src, ss in zip(sources, src_sents, strict=True):
        held = set(tokenize(src.hit.chunk.headings)).union(*flat_terms[len(out) : len(out) + len(ss)])
        out += [held] * len(ss)
    return out


def _added_overlap(sentences: list[str], sent_terms: list[set[str]], flat_terms: list[set[str]],
                   passage_terms: list[set[str]], question: str) -> np.ndarray | None:
    """overlap[i, k] of sentence i with passage sentence k, read on what sentence i adds to the question, for a
    sentence that restates it (`RESTATED_SHARE` of its words are the question's) and adds something; 0 for any other
    sentence, and None without a question. The share of its new words that passage sentence k holds, capped by the
    share of all its words held by that sentence (the new ones) or by its passage with the headings (`passage_terms`
    [k], the restated ones): what it adds must be in the sentence, and a question the passage never speaks of does
    not pass as restated. A paraphrased question's words are not the page's, and the small model answers by
    restating them ("The gradient reduction buckets in the DeepSpeed example ... are 500M.", dev para-en-03): they
    counted against a claim whose new part the passage states."""
    if not question:
        return None
    asked = _terms(question)
    rows = []
    for s, st in zip(sentences, sent_terms, strict=True):
        own = set(tokenize(s))
        new, given, adds = own - asked, own & asked, st - asked
        if new and len(given) >= RESTATED_SHARE * len(own):
            rows.append([min(len(adds & ft) / len(new), (len(adds & ft) + len(given & pt)) / len(own), 1.0)
                         for ft, pt in zip(flat_terms, passage_terms, strict=True)])
        else:
            rows.append([0.0] * len(flat_terms))
    return np.array(rows).reshape(len(sentences), len(flat_terms))


def echoes(sentence: str, terms: AbstractSet[str]) -> bool:
    """Whether every content term of `sentence` (at least ECHO_MIN_TERMS) is among `terms`: it says nothing but them."""
    own = content_terms(sentence)
    return len(own) >= ECHO_MIN_TERMS and own <= terms


def restates_user(sentence: str, user_text: str) -> bool:
    """True when `sentence` restates the user's words or describes the user's situation (not a sourced claim)."""
    if not user_text:
        return False
    if USER_SITUATION.search(sentence.strip()):
        return True
    return echoes(sentence, _user_terms(user_text))


@functools.lru_cache(maxsize=64)
def _user_terms(user_text: str) -> frozenset[str]:
    """The user's words, tokenized once per text: the check asks for each sentence of an answer."""
    return frozenset(tokenize(user_text))


@functools.cache
def _instruction_terms() -> tuple[frozenset[str], ...]:
    """The instruction lines' terms, read on first use (tokenizing Chinese loads jieba's dictionary: not at import)."""
    return tuple(frozenset(tokenize(line)) for line in INSTRUCTION_LINES)


def repeats_instructions(sentence: str) -> bool:
    """Whether `sentence` echoes one of the prompt's instruction lines (`prompt.INSTRUCTION_LINES`; "The reference
    passages most related to the question: [11], [10]." copies the focus line): no claim of the sources."""
    return any(echoes(sentence, line) for line in _instruction_terms())


def _with_lead_ins(sents: list[str]) -> list[str]:
    """A passage's sentences with each code block read after the sentence before it, which says what the block is."""
    return [f"{sents[i - 1]} {x}" if i and is_code_block(x) else x for i, x in enumerate(sents)]


def _resolved_pronouns(pieces: list[str]) -> dict[int, tuple[int, str]]:
    """For each factual piece whose subject is a bare pronoun ("它……", "It ...") right after a factual piece that
    names exactly one framework: (that piece, the piece said with the framework's name). The check reads the named
    form when that piece was kept; two frameworks before it, or none, leave the pronoun unresolved."""
    out: dict[int, tuple[int, str]] = {}
    before: int | None = None
    for i, text in enumerate(pieces):
        if not is_factual(text):
            continue
        names = find_frameworks(pieces[before]) if before is not None else []
        said = resolve_pronoun(text, names[0]) if len(names) == 1 else None
        if said is not None and before is not None:
            out[i] = (before, said)
        before = i
    return out


def _bare_answers(pieces: list[str], question: str) -> dict[int, str]:
    """When no piece of an answer is a sentence, each piece that still says something other than a framework's name
    ("47%。", "Zero 1 和 Zero 2。", "Meta。") answers `question` in a word, a claim only with the question: (piece, the
    question followed by it). A bare framework name is `pipeline.bare_name`'s (quoted instead, for want of a reason)."""
    if not question or any(is_factual(p) for p in pieces):
        return {}
    return {i: f"{question} {text}" for i, text in enumerate(pieces)
            if not names_only(text) and re.search(r"[^\W_]", _ENUMERATOR.sub(" ", text))}


def quoted_answer(src: Source, sentence: str, lang: str) -> tuple[str, Citation]:
    """One cited sentence that quotes the source verbatim: the fallback when every sentence the model wrote
    was unsupported but retrieval found relevant passages (better than refusing, and nothing is invented).
    The quote's own end mark is dropped so that the answer stays one sentence with its [n]."""
    quote = re.sub(r"[。！？；.!?;:：\s]+$", "", sentence.strip())
    text = f"{QUOTE_LEAD['zh']}“{quote}”[{src.n}]。" if lang == "zh" else f'{QUOTE_LEAD["en"]} "{quote}" [{src.n}].'
    return text, citation_record(src, sentence, 1.0)


def quoted_claim(sentence: str) -> str:
    """What a sentence of an answer claims: for the closest-passage quote (`quoted_answer`) the passage's words, not
    its lead, which says what the answer did rather than what the documents say (its "could not" / "没能" would read
    as a negated claim); any other sentence as it is."""
    for lead in QUOTE_LEAD.values():
        if sentence.startswith(lead):
            return sentence[len(lead):].strip().strip("“”\"。.").strip()
    return sentence


def _bare(text: str) -> str:
    """A sentence's words without marks, spaces or case: what two sentences that say the same thing share."""
    return re.sub(r"\W", "", _MARK.sub("", text)).lower()


def split_lead_in(sentence: str) -> list[str]:
    """"X 有以下四个部分：<another statement>" is two claims, each needing its own support: the small model
    glues a lead-in from one passage to a sentence from another. A colon followed by a list stays whole."""
    m = _LEAD_IN.match(sentence)
    if not m or LIST_ITEM.match(m.group("rest")) or _inside_pair(m.group("lead")):
        return [sentence]
    return [m.group("lead").strip(), m.group("rest").strip()]


def _inside_pair(text: str) -> bool:
    """Whether text ends inside an open quotation, title or parenthesis (“ZeRO: Memory ...”, 《...: ...》, "a: b",
    "代码（即解析：抽象语法树）"): a colon there does not end a claim."""
    return (text.count("“") > text.count("”") or text.count("《") > text.count("》")
            or text.count('"') % 2 == 1 or text.count("「") > text.count("」")
            or text.count("（") > text.count("）") or text.count("(") > text.count(")"))


def _neutral_attribution(text: str) -> str:
    """"The article lists X" cited to a framework note: the fact stands, the attribution does not."""
    text = re.sub(r"\b(?:the|this) article's criteria\b", "these sources", text, flags=re.IGNORECASE)
    text = re.sub(r"(?:这篇)?文章(?:中)?的(?:四个)?标准", "这些资料", text)
    text = re.sub(r"\b(?:the|this) article\b", "the documentation", text, flags=re.IGNORECASE)
    text = re.sub(r"^the documentation", "The documentation", text)
    return re.sub(r"这篇文章|文章|文中|原文", "资料", text)


def _snippet(claim: str, sents: list[str], best: int) -> str:
    """The passage sentence that supports the claim best, plus the one sentence that covers most of what
    the claim says beyond it (a claim often merges two sentences of its source), in document order."""
    specific = specific_terms(claim)
    rest = (set(tokenize(claim)) | specific) - set(tokenize(sents[best])) - {t for t in specific
                                                                              if t in sents[best].lower()}
    if not rest or len(sents) < 2:
        return sents[best]
    gain = [(len(rest & (set(tokenize(x)) | {t for t in rest if t in x.lower()})), k) for k, x in enumerate(sents)
            if k != best]
    g, k = max(gain)
    if g < 2:
        return sents[best]
    return " ".join(sents[m] for m in sorted((best, k)))


def renumber(text: str, citations: Iterable[Citation], only_cited: bool = False) -> tuple[str, list[Citation]]:
    """The answer's citations numbered [1].. in the order the text first cites them (the text's markers with
    them): the one numbering users see, whatever numbers the prompt gave its passages. Citations the text does
    not cite follow in their old order, and a marker of no citation stays as written; `only_cited` (an answer put
    together from parts, where such a marker is a passage that could not be looked up) drops both."""
    by_n = {c.n: c for c in citations}
    order: Numbering[int] = Numbering()
    marks = citation_marks(text)
    for m in marks:
        if int(m.group(1)) in by_n:
            order.number(int(m.group(1)))
    if not only_cited:
        for n in sorted(set(by_n) - set(order)):
            order.number(n)

    def mark(m: re.Match[str]) -> str:
        n = int(m.group(1))
        return f"[{order[n]}]" if n in order else "" if only_cited else m.group(0)

    return rewrite(text, marks, mark), sorted((dataclasses.replace(by_n[n], n=order[n]) for n in order), key=lambda c: c.n)


# ---- a sentence that lists the items of sibling passages ----------------------------------------------------------
# "评价框架主要看计算图管理、分布式训练能力、生态与工具链" names one item from each of three passages under one heading (a list
# cut into one passage per item): no single passage supports it, their outline does. An outline is the lead of
# each passage (its text up to the first colon or sentence end) of a run of consecutive passages with the same
# document and heading path; the sentence cites the passages whose lead it names, two at least.
_LEAD_END = re.compile(r"[：:。！？!?；;\n]")
_LEAD_CHARS = 40
_LISTED_MAX = 6  # passages one listing sentence cites at most


def lead(text: str) -> str:
    """A passage's lead: its words up to the first colon or sentence end, at most 40 characters."""
    flat = " ".join(text.split())
    m = _LEAD_END.search(flat)
    return (flat[: m.start()] if m else flat)[:_LEAD_CHARS].strip()


def _sibling_key(src: Source) -> tuple[str, ...] | None:
    """The section a passage is an item of: its heading path, or its parent's when the passage has a heading of its
    own below a section (a numbered list the chunker cut at its items: "一、核心三要素" > "1. 计算图管理"). Tables have
    none: their rows are passages of their own, and their header is no outline."""
    c = src.hit.chunk
    if c.text.lstrip().startswith("|"):
        return None
    path = (c.source, *c.heading_path)
    return path[:-1] if len(c.heading_path) >= 3 else path


def sibling_groups(sources: list[Source]) -> list[list[int]]:
    """Runs of at least two consecutive sources (as listed and numbered) that are items of one section."""
    groups: list[list[int]] = []
    run: list[int] = []
    for j, src in enumerate(sources):
        key = _sibling_key(src)
        if run and key is not None and key == _sibling_key(sources[run[-1]]) and sources[run[-1]].n + 1 == src.n:
            run.append(j)
            continue
        if len(run) >= 2:
            groups.append(run)
        run = [j] if key is not None else []
    if len(run) >= 2:
        groups.append(run)
    return groups


def outline_source(sources: list[Source], group: list[int]) -> Source:
    """The outline of a run of sibling passages as one source: their leads joined into one sentence."""
    first = sources[group[0]]
    text = "、".join(lead(sources[j].hit.chunk.text) for j in group)
    chunk = dataclasses.replace(first.hit.chunk, text=text)
    return Source(first.n, dataclasses.replace(first.hit, chunk=chunk), text)


def _listed(sentence: str, support: np.ndarray, groups: list[list[int]], sources: list[Source],
            bar: float) -> list[tuple[int, float]]:
    """The sibling passages a sentence lists items of: those of the best-supporting outline (at `bar` or above)
    whose lead shares a term with the sentence, when two or more do; else []."""
    g = int(np.argmax(support))
    if support[g] < bar:
        return []
    words = set(_terms(sentence))
    named = [j for j in groups[g] if words & set(_terms(lead(sources[j].hit.chunk.text)))]
    # the items are the passages with a heading of their own under the section when there are such (its opening
    # passage is cited, not counted): a sentence must name two of them
    depth = min(len(sources[j].hit.chunk.heading_path) for j in groups[g])
    own = [j for j in groups[g] if len(sources[j].hit.chunk.heading_path) > depth]
    items = [j for j in named if j in own] if own else named
    return [(j, float(support[g])) for j in named][:_LISTED_MAX] if len(items) >= 2 else []


def citation_record(src: Source, snippet: str, score: float) -> Citation:
    """The Citation of a source as shown: the snippet is the passage words that support the claim, cut at
    SNIPPET_MAX characters."""
    return Citation.from_chunk(src.n, src.hit.chunk, snippet.strip()[:SNIPPET_MAX], score)


