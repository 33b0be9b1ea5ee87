"""A team's situation as the Advisor sees it: the `Scenario` dataclass and a keyword parser for free text.

The article's four questions map to fields: what the team knows (`known_frameworks`), the project's stage
(`stage`), the hardware (`hardware`) and the long-term goals (`goals`). Model size, data size and the
application domain refine them. `parse_free_text` fills the fields from a Chinese or English description
with plain keyword rules (no model), and also derives "feature" goals such as `long_sequence` or
`memory_limited` that rubric facts can test. This module does no scoring and no retrieval.
"""
from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Any

from ..errors import UserError
from ..frameworks import canonical, find_frameworks
from ..lang import detect_language

STAGES = ("research", "prototype", "production")
HARDWARE = ("cpu", "few_gpus", "gpu_cluster", "tpu", "npu")
DOMAINS = ("chinese_nlp", "cv", "scientific", "rl", "llm_pretrain", "llm_finetune", "general")
BASE_GOALS = ("localisation", "mobile", "server")
FEATURE_GOALS = ("long_sequence", "moe", "fp8", "heterogeneous_memory", "memory_limited", "few_code_changes",
                 "debugging", "functional", "end_to_end_pipeline", "industry_support")


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
        )
        sc.validate()
        return sc

    def validate(self) -> None:
        checks = (("stage", self.stage, STAGES), ("hardware", self.hardware, HARDWARE), ("domain", self.domain, DOMAINS),
                  ("lang", self.lang, ("zh", "en")))
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


_SCALE_IN_TEXT = re.compile(
    r"(\d+(?:\.\d+)?\s*[-\s]?(?:billion|trillion|million))|(\d+(?:\.\d+)?\s*[bmt])(?![a-z])|"
    r"(\d+(?:\.\d+)?\s*(?:万亿|千亿|百亿|亿))|((?:万亿|千亿|百亿))", re.I)


def _scale_from_text(text: str) -> str | None:
    for m in _SCALE_IN_TEXT.finditer(text):
        raw = next(g for g in m.groups() if g)
        compact = re.sub(r"\s+|-", "", raw)
        if parse_scale(compact) is not None and not re.search(r"\d+\s*(?:gb|tb|mb)", text[m.start():m.end() + 1].lower()):
            return compact
    return None


# ---- free text -----------------------------------------------------------------------------------
_KNOW = re.compile(r"(熟悉|只用过|都用过|用过|用惯了?|掌握|擅长|精通|会用|know[s]?|familiar with|experienced? (?:with|in)|"
                   r"(?:have |has )?(?:only )?used|work(?:s|ing)? with|背景是)", re.I)
_RULES: dict[str, tuple[tuple[str, str], ...]] = {
    "hardware": (("tpu", r"tpu"), ("npu", r"昇腾|ascend|npu|国产(?:硬件|芯片|算力)|昆仑|kunlun|海光|hygon|寒武纪"),
                 ("cpu", r"只有\s*cpu|没有\s*gpu|no gpus?|cpu[- ]only|only cpus?"),
                 ("gpu_cluster", r"集群|cluster|上千张|千卡|万卡|几百张|数百张|thousands of|hundreds of|\d{3,}\s*(?:张|块)?\s*(?:gpu|卡)|"
                                 r"\d{1,3}(?:,\d{3})+\s*gpus|\d{3,}\s*gpus|pods?\b"),
                 ("few_gpus", r"gpu|显卡|\d\s*张卡|几张卡|单卡|v100|a100|h100|4090|3090")),
    "stage": (("research", r"研究|科研|实验室|论文|博士|phd|research|paper|explor|探索"),
              ("prototype", r"初创|startup|start-up|验证|原型|prototype|mvp|proof of concept|poc|快速试错|尽快"),
              ("production", r"生产|部署|上线|落地|产品里|企业|国企|production|deploy|serving|millions of users|enterprise|"
                             r"state-owned|海量用户")),
    "domain": (("rl", r"强化学习|reinforcement"), ("scientific", r"物理|微分方程|科学计算|分子|蛋白|scientific|numerical|physics|"
                                                              r"differential equation|simulation|模拟"),
               ("llm_pretrain", r"预训练|pre-?train|from scratch|从头"), ("llm_finetune", r"微调|fine-?tun|lora|sft"),
               ("chinese_nlp", r"中文.{0,8}(?:文本|nlp|自然语言|分类|抽取|搜索|推荐|问答)|chinese[- ]language nlp|chinese nlp"),
               ("cv", r"视觉|图像|图片|检测|分割|vision|image|detection|segmentation")),
}
_GOALS = (("localisation", r"国产|信创|自主可控|domestic|locali[sz]"), ("mobile", r"手机|移动端|端侧|嵌入式|mobile|phone|embedded|edge device"),
          ("server", r"服务器|后端|server|serving|海量用户|millions of users|backend"),
          ("cloud:gcp", r"google cloud|gcp|cloud tpu|谷歌云"), ("cloud:aws", r"aws|amazon"), ("cloud:azure", r"azure"),
          ("cloud:aliyun", r"阿里云|aliyun|alibaba cloud"), ("long_sequence", r"长序列|超长|long sequence|long context|\b\d{2,3}k tokens"),
          ("moe", r"moe|混合专家|mixture[- ]of[- ]experts|expert parallel|专家并行"), ("fp8", r"fp8"),
          ("heterogeneous_memory", r"异构内存|cpu\s*内存|显存加|heterogeneous memory|cpu memory"),
          ("memory_limited", r"显存.{0,4}不够|显存不足|放不下|out of (?:gpu )?memory|\boom\b|single \d+\s*gb|单卡|limited gpu memory"),
          ("few_code_changes", r"少改代码|不改代码|without rewriting|without changing|few code changes|minimal code"),
          ("debugging", r"调试|debug|pdb"), ("functional", r"函数式|functional|jit|vmap|可组合|composable"),
          ("end_to_end_pipeline", r"端到端|end-to-end|tfx|ml 管道|ml pipeline|production pipeline"),
          ("industry_support", r"本土|产业|技术支持|industry support|local industry"))


def _first_rule(key: str, low: str) -> str | None:
    for value, pattern in _RULES[key]:
        if re.search(pattern, low):
            return value
    return None


def _stage(low: str) -> str | None:
    counts = {v: len(re.findall(p, low)) for v, p in _RULES["stage"]}
    best = max(counts.values())
    return None if best == 0 else next(v for v in STAGES if counts[v] == best)


def _known(text: str) -> list[str]:
    known: list[str] = []
    for m in _KNOW.finditer(text):
        for name in find_frameworks(text[m.end():m.end() + 24]):
            if name not in known:
                known.append(name)
    return known


def _domain(low: str, params: float | None) -> str:
    dom = _first_rule("domain", low)
    llm = re.search(r"语言模型|大模型|gpt|llm|llama|参数|parameter|moe|transformer", low)
    if dom == "llm_pretrain" and not llm:
        dom = None
    if dom is None and llm and params and params >= 1e9:
        dom = "llm_finetune"
    return dom or "general"


def parse_free_text(text: str) -> Scenario:
    """Fill a Scenario from a free description in Chinese or English with keyword rules."""
    low = text.lower()
    scale = _scale_from_text(text)
    params = parse_scale(scale) if scale else None
    goals = [g for g, p in _GOALS if re.search(p, low)]
    hardware = _first_rule("hardware", low)
    if hardware == "few_gpus" and params and params >= 1e11 and re.search(r"集群|cluster", low):
        hardware = "gpu_cluster"
    return Scenario(known_frameworks=_known(text), stage=_stage(low), hardware=hardware, model_scale=scale,
                    data_scale=_data_scale(text), domain=_domain(low, params), goals=goals, text=text,
                    lang=detect_language(text) if text.strip() else "en")


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
