"""Counts in people's own words, for the scenario parser: numbers (digits, English words, Chinese numerals),
accelerators ("64 GPUs", "8×A100", "两台 8 卡机器", "千卡集群", "TPU v4 pod", "昇腾 910B") and team size
("5 人的创业团队", "a team of five researchers").

Pure functions over text, no Scenario and no scoring: scenario.py turns these counts into the hardware
bucket (documented in docs/advisor.md).
"""
from __future__ import annotations

import re

_EN_NUM = {"a": 1, "an": 1, "one": 1, "single": 1, "two": 2, "a couple of": 2, "couple of": 2, "three": 3, "four": 4,
           "five": 5, "six": 6, "seven": 7, "eight": 8, "nine": 9, "ten": 10, "eleven": 11, "twelve": 12,
           "sixteen": 16, "twenty": 20, "thirty-two": 32, "thirty": 30, "fifty": 50, "sixty-four": 64,
           "a dozen": 12, "dozen": 12, "a hundred": 100, "hundred": 100, "a thousand": 1000, "thousand": 1000}
_CN_DIGIT = {"零": 0, "〇": 0, "一": 1, "二": 2, "两": 2, "俩": 2, "三": 3, "四": 4, "五": 5, "六": 6, "七": 7, "八": 8,
             "九": 9, "单": 1}
_CN_UNIT = {"十": 10, "百": 100, "千": 1000, "万": 10000}
CN_NUM = "[零〇一二两俩三四五六七八九十百千万单]+"
EN_NUM = "|".join(sorted((re.escape(k) for k in _EN_NUM), key=len, reverse=True))
NUM = rf"(?:(?<![\d.a-z])\d[\d,]*|{CN_NUM}|(?<![a-z])(?:{EN_NUM})(?![a-z]))"
MEM = r"(?:\d+\s*g(?:b)?\s*(?:显存)?(?:的)?\s*)?"  # "24GB" before the card


def cn_number(s: str) -> int | None:
    """"八" -> 8, "十六" -> 16, "六十四" -> 64, "一百二十八" -> 128, "千" -> 1000, "两" -> 2; None if not a numeral."""
    if not s or any(ch not in _CN_DIGIT and ch not in _CN_UNIT for ch in s):
        return None
    total, section, digit = 0, 0, None
    for ch in s:
        if ch in _CN_DIGIT:
            digit = _CN_DIGIT[ch]
        else:
            unit = _CN_UNIT[ch]
            if unit == 10000:
                total += (section + (digit or 0)) * unit
                section = 0
            else:
                section += (1 if digit is None else digit) * unit
            digit = None
    return total + section + (digit or 0)


def number(s: str) -> int | None:
    """An integer from digits ("2,000"), an English word ("five", "a couple of") or a Chinese numeral ("十六")."""
    s = s.strip().lower()
    if re.fullmatch(r"\d[\d,]*", s):
        return int(s.replace(",", ""))
    if s in _EN_NUM:
        return _EN_NUM[s]
    return cn_number(s)


# ---- accelerators --------------------------------------------------------------------------------
_GPU_MODEL = (r"(?:nvidia\s*|rtx\s*|geforce\s*|tesla\s*)?(?:[ahlv]\d{2,3}[a-z]?(?:\s*\d{2}\s*g(?:b)?)?|h20|t4|a10g?|l4|"
              r"[2345]0[5-9]0(?:\s*ti)?|mi\d{3}x?|b200|gb200)")
_GPU_WORD = r"(?:gpus?|gpu\s*cards?|graphics cards?|cards?|显卡|gpu|卡|块卡|张卡)"
_NODE_WORD = r"(?:nodes?|machines?|servers?|boxes|hosts?|台(?:机器|服务器|机)?|个节点|节点)"

_KIND = re.compile(_GPU_MODEL + r"s?(?![a-z0-9])", re.I)
_TPU_KIND = re.compile(r"tpu\s*-?\s*(v\d+[a-z]*(?:-\d+)?|trillium)", re.I)
_NPU_KIND = re.compile(r"(?:昇腾|ascend)\s*(\d{3}[a-z]?)", re.I)
_OTHER_NPU = re.compile(r"昆仑芯?|kunlun|海光|hygon|dcu|寒武纪|cambricon|mlu", re.I)


def accelerator_kind(text: str) -> str | None:
    """The named accelerator model, normalised: "A100", "RTX 3090", "TPU v4", "Ascend 910B", "Kunlun"; None if unnamed."""
    m = _NPU_KIND.search(text)
    if m:
        return f"Ascend {m.group(1).upper()}"
    m = _TPU_KIND.search(text)
    if m:
        return f"TPU {m.group(1).lower()}"
    for m in _KIND.finditer(text):
        raw = re.sub(r"\s+", "", m.group(0)).upper()
        raw = re.sub(r"^(NVIDIA|GEFORCE|TESLA)", "", raw)
        if re.match(r"[AHLV]\d", raw):
            raw = re.sub(r"S$", "", re.sub(r"\d{2}G(B)?$", "", raw))
        raw = re.sub(r"(?<=\d)S$", "", raw)
        if re.fullmatch(r"(RTX)?[2345]0[5-9]0(TI)?", raw):
            return "RTX " + raw.replace("RTX", "").replace("TI", " Ti")
        if raw and not re.fullmatch(r"\d+", raw):
            return raw
    m = _OTHER_NPU.search(text)
    if m:
        low = m.group(0).lower()
        return {"昆仑": "Kunlun", "昆仑芯": "Kunlun", "kunlun": "Kunlun", "海光": "Hygon DCU", "hygon": "Hygon DCU",
                "dcu": "Hygon DCU", "寒武纪": "Cambricon MLU", "cambricon": "Cambricon MLU", "mlu": "Cambricon MLU"}[low]
    return None


_PER_NODE = (
    # "两台 8 卡机器", "4 台 8 卡 A100 服务器", "2 nodes with 8 GPUs each", "4 nodes x 8 GPUs", "16 machines of 8 A100s"
    re.compile(rf"({NUM})\s*{_NODE_WORD}\s*(?:(?:with|of|x|×|\*|each with|,)\s*)?({NUM})\s*"
               rf"(?:{_GPU_MODEL}s?\s*(?:{_GPU_WORD})?|{_GPU_WORD})"
               rf"(?!\s*(?:集群|的集群))", re.I),
    re.compile(rf"({NUM})\s*(?:x|×|\*)\s*({NUM})\s*(?:{_GPU_MODEL}\s*)?{_GPU_WORD}?", re.I),  # "4 x 8 GPUs", "2×8卡"
    re.compile(rf"({NUM})\s*(?:个|台)?\s*(?:8|八)\s*卡\s*(?:机器|服务器|节点|的机器)", re.I),
)
_NOT_A_COUNT = r"(?!\s*(?:cluster|集群|nodes?|servers?|machines?|pods?|farm|provider|cloud|memory|显存))"  # "a GPU cluster"
_MACHINES_CARDS = re.compile(rf"({NUM})\s*机\s*({NUM})\s*卡")
_MODEL_NUMBERS = {1080} | {g * 1000 + m * 10 for g in (2, 3, 4, 5) for m in range(5, 10)}  # "3090 显卡" names a card, it is not a count
_TOTAL = (
    re.compile(rf"(?:单机|一台机器|one node|a single node)?\s*({NUM})[\s-]*(?:张|块|片|个)?\s*{MEM}(?:{_GPU_MODEL}\s*)?"
               rf"(?:{_GPU_WORD}|gpu|显卡|加速卡|npu|tpu(?:\s*(?:chips?|cores?))?|芯片)(?![a-z])", re.I),
    re.compile(rf"({NUM})\s*(?:x|×|\*)\s*{_GPU_MODEL}(?![a-z0-9])", re.I),                 # "8×A100"
    re.compile(rf"({NUM})\s*(?:张|块|片)\s*{MEM}{_GPU_MODEL}", re.I),                             # "4 张 3090"
    re.compile(rf"({NUM})\s+{MEM}{_GPU_MODEL}s?(?![a-z0-9])", re.I),                             # "8 A100s", "two H100"
    re.compile(rf"(?:with|using|on|have|has)\s+({NUM})\s+(?:nvidia\s+)?(?:gpus?|cards?)", re.I),
    re.compile(rf"{_GPU_MODEL}\s*(?:x|×|\*)\s*({NUM})(?![\d.])", re.I),                      # "A100 x 8"
    re.compile(r"(?:gpus?|显卡|卡)\s*[:：]?\s*(\d+)\s*(?:张|块|个)?(?![\d.a-z])", re.I),    # "GPU：64 张"
)
_VAGUE = ((re.compile(r"万卡|上万张|tens of thousands of (?:gpus|accelerators)", re.I), 10000),
          (re.compile(r"千卡|上千张|数千张|几千张|thousands of (?:gpus|accelerators|h100s?|a100s?|cards)|a thousand gpus", re.I), 1000),
          (re.compile(r"几百张|数百张|上百张|百卡|hundreds of (?:gpus|accelerators|cards|h100s?|a100s?)", re.I), 200),
          (re.compile(r"几十张|数十张|dozens of (?:gpus|cards)", re.I), 32),
          (re.compile(r"(?:单卡|单张|一张卡|single (?:gpu|card)|one gpu|a gpu\b|1 gpu)" + _NOT_A_COUNT, re.I), 1))


def accelerator_count(text: str) -> int | None:
    """Total accelerators the text describes; None when no count is given. Multiplies nodes by GPUs per node."""
    low = text.lower()
    m = _MACHINES_CARDS.search(low)
    if m:  # "两机十六卡", "4机32卡": the card count is the total
        return number(m.group(2))
    for pat in _PER_NODE:
        m = pat.search(low)
        if m:
            nodes = number(m.group(1))
            per = number(m.group(2)) if m.lastindex and m.lastindex >= 2 else 8
            if nodes and per and nodes <= 4096 and per <= 16:
                return nodes * per
    for pat in _TOTAL:
        for m in pat.finditer(low):
            n = number(m.group(1))
            if n == 1 and re.match(_NOT_A_COUNT, low[m.end():]) is None:
                continue  # "a GPU cluster", "一个 GPU 集群": one cluster, not one GPU
            if n and 0 < n <= 1_000_000 and n not in _MODEL_NUMBERS and not _is_memory(low, m.end()):
                return n
    for pat, n in _VAGUE:
        if pat.search(low):
            return n
    return None


def _is_memory(low: str, end: int) -> bool:
    """"24GB 显卡" or "80 GB" right after the count: a memory size, not a count."""
    return bool(re.match(r"\s*(?:gb|g\b|tb)", low[end:end + 4]))


_KIND_MEMORY_GB = {"A100": 80, "H100": 80, "H800": 80, "A800": 80, "H20": 96, "V100": 32, "T4": 16, "A10": 24, "A10G": 24,
                   "L4": 24, "L40": 48, "L40S": 48, "B200": 192}
_MEMORY = re.compile(r"(\d{1,3})\s*g(?:b|i?b)?\s*(?:的)?\s*(?:显存|vram|gpu memory|of (?:gpu )?memory|显卡|gpus?|cards?|" + _GPU_MODEL + ")"
                     r"|(?:" + _GPU_MODEL + r")\s*[- ]?(\d{2,3})\s*g(?:b)?(?![a-z])", re.I)


def gpu_memory_gb(text: str, kind: str | None) -> float | None:
    """Memory of one GPU: stated ("24GB 显卡", "A100 40G", "32GB V100") or known for the named model; None if unknown."""
    m = _MEMORY.search(text)
    if m:
        return float(m.group(1) or m.group(2))
    if kind and kind.startswith("RTX"):
        return 24.0 if re.search(r"[34]090", kind) else 12.0
    return float(_KIND_MEMORY_GB[kind]) if kind in _KIND_MEMORY_GB else None


# ---- team size -----------------------------------------------------------------------------------
_PEOPLE = r"(?:人|个人|名|位)"
_TEAM = (
    re.compile(rf"({NUM})\s*{_PEOPLE}(?:的|左右的)?\s*(?:小)?(?:创业|初创|研发|算法|研究|技术|ai|ml|nlp|cv)?\s*(?:团队|小组|公司|组|实验室|小团队)", re.I),
    re.compile(rf"(?:团队|小组|组里|课题组|实验室|公司)[，,\s]*(?:一共|共|总共|只有|目前|现在)?(?:有)?\s*({NUM})\s*{_PEOPLE}", re.I),
    re.compile(rf"(?:a|our)\s+(?:small\s+)?team\s+of\s+({NUM})", re.I),
    re.compile(rf"({NUM})[- ](?:person|people|member|man|engineer)s?\s+(?:team|start-?up|group|lab)", re.I),
    re.compile(rf"(?:we are|we're|we have|there are|just|only)\s+({NUM})\s+(?:of us|people|engineers|researchers|developers|"
               rf"data scientists|phd students|students|ml engineers)", re.I),
    re.compile(rf"team\s+(?:has|is|of)\s+({NUM})\s+(?:people|engineers|members|researchers|developers)", re.I),
    re.compile(rf"({NUM})\s*(?:个)?(?:工程师|研究员|算法工程师|开发者|博士生|学生)", re.I),
    re.compile(rf"({NUM})\s+(?:of us|engineers|researchers|developers|people|data scientists|ml engineers|members)\b", re.I),
)


_SOLO = re.compile(r"\bsolo\b|just me\b|by myself|on my own|一个人(?:做|搞|开发)|独立开发者|个人开发者", re.I)


def team_size(text: str) -> int | None:
    if _SOLO.search(text):
        return 1
    for pat in _TEAM:
        m = pat.search(text)
        if m:
            n = number(m.group(1))
            if n and n < 100000:
                return n
    return None
