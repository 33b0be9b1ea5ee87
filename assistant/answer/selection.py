"""Selection answers: a question that asks which framework to choose is answered from the Advisor's ranking.

Owns what the chat shows for such a question, given the Advisor's typed `Advice` (assistant/advisor/advice.py):
- the situation the answer assumes, as parsed from the conversation: a lead-in line, never cited (it is the
  user's own words, not a claim);
- the first sentence: the recommendation (or a plain tie and what decides it), citing the passage that states
  the guidance it follows; written here from the Advisor's cited facts, so it streams before the model runs;
- the deciding reasons: phrased by the model from the ranking's cited facts only (`messages`), then checked like
  every answer; a kept sentence that says more than the facts it cites (a verdict, the user's situation, words of
  no cited fact) is shown as those facts in the Advisor's words (`faithful_reasons`); where none of the model's
  sentences survives, the Advisor's own cited facts are used;
- what would change the choice (the Advisor's re-run with one field changed), cited.
Does not decide that a question is a selection (the router, assistant/route.py), rank (advisor/rubric.py) or check support
(citations.py); the service sequences the steps.
"""
from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..advisor.advice import Advice, RankedCandidate, Reason, Situation
from ..frameworks import find_frameworks, names_only
from ..text import cjk_count, content_terms, join_sentences, split_sentences
from ..types import Chunk, Citation, Hit, Numbering
from .citations import CitationChecker, citation_record, is_factual, parse_markers, renumber
from .prompt import ANSWER_IN, ANSWER_LAST, SYSTEM_PROMPT, defuse_fences, format_source
from .prompt import Source as PromptSource

# a framework named in a question -> the Advisor's candidate it stands for (the router's Route.compared)
CANDIDATE_OF = {"PyTorch": "PyTorch", "TensorFlow": "TensorFlow", "PaddlePaddle": "PaddlePaddle", "JAX": "JAX",
                "DeepSpeed": "PyTorch + DeepSpeed", "Megatron-LM": "PyTorch + Megatron-LM", "Colossal-AI": "Colossal-AI"}
_LEAD = {"zh": "推荐 {name}：{claim}", "en": "We recommend {name}: {claim}"}
_TIE = {"zh": "{names} 在你的情况下打平，取决于：{choices}", "en": "{names} tie for your situation; it depends: {choices}"}
_CHOOSE = {"zh": "若{claim_lc}，选 {name}", "en": "choose {name} if {claim_lc}"}
_CHANGE_LEAD = {"zh": "什么会改变这个选择——", "en": "What would change the choice:"}
_AGAINST_LEAD = {"zh": "为什么不选 {name}：", "en": "Why not {name}:"}
# nothing the sources say counts against a compared candidate: what the recommendation has that it does not match
_BEHIND_LEAD = {"zh": "为什么不选 {name}：资料里没有对它不利的事实，但 {top} 在这一点上胜过它：",
                "en": "Why not {name}: nothing in the sources counts against it here, but {top} leads it on this point:"}
_ARTICLE_PREFIX = re.compile(r"^(?:文章[：:]\s*|The article:\s*)")


@dataclass
class SelectionPlan:
    """Everything the selection answer needs before the model runs."""

    lang: str
    situation: str            # the lead-in line ("For your situation (...):"), not a claim, never cited
    lead: str                 # the first sentence, with its [n]
    recommended: list[str]    # candidate names the first sentence recommends (two or more on a tie)
    reasons: list[tuple[str, int]]  # the Advisor's deciding facts: (claim, passage number)
    change: tuple[str, list[int], str] | None  # what would change the choice, the passages and the fact behind it
    sources: list[PromptSource]  # the cited passages, numbered as in the answer
    against: list[tuple[str, str, int]] = field(default_factory=list)  # a compared candidate not recommended: (the
    # lead-in, "Why not X:", the fact that counts against it for this situation or, when none does, the point the
    # recommendation leads it on, passage number)
    citations: dict[int, Citation] = field(default_factory=dict)  # the deterministic sentences' citations
    advice: dict[str, Any] = field(default_factory=dict)  # the Advice's JSON, as the answer carries it (Answer.advice)


def plan(advice: Advice, passage: Callable[[str], Chunk | None], lang: str) -> SelectionPlan:
    """The selection answer's parts from the Advisor's result (ranked among the candidates the question compares,
    when it compares some); `passage` looks a chunk up by id."""
    ranking = advice.ranking
    records = {c.n: c for c in advice.citations}
    numbers: Numbering[int] = Numbering()  # the Advice's passage number -> the answer's
    sources: list[PromptSource] = []
    citations: dict[int, Citation] = {}

    def cite(reason: Reason) -> int:
        old = reason.citations[0]
        if old not in numbers:
            rec = records[old]
            chunk = passage(rec.chunk_id)
            if chunk is None:
                return 0
            n = numbers.number(old)
            sources.append(PromptSource(n, Hit(chunk, rec.support, rec.support), reason.text))
            citations[n] = citation_record(sources[-1], reason.evidence, rec.support)
        return numbers[old]

    top = ranking[0]
    tied = [r for r in ranking if top.score - r.score < advice.margin.tie_epsilon][:3]
    if len(tied) >= 2:
        lead, recommended = _tie_lead(advice, tied, cite, lang)
        led = {c.text for d in (advice.tie.decides if advice.tie else []) for c in d.choose_if[:1]}
    else:
        lead, recommended = _recommend_lead(top, cite, lang)
        g = _guidance(top.reasons)
        led = {g.text} if g else set()
    reasons: list[tuple[str, int]] = []
    for r in top.reasons:
        if r.points > 0 and r.text not in led and len(reasons) < 3:
            n = cite(r)
            if n:
                reasons.append((_claim(r), n))  # the citation shows it is the article; the prefix goes
    against: list[tuple[str, str, int]] = []
    # what counts against the recommendation too (the same criterion, the same passage) says nothing of the other
    shared = {(x.criterion, tuple(x.citations)) for x in top.reasons if x.points < 0}
    for other in ranking[1:] if advice.compared else []:  # "JAX or PyTorch?", "Why not PyTorch?": what counts against it
        if other.name in recommended:
            continue
        worst = min((x for x in other.reasons if x.points < 0 and (x.criterion, tuple(x.citations)) not in shared),
                    key=lambda x: x.points, default=None)
        if worst is not None and (n := cite(worst)):
            against.append((_AGAINST_LEAD[lang].format(name=other.name), _claim(worst), n))
        elif (ahead := _leads_on(top, other)) is not None and (n := cite(ahead)):
            against.append((_BEHIND_LEAD[lang].format(name=other.name, top=top.name), _claim(ahead), n))
    change = None
    for ch in advice.what_would_change:
        if ch.new_top in recommended or not ch.reasons:
            continue
        n = cite(ch.reasons[0])
        if n:
            change = (ch.text, [n], _claim(ch.reasons[0]))
            break
    return SelectionPlan(lang, situation_line(Situation.from_dict(advice.scenario), lang), lead, recommended, reasons, change,
                         sources, against, citations, advice.to_dict())


def _leads_on(top: RankedCandidate, other: RankedCandidate) -> Reason | None:
    """The recommendation's reason that puts it furthest ahead of `other`: the most points above what `other` scores
    on the same criterion (nothing, or a weaker fact), then the most points ("Why not PyTorch?" for a Chinese NLP
    product: the article's "if Chinese-language scenarios matter, PaddlePaddle deserves a close look")."""
    def best(criterion: str) -> float:
        return max((x.points for x in other.reasons if x.criterion == criterion and x.points > 0), default=0.0)

    ahead = [(r.points - best(r.criterion), r.points, r) for r in top.reasons if r.points > best(r.criterion)]
    return max(ahead, key=lambda a: a[:2])[2] if ahead else None


def _claim(reason: Reason) -> str:
    """What the passage says, as one claim: without the "The article:" prefix (the citation shows the source), and,
    for a team fact ("Your team already knows PyTorch; the article names the team's stack ... first"), without the
    clause that restates the user's situation: the situation line shows it, and no passage states it."""
    text = _ARTICLE_PREFIX.sub("", reason.text).strip()
    if reason.criterion == "team":
        _, sep, tail = text.partition("；" if "；" in text else "; ")
        if sep and tail.strip():
            text = tail.strip()
    text = text.replace("；", "，")  # one sentence ("A；B[n]" splits, and its first half would stand uncited)
    # a sentence of its own ("if the model ..." -> "If the model ..."); an API stays as written ("tf.function 中 ...")
    return text[:1].upper() + text[1:] if re.match(r"[a-z][a-z'’-]*(?![\w.(])", text) else text


def _guidance(reasons: list[Reason]) -> Reason | None:
    """The reason that states the guidance the recommendation follows: the strongest positive one from the article
    that says something of this candidate, else the strongest positive one. A team fact ("the article names the
    team's stack as the first consideration") leads only when nothing else does: it is about every candidate, so
    "We recommend X: <it>" says nothing of X that its passage states; it follows as a reason of its own."""
    pos = [r for r in reasons if r.points > 0]
    article = sorted((r for r in pos if "article" in r.source), key=lambda r: r.criterion == "team")
    return (article or pos)[0] if article or pos else None


def _recommend_lead(top: RankedCandidate, cite: Callable[[Reason], int], lang: str) -> tuple[str, list[str]]:
    g = _guidance(top.reasons)
    if g is None:
        return (f"推荐 {top.name}。" if lang == "zh" else f"We recommend {top.name}."), [top.name]
    claim = _claim(g)
    if "article" in g.source and not re.match(r"(?:文章|the article)", claim, re.IGNORECASE):
        claim = ("文章指出，" + claim) if lang == "zh" else "the article says " + _lower_first(claim)
    else:
        claim = _lower_first(claim)
    n = cite(g)
    claim = claim.replace("；", "，").replace("; ", ", ")  # one sentence, so that its [n] is the first sentence's
    return _end(_LEAD[lang].format(name=top.name, claim=claim), n), [top.name]


def _tie_lead(advice: Advice, tied: list[RankedCandidate], cite: Callable[[Reason], int],
              lang: str) -> tuple[str, list[str]]:
    decides = {d.candidate: d.choose_if for d in (advice.tie.decides if advice.tie else [])}
    parts = []
    for r in tied:
        chosen = decides.get(r.name)
        reason = chosen[0] if chosen else _guidance(r.reasons)
        if reason is None:
            continue
        n = cite(reason)
        text = _CHOOSE[lang].format(name=r.name, claim_lc=_lower_first(_claim(reason).rstrip("。.")))
        parts.append(f"{text}[{n}]" if n else text)
    names = ("、" if lang == "zh" else " and ").join(r.name for r in tied)
    sep = "；" if lang == "zh" else "; "
    return _TIE[lang].format(names=names, choices=sep.join(parts)) + ("。" if lang == "zh" else "."), [r.name for r in tied]


def _lower_first(text: str) -> str:
    """"Official builds ..." -> "official builds ..."; a name stays ("TensorFlow's ...", "JAX", "Megatron-LM")."""
    word = re.match(r"[A-Za-z][A-Za-z'’\-]*", text)
    return text[:1].lower() + text[1:] if word and not any(c.isupper() for c in word.group(0)[1:]) else text


def _end(sentence: str, n: int) -> str:
    """The sentence with its [n] before the final stop."""
    sentence = sentence.rstrip()
    stop = sentence[-1] if sentence[-1:] in "。.!?！？" else ""
    body = sentence[:-1] if stop else sentence
    return f"{body}[{n}]" + (stop or ("。" if cjk_count(body[-3:]) else "."))


_STAGE = {"zh": {"research": "研究阶段", "prototype": "原型验证阶段", "production": "生产阶段"},
          "en": {"research": "research", "prototype": "a prototype", "production": "production"}}
_HARDWARE = {"zh": {"cpu": "只有 CPU", "tpu": "TPU", "npu": "国产 NPU", "few_gpus": "少量 GPU", "gpu_cluster": "GPU 集群"},
             "en": {"cpu": "CPU only", "tpu": "TPUs", "npu": "NPUs", "few_gpus": "a few GPUs", "gpu_cluster": "a GPU cluster"}}
_DOMAIN = {"zh": {"chinese_nlp": "中文 NLP", "nlp": "NLP", "cv": "计算机视觉", "scientific": "科学计算", "rl": "强化学习",
                  "llm_pretrain": "大模型预训练", "llm_finetune": "大模型微调", "recommendation": "推荐系统"},
           "en": {"chinese_nlp": "Chinese NLP", "nlp": "NLP", "cv": "computer vision", "scientific": "scientific computing",
                  "rl": "reinforcement learning", "llm_pretrain": "LLM pre-training", "llm_finetune": "LLM fine-tuning",
                  "recommendation": "recommender systems"}}
_ORG = {"zh": {"startup": "初创团队", "lab": "实验室", "enterprise": "企业"}, "en": {"startup": "a start-up", "lab": "a lab",
                                                                              "enterprise": "an enterprise"}}
_GOAL = {"zh": {"localisation": "国产化", "mobile": "移动端部署", "server": "线上服务"},
         "en": {"localisation": "localisation", "mobile": "mobile deployment", "server": "serving"}}


def situation_line(sc: Situation, lang: str) -> str:
    """The situation the answer assumes, in the user's language: a lead-in, not a claim."""
    zh = lang == "zh"
    parts: list[str] = []
    if sc.team_size:
        parts.append(f"{sc.team_size} 人" + ("的" + _ORG["zh"][sc.org] if sc.org else "团队") if zh
                     else f"a team of {sc.team_size}" + (f" ({_ORG['en'][sc.org]})" if sc.org else ""))
    elif sc.org:
        parts.append(_ORG[lang][sc.org])
    if sc.known_frameworks:
        known = "、".join(sc.known_frameworks) if zh else " and ".join(sc.known_frameworks)
        parts.append(f"熟悉 {known}" if zh else f"knows {known}")
    if sc.stage:
        parts.append(_STAGE[lang][sc.stage])
    if sc.accelerators and sc.hardware in ("few_gpus", "gpu_cluster"):
        kind = sc.accelerator or "GPU"
        n = sc.accelerators
        parts.append(f"{n} 张 {kind}" if zh else f"{n} GPU{'s' if n > 1 else ''}" if kind == "GPU" else f"{n} × {kind}")
    elif sc.hardware:
        parts.append(_HARDWARE[lang][sc.hardware])
    if sc.params:
        parts.append(f"{_scale(sc.params, zh)}参数的模型" if zh else f"a {_scale(sc.params, zh)}-parameter model")
    if sc.domain and sc.domain != "general":
        parts.append(_DOMAIN[lang].get(sc.domain, sc.domain))
    parts += [_GOAL[lang][g] for g in sc.goals if g in _GOAL[lang]]
    if not parts:
        return ("按一般情况（没有说明团队、阶段和硬件，补充这些会让推荐更准）：" if zh else
                "For a general case (no team, stage or hardware was given; adding them sharpens the advice):")
    return (f"按你描述的情况（{'、'.join(parts)}）：" if zh else f"For your situation ({', '.join(parts)}):")


def _scale(params: float, zh: bool) -> str:
    """7e10 -> "70B" (en) / "700 亿" (zh)."""
    if zh:
        return f"{params / 1e8:g} 亿" if params >= 1e8 else f"{params / 1e4:g} 万"
    for unit, size in (("T", 1e12), ("B", 1e9), ("M", 1e6)):
        if params >= size:
            return f"{params / size:g}{unit}"
    return f"{params:g}"


def messages(p: SelectionPlan, question: str) -> list[dict[str, str]]:
    """The prompt: the Advisor's cited facts as the only sources; the model writes the reasons."""
    facts = [PromptSource(n, p.sources[n - 1].hit, claim) for claim, n in p.reasons]
    body = "\n".join(format_source(s) for s in facts)
    names = " / ".join(p.recommended)
    if p.lang == "zh":
        task = (f"推荐已经写好：{names}。请用 2 到 3 句话说明理由，只使用上面的事实，每句后标注它的 [n]。"
                "不要复述问题或用户的情况，不要提其他框架。")
    else:
        task = (f"The recommendation is already written: {names}. In 2 or 3 short sentences give the reasons, using only "
                "the facts above, each followed by its [n]. Do not restate the question or the user's situation; "
                "do not name other frameworks.")
    parts = [ANSWER_IN[p.lang], f"<sources>\n{body}\n</sources>", f"Question: {defuse_fences(question)}", task,
             ANSWER_LAST[p.lang]]
    return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": "\n\n".join(parts)}]


# A model reason may restate its fact in other words, not add to it: the 1.5B model's kept sentences that the eval's
# judge rejected on the dev selection set added a verdict ("so you should choose X"), merged in the
# user's situation or joined words of no cited fact. Such a sentence's passage may still score above the support
# floor, since the fact's words are in it; so it is measured against the facts it cites, within one language.
NOVELTY_MAX = 0.25  # share of a sentence's content words that none of its cited facts (or the names) has
_VERDICT = re.compile(r"\b(?:should|recommend\w*|choose|chosen|best|ideal|perfect|go with|right choice)\b"
                      r"|推荐|应该|应当|首选|最适合|最好|建议|更适合|最佳", re.IGNORECASE)


def _content_terms(text: str) -> set[str]:
    """Content words, English plurals folded ("graphs" is "graph")."""
    return {t[:-1] if t.isascii() and len(t) > 3 and t.endswith("s") and not t.endswith("ss") else t
            for t in content_terms(text)}


def faithful_reasons(text: str, p: SelectionPlan, complete: bool = True) -> tuple[str, list[str]]:
    """The checked model text without the factual sentences that add to the facts they cite and without a sentence
    that is only a name, then (when `complete`, i.e. the answer was not stopped) every deciding fact that no kept
    sentence restates, in the Advisor's words. Returns the text and the sentences that gave way. (The selection check makes no passage quotes,
    answering/choose.py, so every kept sentence is the model's.)"""
    by_n: dict[int, list[str]] = {}
    for claim, n in p.reasons:
        by_n.setdefault(n, []).append(claim)
    names = _content_terms(" ".join(p.recommended))
    out: list[str] = []
    shown: set[str] = set()  # facts a kept sentence restates
    replaced: list[str] = []
    for sentence in split_sentences(text):
        plain, nums = parse_markers(sentence)
        if names_only(plain):  # "TensorFlow." between two reasons: the lead already names the recommendation
            continue
        if not nums or not is_factual(plain):
            out.append(sentence)
            continue
        basis = [c for n in dict.fromkeys(nums) for c in by_n.get(n, [])]
        terms = _content_terms(plain) - names
        new = terms - _content_terms(" ".join(basis))
        verdict = bool(_VERDICT.search(plain)) and not any(_VERDICT.search(c) for c in basis)
        if basis and not verdict and len(new) <= NOVELTY_MAX * max(1, len(terms)) and _same_subject(plain, basis, p):
            out.append(sentence)
            shown.add(max(basis, key=lambda c: len(terms & _content_terms(c))))  # the fact it restates
            continue
        replaced.append(plain)
    if complete:
        out.extend(_end(claim, n) for claim, n in p.reasons if claim not in shown)
    return join_sentences([x.strip() for x in out]), replaced


def _same_subject(sentence: str, basis: list[str], p: SelectionPlan) -> bool:
    """The frameworks a sentence names are those its cited facts name (or, for facts that name none, the
    recommendation): "PaddlePaddle supports distributed training through torch.distributed [PyTorch's fact]" has
    every word of its fact, yet moves it to another framework."""
    named = set(find_frameworks(sentence))
    allowed = set(find_frameworks(" ".join(basis))) or set(find_frameworks(" ".join(p.recommended)))
    for name in p.recommended:  # "PyTorch + DeepSpeed suits ..." on DeepSpeed's fact; not the other side of a tie
        stack = set(find_frameworks(name))
        if stack & allowed:
            allowed |= stack
    return named <= allowed


@dataclass
class SelectionResult:
    text: str
    citations: list[Citation]
    diagnostics: dict[str, Any]
    sources: list[Hit]  # the cited passages, in the answer's numbering


def finish(p: SelectionPlan, raw: str, checker: CitationChecker, user_text: str,
           stopped: bool = False) -> SelectionResult:
    """The answer: situation, lead, the model's reasons that the check keeps (the Advisor's facts when none is
    kept, unless the user stopped the answer: then only what was shown), and what would change the choice (not
    after a stop); citations renumbered in order of appearance."""
    checked = checker.check(raw, p.sources, user_text=user_text) if raw.strip() else None
    kept = checked.text if checked is not None and checked.supported_sentences else ""
    replaced: list[str] = []
    if kept and checked is not None:
        kept, replaced = faithful_reasons(kept, p, complete=not stopped)
    model_reasons = bool(kept) and checked is not None and len(replaced) < checked.supported_sentences
    citations = dict(p.citations)
    if kept:
        for c in checked.citations if checked else []:
            citations[c.n] = c
        body = kept
    elif stopped:
        body = ""
    else:
        body = " ".join(_end(claim, n) for claim, n in p.reasons) if p.lang == "en" else "".join(
            _end(claim, n) for claim, n in p.reasons)
    sep = " " if p.lang == "en" else ""
    text = p.lead + (sep + body if body else "")
    for lead, fact, n in [] if stopped else p.against:  # a compared candidate: the lead-in, then the fact
        text += "\n\n" + lead + "\n\n" + _end(fact, n)
    if p.change and not stopped:  # the Advisor's inference as a lead-in, then the cited fact it rests on
        change_text, nums, fact = p.change
        text += "\n\n" + _CHANGE_LEAD[p.lang] + sep + change_text.rstrip("。.") + ("：" if p.lang == "zh" else ":") \
            + "\n\n" + _end(fact, nums[0])  # a paragraph of its own: the fact is one sentence, the lead-in another
    text = p.situation + "\n\n" + text
    text, cites = renumber(text, citations.values(), only_cited=True)
    by_chunk = {s.hit.chunk.id: s.hit for s in p.sources}
    diagnostics = {"selection": {"recommended": p.recommended, "model_reasons": model_reasons,
                                 "removed_sentences": checked.removed_sentences if checked else [],
                                 "replaced_by_facts": replaced},
                   "raw_answer": raw, "factual_sentences": checked.factual_sentences if checked else 0,
                   "supported_sentences": checked.supported_sentences if checked else 0}
    return SelectionResult(text, cites, diagnostics, [by_chunk[c.chunk_id] for c in cites if c.chunk_id in by_chunk])
