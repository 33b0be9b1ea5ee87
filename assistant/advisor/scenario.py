"""A team's situation as the Advisor sees it: the `Scenario` dataclass and a keyword parser for free text.

The article's four questions map to fields: what the team knows (`known_frameworks`), the project's stage
(`stage`), the hardware (`hardware`) and the long-term goals (`goals`). Model size, data size and the
application domain refine them. `parse_free_text` fills the fields from a Chinese or English description
with plain keyword rules (no model), and also derives "feature" goals such as `long_sequence` or
`memory_limited` that rubric facts can test. Accelerator counts and team sizes come from quantities.py;
the hardware bucket follows the count (few_gpus: 1-8, one machine; gpu_cluster: 9 or more, several machines).
`merge_situation` folds a conversation: a situation parsed from the turns so far plus a new message, later
statements overriding earlier ones. This module does no scoring and no retrieval.
"""
from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Any

from ..errors import UserError
from ..frameworks import canonical, find_frameworks
from ..lang import detect_language
from .quantities import accelerator_count, accelerator_kind, cn_number, gpu_memory_gb, team_size

STAGES = ("research", "prototype", "production")
HARDWARE = ("cpu", "few_gpus", "gpu_cluster", "tpu", "npu")
DOMAINS = ("chinese_nlp", "nlp", "cv", "scientific", "rl", "recommendation", "llm_pretrain", "llm_finetune", "general")
ORGS = ("startup", "lab", "enterprise")
EXPERIENCE = ("experienced", "beginner")
FEW_GPUS_MAX = 8  # up to one 8-GPU machine is "few_gpus"; more accelerators span machines: "gpu_cluster"
BASE_GOALS = ("localisation", "mobile", "server")
FEATURE_GOALS = ("long_sequence", "moe", "fp8", "heterogeneous_memory", "memory_limited", "few_code_changes",
                 "debugging", "functional", "end_to_end_pipeline", "industry_support", "chinese_docs", "model_parallel")


@dataclass
class Scenario:
    known_frameworks: list[str] = field(default_factory=list)
    stage: str | None = None
    hardware: str | None = None
    model_scale: str | None = None
    data_scale: str | None = None
    domain: str = "general"
    goals: list[str] = field(default_factory=list)
    text: str = ""
    lang: str = "en"
    accelerators: int | None = None   # how many GPUs/TPUs/NPUs, when the text gives a count
    accelerator: str | None = None    # the named model: "A100", "RTX 3090", "TPU v4", "Ascend 910B"
    team_size: int | None = None
    org: str | None = None            # startup | lab | enterprise
    experience: str | None = None     # experienced | beginner (the team's engineering experience)

    def stated(self) -> set[str]:
        """The situation fields the text set (a domain other than "general", a list not empty): what the asker said of
        their own situation; `text` and `lang` are not part of it."""
        return {name for name, value in asdict(self).items()
                if name not in ("text", "lang") and value and not (name == "domain" and value == "general")}

    @property
    def params(self) -> float | None:
        """Model size in parameters, parsed from `model_scale` ("7B", "300M", "千亿", "1750 亿")."""
        return parse_scale(self.model_scale) if self.model_scale else None

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["params"] = self.params
        return d

    def replace(self, **changes: Any) -> Scenario:
        d = asdict(self)
        d.update(changes)
        return Scenario(**d)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Scenario:
        """Explicit fields win; fields left out are filled from `text`, and text-derived feature goals are added."""
        text = str(d.get("text") or "")
        base = parse_free_text(text) if text.strip() else Scenario()
        known = d.get("known_frameworks")
        sc = Scenario(
            known_frameworks=_canonical_list(known) if known is not None else base.known_frameworks,
            stage=d.get("stage") or base.stage,
            hardware=d.get("hardware") or base.hardware,
            model_scale=str(d["model_scale"]) if d.get("model_scale") else base.model_scale,
            data_scale=str(d["data_scale"]) if d.get("data_scale") else base.data_scale,
            domain=d.get("domain") or base.domain,
            goals=_merge_goals(d.get("goals"), base.goals),
            text=text,
            lang=d.get("lang") or (detect_language(text) if text.strip() else "en"),
            accelerators=int(d["accelerators"]) if d.get("accelerators") else base.accelerators,
            accelerator=d.get("accelerator") or base.accelerator,
            team_size=int(d["team_size"]) if d.get("team_size") else base.team_size,
            org=d.get("org") or base.org,
            experience=d.get("experience") or base.experience,
        )
        sc.validate()
        return sc

    def validate(self) -> None:
        checks = (("stage", self.stage, STAGES), ("hardware", self.hardware, HARDWARE), ("domain", self.domain, DOMAINS),
                  ("lang", self.lang, ("zh", "en")), ("org", self.org, ORGS), ("experience", self.experience, EXPERIENCE))
        for name, val, allowed in checks:
            if val is not None and val not in allowed:
                raise UserError("bad_scenario", f"{name} must be one of {', '.join(allowed)} (got {val!r}).",
                                f"{name} 只能是 {'、'.join(allowed)}（收到 {val!r}）。", 422)
        if self.model_scale and parse_scale(self.model_scale) is None:
            raise UserError("bad_scenario", f"Cannot read the model scale {self.model_scale!r} (try 7B, 300M).",
                            f"无法识别模型规模 {self.model_scale!r}（例如 7B、300M）。", 422)


def _canonical_list(names: Any) -> list[str]:
    names = [names] if isinstance(names, str) else list(names or [])
    out = []
    for n in names:
        c = canonical(str(n))
        if c is None:
            raise UserError("bad_scenario", f"Unknown framework: {n}", f"未知框架：{n}", 422)
        if c not in out:
            out.append(c)
    return out


def _merge_goals(explicit: Any, derived: list[str]) -> list[str]:
    goals = [explicit] if isinstance(explicit, str) else list(explicit or [])
    if explicit is not None:  # explicit base goals win; text adds only feature goals
        derived = [g for g in derived if g in FEATURE_GOALS]
    return list(dict.fromkeys([str(g) for g in goals] + derived))


# ---- model scale ---------------------------------------------------------------------------------
_SUFFIX = {"k": 1e3, "m": 1e6, "b": 1e9, "g": 1e9, "t": 1e12}
_ZH_UNITS = (("万亿", 1e12), ("千亿", 1e11), ("百亿", 1e10), ("亿", 1e8), ("万", 1e4))


def parse_scale(value: str | float | int | None) -> float | None:
    """Parameters from "7B", "1.5b", "300M", "1T", "10-billion", "千亿", "1750 亿", "130亿"; None if unreadable."""
    if value is None:
        return None
    if isinstance(value, (int, float)):
        return float(value)
    s = str(value).strip().lower().replace(",", "")
    m = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([kmbgt])?", s)
    if m:
        return float(m.group(1)) * _SUFFIX.get(m.group(2) or "", 1.0)
    m = re.search(r"(\d+(?:\.\d+)?)\s*-?\s*(thousand|million|billion|trillion)", s)
    if m:
        return float(m.group(1)) * {"thousand": 1e3, "million": 1e6, "billion": 1e9, "trillion": 1e12}[m.group(2)]
    for unit, mult in _ZH_UNITS:
        m = re.search(r"(\d+(?:\.\d+)?)?\s*" + unit, s)
        if m:
            return float(m.group(1) or 1) * mult
    return None


_NOT_PARAMS = re.compile(r"\s*(?:tokens?|users?|用户|条|样本|samples?|images?|张图|图片|rows?|words?|词|字|次|元|美元|"
                         r"dollars?|requests?|queries|请求|行|examples?|documents?|篇)", re.I)
_SCALE_IN_TEXT = re.compile(
    r"(\d+(?:\.\d+)?\s*[-\s]?(?:billion|trillion|million))|(\d+(?:\.\d+)?\s*[bmt])(?![a-z])|"
    r"(\d+(?:\.\d+)?\s*(?:万亿|千亿|百亿|亿))|([零一二两三四五六七八九十百千]+亿)|((?:万亿|千亿|百亿))|"
    r"((?:a|one)[-\s]trillion)|(\d+(?:\.\d+)?\s*万)(?=\s*(?:个)?参数)", re.I)


def _scale_from_text(text: str) -> str | None:
    for m in _SCALE_IN_TEXT.finditer(text):
        raw = next(g for g in m.groups() if g)
        if _NOT_PARAMS.match(text, m.end()) or re.match(r"\s*(?:gb|tb|mb)", text[m.end() - 1:m.end() + 3], re.I) \
                or re.search(r"(?:昇腾|ascend|huawei|华为)\s*$", text[max(0, m.start() - 8):m.start()], re.I):
            continue  # "昇腾 910B" names a chip
        compact = re.sub(r"\s+|-", "", raw).lower().replace("atrillion", "1trillion").replace("onetrillion", "1trillion")
        cn = re.fullmatch(r"([零一二两三四五六七八九十百千]+)亿", compact)
        if cn and compact not in ("千亿", "百亿"):
            n = cn_number(cn.group(1))
            compact = f"{n}亿" if n else compact
        if parse_scale(compact) is not None:
            return compact
    return None


# ---- free text -----------------------------------------------------------------------------------
_KNOW = re.compile(r"(熟悉|只用过|都用过|用过|用惯了?|掌握|擅长|精通|会用|只会|只懂|一直用|主要用|都在用|在用|都用|用的是|之前用|以前用|"
                   r"knows?|knew|familiar with|"
                   r"experienced? (?:with|in)|experts? in|(?:have |has )?(?:only )?used|work(?:s|ing)? with|背景是|"
                   r"code(?:base| base)? is (?:in|written in)?|written in|built (?:on|with)|代码(?:都)?是|技术栈是|stack is|跑在|"
                   r"run(?:s|ning)? (?:everything |it all |all of it )?on)", re.I)
_KNOW_AFTER = re.compile(r"(pytorch|tensorflow|tf2?|keras|paddle(?:paddle)?|飞桨|jax)\s*(?:的)?\s*(?:背景|出身|老手|shop|background|"
                         r"experience|veterans?|users|developers|people|folks|engineers|researchers|团队|用户|开发者|写的|代码|"
                         r"很熟|比较熟|熟练|熟悉|用得)", re.I)
_NEGATED = re.compile(r"(?:没|不|未|从未|never|n't|not|no)\s*(?:有)?\s*$", re.I)
_TPU = r"(?<![a-z])tpu"
_NPU = r"domestic (?:chinese )?(?:chips|hardware|accelerators)|昇腾|ascend|(?<![a-z])npu|国产(?:硬件|芯片|算力|卡|gpu|加速)|昆仑|kunlun|海光|hygon|寒武纪|cambricon|(?<![a-z])dcu(?![a-z])"
_CPU_ONLY = r"只有\s*cpu|没有\s*(?:gpu|显卡)|no gpus?|cpu[- ]only|only cpus?|only (?:have )?(?:a )?(?:laptop )?cpus?|纯\s*cpu"
_CLUSTER = (r"集群|cluster|上千张|千卡|万卡|几百张|数百张|thousands of|hundreds of|多机|multi-node|multiple nodes|"
            r"\bpods?\b|超算|supercomputer")
_GPU = r"gpu|显卡|\d\s*张卡|几张卡|单卡|\d\s*卡|v100|a100|h100|h800|a800|4090|3090|rtx|cuda|graphics card"
_RULES: dict[str, tuple[tuple[str, str], ...]] = {
    "stage": (("research", r"研究|科研|实验室|论文|博士|学术|phd|research|paper|explor|探索|academic|实验性|experiment|"
                           r"try(?:ing)? out new|复现|reproduc"),
              ("prototype", r"验证|原型|prototype|mvp|proof of concept|poc|快速试错|尽快|demo|"
                            r"iterate quickly|fast iteration|quick(?:ly)? validat"),
              ("production", r"生产|部署|上线|落地|产品里|企业|国企|production|deploy|serving|millions of users|enterprise|"
                             r"state-owned|海量用户|商用|线上|在线服务")),
    "domain": (("rl", r"强化学习|reinforcement|\brl\b"),
               ("scientific", r"物理|微分方程|科学计算|分子|蛋白|scientific|numerical|physics|differential equation|simulation|"
                              r"模拟|pde|气象|天气预报|climate|weather|流体|fluid|偏微分"),
               ("llm_pretrain", r"预训练|pre-?train|from scratch|从头|从零"),
               ("llm_finetune", r"微调|fine-?tun|lora|sft|指令调优|instruction[- ]tun"),
               ("chinese_nlp", r"中文.{0,8}(?:文本|nlp|自然语言|分类|抽取|搜索|推荐|问答|语义|对话|ocr|情感|实体|ner|分词|摘要|意图|"
                               r"客服|纠错|舆情|理解)|chinese[- ]language (?:nlp|text)|"
                               r"chinese (?:nlp|text)|nlp (?:for|on) chinese|中文\s*nlp|中文场景|mandarin"),
               ("recommendation", r"推荐系统|推荐模型|推荐算法|搜索推荐|搜推|recommend(?:ation|er)s?\s*(?:system|model|engine)|"
                                  r"recsys|\bctr\b|点击率|广告排序|ads ranking|click-through"),
               ("cv", r"视觉|图像|图片|检测|分割|vision|image|detection|segmentation|\bcv\b|ocr|视频|video|\bcnns?\b|resnet|yolo"),
               ("nlp", r"\bnlp\b|自然语言|文本分类|文本|natural language|text classification|language model|语言模型|"
                       r"机器翻译|translation|问答|chatbot|对话")),
}
_ORG = (("startup", r"初创|创业|startup|start-up"),
        ("enterprise", r"企业|大公司|大厂|国企|央企|银行|集团|enterprise|(?:large|big) (?:[\w-]+ )?compan(?:y|ies)|corporation|"
                       r"\bbank\b|state-owned|fortune 500"),
        ("lab", r"实验室|高校|大学|课题组|university|academic|\blab\b|phd|博士|研究所|institute"))
_EXPERIENCE = (("beginner", r"新手|入门|零基础|没有.{0,4}经验|缺乏.{0,4}经验|经验不足|刚接触|beginners?|novices?|junior|"
                            r"new to (?:deep learning|ml|machine learning|dl)|little experience|no (?:ml )?experience"),
               ("experienced", r"经验丰富|丰富的.{0,6}经验|工程经验|资深|老手|experienced|seasoned|senior|strong engineering|"
                               r"engineering experience|years of experience"))
_GOALS = (("localisation", r"国产|信创|自主可控|domestic|locali[sz]|去美|替代"),
          ("mobile", r"手机|移动端|端侧|嵌入式|边缘|端上|iot|mobile|phone|embedded|edge devices?|on-device|\bedge\b|android|ios\b|\bapps?\b|小程序"),
          ("server", r"服务器|后端|server|serving|\bserve[sd]?\b|behind an api|海量用户|millions of users|backend|线上服务|在线服务|推理服务|api 服务"),
          ("cloud:gcp", r"google cloud|gcp|cloud tpu|谷歌云"), ("cloud:aws", r"aws|amazon"), ("cloud:azure", r"azure"),
          ("cloud:aliyun", r"阿里云|aliyun|alibaba cloud"),
          ("long_sequence", r"长序列|超长|长上下文|long sequence|long context|\b\d{2,3}k tokens|\b\d{2,3}k context"),
          ("moe", r"moe|混合专家|mixture[- ]of[- ]experts|expert parallel|专家并行"), ("fp8", r"fp8"),
          ("heterogeneous_memory", r"异构内存|cpu\s*内存|显存加|heterogeneous memory|cpu memory"),
          ("memory_limited", r"显存.{0,4}不够|显存不足|放不下|超出显存|超过显存|装不下|exceeds? (?:the )?(?:gpu )?memory|"
                             r"(?:larger|bigger) than (?:the |our )?(?:gpu )?memory|out of (?:gpu )?memory|\boom\b|single \d+\s*gb|单卡|limited gpu memory|"
                             r"(?:doesn't|does not|don't|do not|won't|will not) fit|显存有限"),  # plural: blind-sel-en-12
          ("few_code_changes", r"少改代码|不改代码|without rewriting|without changing|few code changes|minimal code"),
          ("debugging", r"调试|debug|pdb"), ("functional", r"函数式|functional|jit|vmap|可组合|composable"),
          ("end_to_end_pipeline", r"端到端|end-to-end|tfx|ml 管道|ml pipeline|production pipeline|mlops|全流程"),
          ("industry_support", r"本土|产业|技术支持|industry support|local industry"),
          ("chinese_docs", r"中文(?:的)?(?:资料|文档|社区|教程)|(?:docs?|documentation|tutorials?) in (?:chinese|mandarin)|"
                           r"chinese(?:-language)? (?:docs|documentation|community|tutorials)"),
          ("model_parallel", r"张量并行|序列并行|流水线并行|模型并行|tensor[- ]parallel|pipeline[- ]parallel|sequence[- ]parallel|"
                             r"model[- ]parallel|3d[- ]parallel|三维并行"))


def _first_rule(rules: tuple[tuple[str, str], ...], low: str) -> str | None:
    for value, pattern in rules:
        if re.search(pattern, low):
            return value
    return None


def _stage(low: str) -> str | None:
    """The stage the text states; a start-up is an organisation (`org`), not a stage (it may pre-train at scale)."""
    counts = {v: len(re.findall(p, low)) for v, p in _RULES["stage"]}
    best = max(counts.values())
    return None if best == 0 else next(v for v in STAGES if counts[v] == best)


def _known(text: str) -> list[str]:
    known: list[str] = []
    for m in _KNOW.finditer(text):
        if _NEGATED.search(text[max(0, m.start() - 8):m.start()]):
            continue
        window = re.split(r"[，。；;,.!?！？]|\bbut\b|但", text[m.end():m.end() + 40])[0]
        known += [n for n in find_frameworks(window) if n not in known]
    for m in _KNOW_AFTER.finditer(text):
        known += [n for n in find_frameworks(m.group(1)) if n not in known]
    return known


def _hardware(low: str, count: int | None) -> str | None:
    """tpu / npu / cpu by kind; otherwise the GPU count decides (<= FEW_GPUS_MAX: few_gpus), then cluster words."""
    if re.search(_TPU, low):
        return "tpu"
    if re.search(_NPU, low):
        return "npu"
    if re.search(_CPU_ONLY, low):
        return "cpu"
    if count is not None:
        return "few_gpus" if count <= FEW_GPUS_MAX else "gpu_cluster"
    if re.search(_CLUSTER, low):
        return "gpu_cluster"
    return "few_gpus" if re.search(_GPU, low) else None


def _domain(low: str, params: float | None) -> str:
    dom = _first_rule(_RULES["domain"], low)
    llm = re.search(r"语言模型|大模型|gpt|llm|llama|qwen|参数|parameter|moe|transformer|chatglm|baichuan", low)
    if dom == "llm_pretrain" and not (llm or (params and params >= 1e9)):
        dom = None
    big = params is not None and params >= 1e9
    if (dom in (None, "nlp") and big) or (dom is None and llm and big):
        # a model of a billion parameters or more: training it is pre-training, unless fine-tuning is said
        pretrain = params is not None and (params >= 1e11 or (params >= 3e10 and re.search(r"train|训练", low) is not None))
        dom = "llm_pretrain" if pretrain else "llm_finetune"
    return dom or "general"


def parse_free_text(text: str) -> Scenario:
    """Fill a Scenario from a free description in Chinese or English with keyword rules."""
    low = text.lower()
    scale = _scale_from_text(text)
    params = parse_scale(scale) if scale else None
    goals = [g for g, p in _GOALS if re.search(p, low)]
    count = accelerator_count(text)
    kind = accelerator_kind(text)
    hardware = _hardware(low, count)
    if hardware == "few_gpus" and count is None and params and params >= 1e11 and re.search(r"集群|cluster", low):
        hardware = "gpu_cluster"
    if hardware == "few_gpus" and params and "memory_limited" not in goals and _exceeds_memory(params, count, text, kind):
        goals.append("memory_limited")
    return Scenario(known_frameworks=_known(text), stage=_stage(low), hardware=hardware, model_scale=scale,
                    data_scale=_data_scale(text), domain=_domain(low, params), goals=goals, text=text,
                    lang=detect_language(text) if text.strip() else "en", accelerators=count,
                    accelerator=kind, team_size=team_size(text), org=_first_rule(_ORG, low),
                    experience=_first_rule(_EXPERIENCE, low))


TRAINING_BYTES_PER_PARAM = 16  # mixed-precision Adam: fp16 weights and gradients, fp32 master weights and two moments


def _exceeds_memory(params: float, count: int | None, text: str, kind: str | None) -> bool:
    """Training state (16 bytes a parameter) larger than the GPUs' memory (unknown: 40 GB each, one GPU if uncounted)."""
    per_gpu = gpu_memory_gb(text, kind) or 40.0
    return params * TRAINING_BYTES_PER_PARAM > (count or 1) * per_gpu * 1e9


_OVERRIDABLE = ("stage", "model_scale", "data_scale", "team_size", "org", "experience")


_LLM_DOMAINS = ("llm_pretrain", "llm_finetune")


def merge_situation(previous: Scenario | None, message: str) -> Scenario:
    """The situation after `message`, given the one parsed from the conversation so far.

    Fields the new message states replace the earlier ones (a new hardware statement replaces the count and
    kind too; "pre-training" or "fine-tuning" alone switches a language model's task); goals accumulate; `text` keeps
    every turn; `lang` is the new message's."""
    new = parse_free_text(message)
    if previous is None:
        return new
    d = asdict(previous)
    for name in _OVERRIDABLE:
        if getattr(new, name) is not None:
            d[name] = getattr(new, name)
    if new.hardware is not None or new.accelerators is not None:
        d.update(hardware=new.hardware or previous.hardware, accelerators=new.accelerators,
                 accelerator=new.accelerator if new.accelerator or new.hardware != previous.hardware else previous.accelerator)
    elif new.accelerator:
        d["accelerator"] = new.accelerator
    if new.domain != "general":
        d["domain"] = new.domain
    elif previous.domain in _LLM_DOMAINS:
        # "如果换成 64 张卡做预训练呢？" after a language model was said: pre-training or fine-tuning read with the
        # conversation, not the message alone (which names no model, so its own parse cannot tell what is trained)
        said = _first_rule(_RULES["domain"], message.lower())
        if said in _LLM_DOMAINS:
            d["domain"] = said
    if new.known_frameworks:
        d["known_frameworks"] = new.known_frameworks
    d["goals"] = list(dict.fromkeys([*previous.goals, *new.goals]))
    d["text"] = f"{previous.text}\n{message}".strip() if previous.text else message
    d["lang"] = new.lang if message.strip() else previous.lang
    return Scenario(**d)


def situation_from_turns(turns: list[str]) -> Scenario:
    """Fold the user's messages of a conversation, oldest first, with `merge_situation`."""
    sc: Scenario | None = None
    for turn in turns:
        sc = merge_situation(sc, turn)
    return sc if sc is not None else Scenario()


def _data_scale(text: str) -> str | None:
    m = re.search(r"(\d+(?:\.\d+)?)\s*(tb|pb|gb)\b", text, re.I)
    return f"{m.group(1)}{m.group(2).upper()}" if m and not re.search(r"显存|显卡|gpu|v100|a100", text[m.end():m.end() + 8], re.I) \
        else None


def to_scenario(value: Scenario | dict[str, Any] | str) -> Scenario:
    """Accept a Scenario, a dict (as in eval/advisor.jsonl) or free text."""
    if isinstance(value, Scenario):
        value.validate()
        return value
    if isinstance(value, dict) and any(v for k, v in value.items() if k not in ("lang", "params")):
        return Scenario.from_dict(value)
    if isinstance(value, str) and value.strip():
        return parse_free_text(value)
    raise UserError("bad_scenario", "Describe the scenario (fields or free text).", "请描述你的场景（字段或自由文本）。", 422)
