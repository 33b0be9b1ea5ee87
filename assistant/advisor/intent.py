"""Selection intent by wording alone: is a question asking which framework to choose (or how candidates compare for
a use), rather than a fact about one framework? `is_selection_question(text, lang)` decides with the named patterns
of assistant/lexicon.py, no model. The router (assistant/route.py) decides a question's kind from its classifier over
the embedder's vectors and asks these rules only where the classifier is unsure, or when no embedder is available.

Strong markers ("选哪个", "怎么选", "which framework", "should we use", "X or Y for Z") decide alone. Weak markers
("用什么", "适合", "what can we use", "what should we do") count only when the question describes the asker's own
situation ("我们", "团队", "we", "our"), because fact questions use them too ("飞桨的移动端部署用什么？").
A documentation "is recommended for" is not a request for a recommendation. This module does not parse the
situation itself (it asks scenario.py) and does not rank (rubric.py).

A question that states the asker's own situation in two or more of the Advisor's fields (hardware, stage, model size,
team, organisation, the team's stack, a domain, a deployment goal), names no framework other than the team's own and
asks something is a selection question too, however it is worded ("……训练这块怎么搞？", "what's the plan for us?"): a
fact question names what it asks about.
"""
from __future__ import annotations

from .. import lexicon
from ..frameworks import find_frameworks


def is_within_choice(text: str) -> bool:
    """A choice among one framework's own options ("其中哪个插件…", "which ZeRO stage…"): a fact question."""
    return lexicon.WITHIN.search(text)


def describes_own_situation(text: str) -> bool:
    """The asker states their own situation in two or more of the Advisor's fields, names no framework but the ones
    the team knows, and asks something: a selection question whatever its wording."""
    from .scenario import BASE_GOALS, parse_free_text  # noqa: PLC0415 (scenario imports nothing of intent's)

    if not lexicon.SELF.search(text) or not lexicon.ASKS.search(text):
        return False
    sc = parse_free_text(text)
    if any(f not in sc.known_frameworks for f in find_frameworks(text)):
        return False
    signals = [sc.hardware, sc.stage, sc.model_scale, sc.team_size, sc.org, sc.known_frameworks or None,
               None if sc.domain == "general" else sc.domain, [g for g in sc.goals if g in BASE_GOALS] or None]
    return sum(1 for v in signals if v) >= 2


def is_selection_question(text: str, lang: str | None = None) -> bool:
    """True when `text` asks which framework to choose or how frameworks compare for a use (zh or en)."""
    low = text.lower().strip()
    if not low:
        return False
    if is_within_choice(low):
        return False
    stripped = lexicon.PASSIVE.compiled.sub(" ", low)
    if lexicon.CHOOSE_ZH.search(stripped) or lexicon.CHOOSE_EN.search(stripped):  # mixed-language: both apply
        return True
    if len(find_frameworks(text)) >= 2 and lexicon.COMPARE.search(low):
        return True  # "JAX or PyTorch for PDEs?", "PaddlePaddle 还是 PyTorch"
    weak = lexicon.SUITS_ZH.search(stripped) or lexicon.SUITS_EN.search(stripped)
    return (weak and lexicon.SELF.search(low)) or describes_own_situation(text)
