"""The wording patterns the product still reads, in one place, each named with the dev case it came from: in a
question, a question of eval/'s dev sets (listed in assistant/route_phrasings.jsonl); in an answer's sentence, the dev
answer or hand check it was found in, with that sentence (`example`). tests/test_route.py checks that each pattern
matches its case.

What kind a question is (a fact, a selection) is decided by the router (assistant/route.py) from a classifier over
the embedder's vectors; these patterns only settle the cases it is unsure of, stand in for it when no embedder is
available, and find what a question asks for beyond its kind: several items, the reference article, a pronoun
for the framework of the turn before. No pattern comes from the blind split (eval/test/).
"""
from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Wording:
    """A named pattern, searched in lower-cased text; `case` is the dev case it came from (`example`: the answer
    sentence, for a pattern read in answers; the question, for a case outside the router's phrasings)."""

    name: str
    pattern: str
    case: str
    example: str = ""

    def search(self, text: str) -> bool:
        return self.compiled.search(text.lower()) is not None

    @property
    def compiled(self) -> re.Pattern[str]:
        return _compile(self.pattern)


_CACHE: dict[str, re.Pattern[str]] = {}


def _compile(pattern: str) -> re.Pattern[str]:
    if pattern not in _CACHE:
        _CACHE[pattern] = re.compile(pattern, re.IGNORECASE)
    return _CACHE[pattern]


# ---- asks which framework to choose ---------------------------------------------------------------------------
# A strong marker decides alone (when the classifier is unsure): "选哪个", "怎么选", "which framework", "should we use".
CHOOSE_ZH = Wording("choose_zh", (
    r"选哪(个|一个|种|家)|选什么|怎么选|如何选|该怎么选|选型|推荐(什么|哪|用|一下|一个|个)|哪个框架|什么框架|哪种框架|"
    r"用哪(个|种|一个)(框架|工具|方案|库|技术栈|好|比较好|更好)?[？?！!。]*$|应该选|该选|选择哪|哪个(更|比较)?(好|合适|适合)|哪(个|种)更|要不要(换|转|改用)|值得(换|转)|"
    r"(框架|工具|方案|技术栈)(该|应该)?(用|选)(什么|哪)|用什么(框架|工具|方案|技术栈|库)|"
    r"(框架|库|工具|技术栈)(和|与|跟|加)?(框架|库|工具)?(该|应该)?(怎么|如何)(搭|组合|配)|"
    r"用哪(个|种|一个)(框架|库|工具|方案|技术栈).{0,12}(最|更|比较|好|合适|稳|效率)"), "sel-zh-01")
CHOOSE_EN = Wording("choose_en", (
    r"which (framework|stack|library|tool|toolkit|one|option|plugin|of (them|these|the two))\b.{0,40}"
    r"(should|would|to use|to choose|is (the )?best|fits?|suits?|do you recommend|is better)|"
    r"\b(which|what) (framework|stack|training stack)s?\b|"
    r"\bshould (we|i) (use|choose|pick|go with|start with|switch|adopt|stick with)|"
    r"\b(best|right|better|ideal|recommended) (framework|stack|choice|option|tool)s? (for|to)\b|"
    r"\b(do|would|can) you recommend|\brecommend (me|us|a|one|something)\b|\bwhat (do|would) you (recommend|suggest)|"
    r"\bwhich is (better|best|more suitable)|\bwhat should (we|i) (choose|use|pick|go with)|"
    r"\b(your |a |any )?recommendations?\s*[?？]\s*$|"
    r"\bwhich should (we|i)\b|\b(what|which) (should|would|do) (you|we|i) (start|train|build|go|begin)( \w+)? (with|in|on)\b"),
    "sel-en-03")
# A weak marker counts only with the asker's own situation (SELF): fact questions use it too ("飞桨的移动端部署用什么？").
SUITS_ZH = Wording("suits_zh", r"用什么|适合|合适|能用|该用|应该用|怎么办|怎么做|有什么(建议|推荐)|建议", "sel-zh-08")
SUITS_EN = Wording("suits_en", r"\bwhat (can|could) (we|i) use|\bwhat should (we|i) do|\bfits?\b|\bsuit(s|able)?\b|"
                   r"\bgood choice|\badvice\b|\bhow (do|should|can) (we|i) (train|choose|pick)", "sel-en-07")
SELF = Wording("self", r"我们|我司|我|团队|公司|项目|组里|实验室|\bwe\b|\bour\b|\bus\b|\bi\b|\bmy\b|\bi'm\b|\bwe're\b",
               "sel-en-05")
# asks something (a question, not a statement)
ASKS = Wording("asks", r"[?？]|什么|哪|怎么|如何|吗|呢|\b(what|which|how|should|would|could|can)\b", "sel-zh-01")
# two named frameworks weighed against each other: "JAX or PyTorch for PDEs?", "PaddlePaddle 还是 PyTorch"
COMPARE = Wording("compare", r"\bor\b|\bvs\.?\b|\bversus\b|还是|对比|比较|哪个|\bbetter\b|更好|更适合|compared? (to|with)|相比",
                  "sel-en-27")
# after a recommendation, a framework it did not recommend asked about in its place ("Why not PyTorch?" after JAX,
# "为什么不用 TensorFlow？" after PyTorch): the two weighed for the same situation
INSTEAD = Wording("instead", (
    r"\bwhy (?:not|isn't|is not|wasn't|don't|didn't|shouldn't|wouldn't|won't)\b|\binstead\b|\brather than\b|"
    r"\b(?:what|how) about\b|为什么不|为啥不|怎么不|不行吗|不行么|不可以吗|不考虑|而不是|不选|不用|换成|改用|"
    r"(?:用|选).{0,40}(?:可以|行|好)吗"), "selfu-en-09#1 (its turn before decides, so not among the phrasings)",
                  "Why not PyTorch?")
# asks a question of its own, beyond "what if" / "what about": a wh-word, "吗", or an English yes/no question's
# auxiliary ("How do we install it on a TPU VM?"); a follow-up that only changes the situation asks none of these
# ("如果明年要上线到生产环境呢？", "What if it must run on domestic Ascend NPUs?")
OWN_QUESTION = Wording("own_question", (
    r"什么|哪|怎么|怎样|如何|多少|为什么|为何|吗|\b(?:how|which|who|whose|where|when|why)\b|\bwhat\b(?!\s+(?:if|about)\b)|"
    r"^\W*(?:(?:and|so|but|then)\s+)?(?:do|does|did|is|are|was|were|can|could|will|would|should|shall|may|must|has|have)\b"),
    "selfu-en-15#2", "How do we install it on a TPU VM?")
# a documentation "is recommended for" is not a request for a recommendation
PASSIVE = Wording("passive", r"\b(is|are) recommended\b|推荐的", "fact-en-11")
# a choice inside one framework ("其中哪个适合……" after "Colossal-AI 有哪些 booster 插件？", "which ZeRO stage fits"):
# a fact about that framework's options, not a choice between frameworks
# (the parts of an API, "数组的哪个属性" / "which attribute": docs-dev-zh-05)
WITHIN = Wording("within", r"其中|哪(个|一个|种)\s*(插件|策略|阶段|模式|接口|并行方式|配置|参数|版本|属性|方法|函数|选项|命令|"
                 r"环境变量|stage|api|plugin)|"
                 r"\bwhich (of (its|the) )?([\w-]+ )?(plugin|strategy|stage|mode|api|option|setting|parallelism|version|"
                 r"attribute|method|function|argument|flag|command|environment variable)s?\b",
                 "fu-zh-06#1")
# asks what to use or for a recommendation, in any words: with an unsure classifier, such a question goes to the
# Advisor, whose answer carries its reason and citation ("千亿参数预训练用什么？")
WHAT_TO_USE = Wording("what_to_use", (
    r"选什么|选哪|用什么(框架|方案|组合|技术栈)|用什么\s*[？?。]?\s*$|推荐|适合|应该选|怎么选|选型|哪个框架|which framework|"
    r"should we|should i|recommend|choose|best (framework|choice|option)|what to use|pick"), "rec-zh-02")

# ---- what the question asks for beyond its kind ---------------------------------------------------------------
# several items (a list, a comparison, "which ... are"): the larger evidence budget and the prompt's hint
SEVERAL = Wording("several", (
    r"哪些|哪几|几(个|种|类|点|项|步|大|方面|阶段|部分|层)|分别|区别|差异|异同|不同之处|对比|比较|相比|优缺点|优劣|列举|各自|"
    r"\b(what|which) (are|were)\b|\blist\b|\bcompar(e|es|ed|ing|ison)\b|\bdifferen(ce|ces|t)\b|\bversus\b|\bvs\.?(?=\s)|"
    r"\bpros and cons\b|\b(each|both)\b|\bhow many\b|\b(main|key) (\w+ )?(\w+s)\b"), "fact-en-01")
# points at the reference article itself ("文章里……", "according to the article")
ARTICLE = Wording("article", r"文章|文中|这篇|原文|the article|this article", "fact-zh-02")
# "the guide": the reference article ("according to the guide"), or a framework's own guide ("with Megatron Core, what
# does the guide prefer ..."); the router takes it for the article only when retrieval ranks an article passage first
GUIDE = Wording("guide", r"\bthe guide\b", "article-en-01",
                "What are the drawbacks and benefits of static graphs versus dynamic graphs according to the guide?")
# a pronoun standing for the framework of the turn before ("它的分布式 API 叫什么？", "What is its distributed API?")
PRONOUN_ZH = Wording("pronoun_zh", r"它们|它的|它|其|该框架|这个框架|那个框架|这个库|后者|前者|这两者|两者", "fu-zh-01#1")
PRONOUN_EN = Wording("pronoun_en", r"\b(it|its|it's|they|their|them|this framework|that framework|this one|that one|"
                     r"the latter|the former|both)\b", "selfu-en-01#1")

# ---- asks for something the documents never state -------------------------------------------------------------
# a price (the near-domain kinds: "prices"; the documents state none): what a run, a plan or a contract costs
# in money. A cost in memory or communication is not a price ("communication cost", "学习成本")
PRICE = Wording("price", (
    r"多少钱|价格|收费|定价|售价|报价|费用(是|要|大概|大约)?多少|"
    r"\bprices?\b|\bpricing\b|\bcosts? (per|a|an) (year|month|hour|gpu)|\bfees?\b|\bsubscription\b|\bin (dollars|usd|rmb)\b|"
    r"\bhow much (does|do|would|will|did) .{0,80}\bcost\b(?!\s+(in|of)\s+(memory|speed|time|throughput|communication|"
    r"compute|performance|accuracy))"),
    "nd-zh-04")
# the same in a passage: a passage that speaks of prices covers a question that asks for one (no document does)
PRICE_STATED = Wording("price_stated", r"多少钱|价格|收费|定价|售价|报价|\bprices?\b|\bpricing\b|\bfees?\b",
                       "nd-zh-04, the passages' side", "The price is 3 dollars an hour.")

# ---- read in an answer's sentences (answer/citations.py) --------------------------------------------------------
# a claim about what "the article" says, including "based on the article's criteria" (the prompt names them, but a
# reader who opens a note's [n] finds no criteria of the article there)
ARTICLE_CLAIM = Wording("article_claim", r"文章|文中|原文|\b(?:the|this) article\b",
                        "eval/handcheck/support-2026-11-30-s4.json",
                        "Based on the article's criteria, we should choose TensorFlow.")
# a sentence about the user's own situation: the question's words, not a passage's claim
USER_SITUATION = Wording("user_situation", (
    r"^(?:(?:the|your|our) (?:project|team|hardware|stage|budget|situation|use case|requirements?)(?: stage)?\b.{0,40}?"
    r"\b(?:is|are|has|have|was|includes?|consists?)\b|you (?:are|have) (?:a|an|only|limited|already|\d)|the user\b|"
    r"(?:你们|您|你)的?(?:团队|项目|公司|硬件|需求|情况)(?:是|有|在|正在|目前|只有|主要|处于)|(?:你们|您)(?:目前|正在|只有|主要|处于)|"
    r"(?:项目阶段|硬件环境|团队规模|你的情况|您的情况|用户的?情况)(?:是|为|处于|仅|只有))"),
    "sel-en-02 (the model's answer)", "The project stage is early, and the hardware is limited to 64 GPUs.")

# a negated statement ("lacks", "does not support", "不支持", "没有"), read in answers' sentences and passages: a claim
# that denies what its passage states plainly is the passage's words turned round (the citation check). Not
# negations: "not only", 不同/不断/不少/不仅/不但/不过/不妨/不错/不久 (different, continually, many, not only, however,
# might as well, good, soon), 无缝/无论 (seamless, whatever), 非常 (very), 未来 (future)
NEGATION = Wording("negation", (
    r"\bnot\b(?! only)|\b(?:no|never|none|neither|nor|cannot|lacks?|lacking|without|unable|unsupported)\b|n't\b|"
    r"不(?![同断少仅但过妨错久])|没有|没|无(?![缝论])|非(?!常)|未(?!来)|缺乏|缺少"),
    "dev fact-zh-17 (the model's answer); a question kept out of the evaluation sets",
    "DeepSpeed 提供了流水线并行训练，对 GPU 总数没有要求。")

ALL = (CHOOSE_ZH, CHOOSE_EN, SUITS_ZH, SUITS_EN, SELF, ASKS, OWN_QUESTION, COMPARE, INSTEAD, PASSIVE, WITHIN, WHAT_TO_USE,
       SEVERAL, ARTICLE, GUIDE, PRONOUN_ZH, PRONOUN_EN, ARTICLE_CLAIM, USER_SITUATION, PRICE, PRICE_STATED, NEGATION)


def asks_for_several(question: str) -> bool:
    """The question asks for a list or a comparison ("有哪些……", "区别", "What are the stages ...", "X vs Y")."""
    return SEVERAL.search(question)


def refers_to_article(text: str) -> bool:
    """The question points at the reference article itself ("文章里……", "according to the article"), or may
    ("according to the guide")."""
    return ARTICLE.search(text) or GUIDE.search(text)


def has_pronoun(text: str) -> bool:
    """The text has a pronoun that stands for a framework of the turn before ("它的", "its", "the latter")."""
    return PRONOUN_ZH.search(text) or PRONOUN_EN.search(text)
