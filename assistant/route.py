"""The router: what a question is, decided once per question; every other step reads the `Route`.

A Route holds the standalone question (the follow-up rewrite, from the stored turn before: its standalone question
and the frameworks it recommended, never the chat's rendered text), the question's kind ("fact", "selection" or
"out_of_scope"), the situation it states (the Advisor's parser over the conversation's user turns), the frameworks
it names and the Advisor's candidates it compares, and whether it asks for several items or points at the reference
article (then only the pinned article is the answer's evidence). The refusal policy's decision (answer/policy.py)
rides along: a refused question is "out_of_scope".

The kind: a classifier over the embedder's vector of the standalone question (assistant/kinds.py; the retriever
already embedded it) says how likely a selection it is. Sure either way (P >= SURE, or P < UNSURE), it decides;
between the two, the wording rules decide (advisor/intent.py over assistant/lexicon.py), and a question that asks
what to use without naming a framework goes to the Advisor, whose answer carries its reason and citation. Without an
embedder the wording rules decide alone. A choice among one framework's own options ("其中哪个插件…") is a fact
whatever the classifier says; a follow-up to a selection that only changes the situation ("如果只有 NVIDIA GPU 呢？",
read in the user's words) is a selection among the candidates the turn before compared, and so is one that asks about
another framework in place of the recommended one ("Why not PyTorch?"): the two are then the candidates it compares.

Owns the rewrite, the kind and what the session store keeps of a turn for the next one (`remembered`). Does not
retrieve, refuse (policy.decide) or answer.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from . import lexicon
from .advisor.intent import is_selection_question
from .advisor.scenario import BASE_GOALS, Scenario, parse_free_text, situation_from_turns
from .answer.policy import Decision, RefusalThresholds, decide
from .answer.selection import CANDIDATE_OF
from .frameworks import find_frameworks, names_only, said_of, spoken
from .kinds import KindClassifier
from .text import said_as
from .types import Hit

FACT, SELECTION, OUT_OF_SCOPE = "fact", "selection", "out_of_scope"
SURE = 0.5  # P(selection) at or above which the classifier alone says "selection"
UNSURE = 0.2  # below it, the classifier alone says "fact"; between the two the wording decides


@dataclass(frozen=True)
class Turn:
    """What the router reads of the turn before (the session store's `extra` of its answer, `remembered`)."""

    question: str
    standalone: str = ""
    kind: str = ""
    recommended: tuple[str, ...] = ()  # the frameworks a selection answer recommended
    compared: tuple[str, ...] = ()  # the Advisor's candidates its question weighed against each other

    @classmethod
    def from_message(cls, question: str, stored: dict[str, Any]) -> Turn:
        r = stored.get("route") or {}
        return cls(question, stored.get("standalone_question") or question, r.get("kind", ""),
                   tuple(r.get("recommended") or ()), tuple(r.get("compared") or ()))


@dataclass(frozen=True)
class Route:
    question: str                  # the user's words (injected instructions stripped)
    standalone: str                # after the follow-up rewrite
    kind: str                      # FACT | SELECTION | OUT_OF_SCOPE
    situation: Scenario            # the conversation's situation, as the Advisor parses it
    frameworks: tuple[str, ...]    # named in the standalone question
    compared: tuple[str, ...]      # the Advisor's candidates it weighs against each other (two or more), else ()
    several: bool                  # asks for several items (a list, a comparison)
    article: bool                  # points at the reference article ("according to the article")
    decision: Decision = field(default_factory=lambda: Decision(False, "ok"))  # the refusal policy's
    selection_probability: float | None = None  # the classifier's; None without an embedder
    decided_by: str = "classifier"  # "classifier" | "wording" | "within" | "follow-up"

    @property
    def selection(self) -> bool:
        return self.kind == SELECTION


def remembered(route: Route, recommended: list[str] | None = None) -> dict[str, Any]:
    """What the session store keeps of this turn for the next one's rewrite and kind."""
    return {"kind": route.kind, "recommended": find_frameworks(" ".join(recommended or [])),
            "compared": list(route.compared)}


# ---- the follow-up rewrite ------------------------------------------------------------------------------------
def standalone_question(question: str, previous: Turn | None, earlier_user_turns: list[str]) -> str:
    """A standalone question: a pronoun ("它的", "its") stands for the framework of the turn before (the one its
    selection answer recommended, else the ones its standalone question named, else an earlier user turn's), or,
    without a pronoun, the question is prefixed with it. A question that names its own framework is left alone, but
    for one that is only a framework's name: the question before, asked of that framework."""
    if previous is not None and names_only(question):  # "And TensorFlow?", "飞桨呢？": the question before, of it
        asked = said_of(previous.standalone, find_frameworks(question))
        if asked is not None:
            return asked
    if (previous is None and not earlier_user_turns) or find_frameworks(question):
        return question
    names = list(previous.recommended) if previous is not None else []
    turns = ([previous.standalone] if previous is not None else []) + list(reversed(earlier_user_turns))
    for text in turns if not names else []:
        names = find_frameworks(text)
        if names:
            break
    if not names:
        return question
    subject = spoken(names, question)
    zh, en = lexicon.PRONOUN_ZH.compiled, lexicon.PRONOUN_EN.compiled
    if zh.search(question):
        return zh.sub(lambda m: said_as(m.group(0), subject), question, count=1)
    if en.search(question):
        return en.sub(lambda m: said_as(m.group(0), subject), question, count=1)
    return f"{subject}: {question}"


# ---- the kind -------------------------------------------------------------------------------------------------
# the situation fields whose change, said after a recommendation, asks for another one
_CHANGES_A_CHOICE = {"hardware", "stage", "model_scale", "team_size", "known_frameworks", "goals"}


def kind_of(standalone: str, asked: str, lang: str, previous: Turn | None = None,
            probability: float | None = None) -> tuple[str, str]:
    """(FACT or SELECTION, what decided it) for a question the policy did not refuse; `probability` is the
    classifier's P(selection), None without one."""
    if lexicon.WITHIN.search(asked) or lexicon.WITHIN.search(standalone):
        return FACT, "within"
    if probability is None:
        sel, by = is_selection_question(standalone, lang), "wording"
    elif probability >= SURE:
        sel, by = True, "classifier"
    elif probability >= UNSURE:
        sel = is_selection_question(standalone, lang) or (
            lexicon.WHAT_TO_USE.search(standalone) and not lexicon.PASSIVE.search(standalone)
            and not find_frameworks(standalone))
        by = "wording"
    else:
        sel, by = False, "classifier"
    if sel and asks_about_a_framework(standalone):
        sel, by = False, "about a framework"
    if not sel and previous is not None and previous.kind == SELECTION:
        # "what if we had TPUs?" after a recommendation: the situation changed
        if changes_the_situation(asked):
            return SELECTION, "follow-up"
        # "Why not PyTorch?" after JAX: the two weighed for the same situation (`instead_of`)
        if instead_of(standalone, previous):
            return SELECTION, "follow-up"
    return (SELECTION if sel else FACT), by


def changes_the_situation(asked: str) -> bool:
    """The user's own words (before the rewrite named the recommended framework in them) only change the situation
    of the choice before: they name no framework but one the team is said to know, state a field the choice reads and
    ask no question of their own ("如果只有 NVIDIA GPU 呢？", "What if it must run on domestic Ascend NPUs?", "要是团队只会
    TensorFlow 呢？"; not "How do we install it on a TPU VM?", which states hardware and asks how to install)."""
    return (not names_a_candidate(asked) and not lexicon.OWN_QUESTION.search(asked)
            and bool(parse_free_text(asked).stated() & _CHANGES_A_CHOICE))


def names_a_candidate(text: str) -> bool:
    """The text names a framework other than those it says the team knows (which are the situation, not a choice)."""
    return bool(set(find_frameworks(text)) - set(parse_free_text(text).known_frameworks))


def instead_of(question: str, previous: Turn | None) -> tuple[str, ...]:
    """The Advisor's candidates a follow-up weighs against the recommendation before it: the recommended ones and the
    ones the question asks about in their place ("Why not PyTorch?", "为什么不用 TensorFlow？", "What about JAX?"; a
    stack and its base are two: "Why not just plain PyTorch?" after PyTorch + DeepSpeed); () when the turn before
    recommended nothing or the question asks of no other candidate so."""
    if previous is None or previous.kind != SELECTION or not previous.recommended:
        return ()
    recommended = _candidates(previous.recommended)
    others = [c for c in _candidates(find_frameworks(question)) if c not in recommended]
    if not others or not lexicon.INSTEAD.search(question):
        return ()
    return tuple(dict.fromkeys([*recommended, *others]))


def _candidates(frameworks: list[str] | tuple[str, ...], stack_as_one: bool = True) -> list[str]:
    """The Advisor's candidates some frameworks stand for, in order; with `stack_as_one` a stack is one ("PyTorch",
    "DeepSpeed" -> "PyTorch + DeepSpeed", not also PyTorch alone)."""
    names = list(dict.fromkeys(CANDIDATE_OF[f] for f in frameworks if f in CANDIDATE_OF))
    return [c for c in names if not (stack_as_one and any(c != d and c in d for d in names))]


def asks_about_a_framework(question: str) -> bool:
    """The question asks about a framework it names, not which to use: it asks something, says nothing of the asker
    (no "we", "我们", no situation the Advisor's parser reads: frameworks known, stage, hardware, scale, team, goals)
    and asks neither what suits nor which of two ("Megatron-FSDP 兼容哪些框架或库？", "Which deep learning framework
    does Megatron-LM require?"). The classifier reads "框架" / "framework" as a choice; the question's frameworks and
    the asker's silence say otherwise. Hardware, a model size, a domain or a framework's feature said without the
    asker describe what the documents measured or set up as much as a situation ("Megatron-LM 在 H100 集群上最高能达到
    多少 MFU？462B 参数模型……", docs-dev-zh-08): only what the asker can say of themselves counts (`_of_the_asker`)."""
    if not find_frameworks(question) or not lexicon.ASKS.search(question):
        return False
    if any(w.search(question) for w in (lexicon.SELF, lexicon.WHAT_TO_USE, lexicon.SUITS_ZH, lexicon.SUITS_EN,
                                         lexicon.COMPARE)):
        return False
    return not _of_the_asker(parse_free_text(question))


# what only the asker can say of themselves: the frameworks they know, their project's stage, their team and
# organisation, and the goals of their product (BASE_GOALS: localisation, mobile, server)
_ASKER_FIELDS = {"known_frameworks", "stage", "team_size", "org", "experience"}


def _of_the_asker(situation: Scenario) -> bool:
    return bool(situation.stated() & _ASKER_FIELDS) or any(g in BASE_GOALS for g in situation.goals)


def compared_candidates(question: str, known: list[str] | tuple[str, ...] = ()) -> tuple[str, ...]:
    """The Advisor's candidates a question weighs against each other ("JAX or PyTorch for PDEs?"), two or more. A
    framework named as what the team knows (`known`, the situation's) is background, not one of them, while two
    others are named ("a team that knows TensorFlow: PaddlePaddle or PyTorch?")."""
    names = _candidates(find_frameworks(question), stack_as_one=False)
    background = _candidates(known, stack_as_one=False)
    asked = [c for c in names if c not in background]
    return tuple(asked) if len(asked) >= 2 else tuple(names) if len(names) >= 2 else ()


def route(question: str, standalone: str, lang: str, hits: list[Hit], *, previous: Turn | None = None,
          user_turns: list[str] | None = None, vector: np.ndarray | None = None,
          classifier: KindClassifier | None = None, known: Callable[[str], bool] | None = None,
          pinned_dense: float = 0.0, article_pinned: bool = False,
          thresholds: RefusalThresholds | None = None) -> Route:
    """The question's Route. `vector`: the standalone question's query embedding (Retriever.query_vector), read by
    `classifier`; `hits`, `known`, `pinned_dense`: what the refusal policy weighs (policy.decide)."""
    p = classifier.selection_probability(vector) if classifier is not None and vector is not None else None
    kind, by = kind_of(standalone, question, lang, previous, p)
    # "the guide" is the article only when retrieval, which favours the article for it, still ranks an article
    # passage first; otherwise it is a framework's guide ("with Megatron Core, what does the guide prefer ...")
    article = lexicon.ARTICLE.search(standalone) or (
        lexicon.GUIDE.search(standalone) and bool(hits) and hits[0].chunk.is_article)
    decision = decide(standalone, hits, thresholds, known=known, choosing=kind == SELECTION, pinned_dense=pinned_dense,
                      about_pinned=article and article_pinned)
    if decision.refuse:
        kind = OUT_OF_SCOPE
    situation = situation_from_turns([*(user_turns or []), question])
    situation.lang = lang
    if kind == SELECTION and previous is not None and previous.kind == SELECTION and not names_a_candidate(question):
        # the choice asked again for a new situation ("如果只有 NVIDIA GPU 呢？"): among the candidates weighed before,
        # and in the user's words (the rewrite's prefix named the framework recommended before, now one candidate)
        compared = previous.compared
        if not lexicon.has_pronoun(question):
            standalone = question
    else:
        compared = instead_of(standalone, previous) or compared_candidates(standalone, situation.known_frameworks)
    return Route(question, standalone, kind, situation, tuple(find_frameworks(standalone)),
                 compared, lexicon.asks_for_several(standalone),
                 article, decision, p, by)
