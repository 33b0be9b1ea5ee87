"""A fast token-count estimate for the chat model's tokenizer (Qwen2.5), with no model needed.

Calibrated on ../shared/framework-docs and corpus/ against the real tokenizer (llama.cpp,
vocab only); see docs/chunking.md for the measurements. CJK characters and other characters
cost very different amounts, so they are counted apart. The constants lean high on purpose:
a chunk that the estimate says fits must also fit under the real tokenizer.
"""
from __future__ import annotations

import math
import re

_CJK = re.compile(r"[\u3000-\u303f\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uff00-\uffef]")
TOKENS_PER_CJK_CHAR = 0.75
TOKENS_PER_OTHER_CHAR = 0.3


def estimate_tokens(text: str) -> int:
    cjk = len(_CJK.findall(text))
    other = len(text) - cjk
    return math.ceil(cjk * TOKENS_PER_CJK_CHAR + other * TOKENS_PER_OTHER_CHAR)
