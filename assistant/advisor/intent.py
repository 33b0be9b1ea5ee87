"""Selection intent: is a question asking which framework to choose (or how candidates compare for a use),
rather than a fact about one framework? `is_selection_question(text, lang)` decides with keyword rules in
Chinese and English, no model, so the chat can route selection questions through the Advisor.

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

import re

from ..frameworks import find_frameworks
from ..lang import detect_language

_STRONG = {
    "zh": (r"选哪(个|一个|种|家)|选什么|怎么选|如何选|该怎么选|选型|推荐(什么|哪|用|一下|一个|个)|哪个框架|什么框架|哪种框架|"
           r"用哪(个|种|一个)(框架|工具|方案|库|技术栈|好|比较好|更好)?[？?！!。]*$|应该选|该选|选择哪|哪个(更|比较)?(好|合适|适合)|哪(个|种)更|要不要(换|转|改用)|值得(换|转)|"
           r"(框架|工具|方案|技术栈)(该|应该)?(用|选)(什么|哪)|用什么(框架|工具|方案|技术栈|库)|"
           r"(框架|库|工具|技术栈)(和|与|跟|加)?(框架|库|工具)?(该|应该)?(怎么|如何)(搭|组合|配)|"
           r"用哪(个|种|一个)(框架|库|工具|方案|技术栈).{0,12}(最|更|比较|好|合适|稳|效率)"),
    "en": (r"which (framework|stack|library|tool|toolkit|one|option|plugin|of (them|these|the two))\b.{0,40}"
           r"(should|would|to use|to choose|is (the )?best|fits?|suits?|do you recommend|is better)|"
           r"\b(which|what) (framework|stack|training stack)s?\b|"
           r"\bshould (we|i) (use|choose|pick|go with|start with|switch|adopt|stick with)|"
           r"\b(best|right|better|ideal|recommended) (framework|stack|choice|option|tool)s? (for|to)\b|"
           r"\b(do|would|can) you recommend|\brecommend (me|us|a|one|something)\b|\bwhat (do|would) you (recommend|suggest)|"
           r"\bwhich is (better|best|more suitable)|\bwhat should (we|i) (choose|use|pick|go with)|"
           r"\b(your |a |any )?recommendations?\s*[?？]\s*$|"
           r"\bwhich should (we|i)\b|\b(what|which) (should|would|do) (you|we|i) (start|train|build|go|begin)( \w+)? (with|in|on)\b"),
}
_WEAK = {
    "zh": r"用什么|适合|合适|能用|该用|应该用|怎么办|怎么做|有什么(建议|推荐)|建议",
    "en": r"\bwhat (can|could) (we|i) use|\bwhat should (we|i) do|\bfits?\b|\bsuit(s|able)?\b|\bgood choice|\badvice\b|"
          r"\bhow (do|should|can) (we|i) (train|choose|pick)",
}
_SELF = r"我们|我司|我|团队|公司|项目|组里|实验室|\bwe\b|\bour\b|\bus\b|\bi\b|\bmy\b|\bi'm\b|\bwe're\b"
_COMPARE = r"\bor\b|\bvs\.?\b|\bversus\b|还是|对比|比较|哪个|\bbetter\b|更好|更适合|compared? (to|with)|相比"
_PASSIVE = r"\b(is|are) recommended\b|推荐的"
# a choice inside one framework ("其中哪个适合……" after "Colossal-AI 有哪些 booster 插件？", "which ZeRO stage fits"):
# a fact about that framework's options, not a choice between frameworks
_WITHIN = (r"其中|哪(个|一个|种)(插件|策略|阶段|模式|接口|并行方式|配置|参数|版本|stage|api|plugin)|"
           r"\bwhich (of (its|the) )?([\w-]+ )?(plugin|strategy|stage|mode|api|option|setting|parallelism|version)s?\b")


def is_within_choice(text: str) -> bool:
    """A choice among one framework's own options ("其中哪个插件…", "which ZeRO stage…"): a fact question."""
    return bool(re.search(_WITHIN, text.lower()))


_ASKS = r"[?？]|什么|哪|怎么|如何|吗|呢|\b(what|which|how|should|would|could|can)\b"


def describes_own_situation(text: str) -> bool:
    """The asker states their own situation in two or more of the Advisor's fields, names no framework but the ones
    the team knows, and asks something: a selection question whatever its wording."""
    from .scenario import BASE_GOALS, parse_free_text  # noqa: PLC0415 (scenario imports nothing of intent's)

    low = text.lower()
    if not re.search(_SELF, low) or not re.search(_ASKS, low):
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
    first = lang if lang in ("zh", "en") else detect_language(text)
    langs = tuple(dict.fromkeys((str(first), "zh", "en")))  # mixed-language questions: both rule sets apply
    if is_within_choice(low):
        return False
    stripped = re.sub(_PASSIVE, " ", low)
    if any(re.search(_STRONG[lg], stripped) for lg in langs):
        return True
    if len(find_frameworks(text)) >= 2 and re.search(_COMPARE, low):
        return True  # "JAX or PyTorch for PDEs?", "PaddlePaddle 还是 PyTorch"
    weak = any(re.search(_WEAK[lg], stripped) for lg in langs)
    return (weak and re.search(_SELF, low) is not None) or describes_own_situation(text)
