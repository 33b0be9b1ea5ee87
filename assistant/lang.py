"""Language of a text: "zh" when it has a meaningful share of CJK characters, else "en"."""
from __future__ import annotations

import re

from .text import cjk_count

_LATIN_WORD = re.compile(r"[A-Za-z]+")


def detect_language(text: str) -> str:
    """Return "zh" or "en". A question with a few Chinese characters among English terms is Chinese."""
    cjk = cjk_count(text)
    if cjk == 0:
        return "en"
    words = len(_LATIN_WORD.findall(text))
    # Chinese questions are full of English framework names ("PyTorch 和 JAX 哪个好"):
    # count each Latin word as about two characters of weight.
    return "zh" if cjk >= 2 and cjk >= 0.25 * (cjk + 2 * words) else ("zh" if cjk >= 4 else "en")


def env_language() -> str:
    """The user's language when there is no text to go by: "zh" when LC_ALL (or else LANG) starts with zh."""
    import os

    locale = os.environ.get("LC_ALL") or os.environ.get("LANG") or ""
    return "zh" if locale.lower().startswith("zh") else "en"


def off_language(text: str, lang: str) -> bool:
    """True when an answer `text` is written in the other language than `lang` ("zh" or "en"): an English answer
    whose CJK characters outweigh its Latin words, or a Chinese one with next to none (framework names, code and
    commands are Latin in both, so a Chinese answer is judged by its CJK share, not by its words)."""
    body = re.sub(r"`[^`]*`|\[\d+\]|https?://\S+", " ", text)
    cjk = cjk_count(body)
    weight = cjk + 2 * len(_LATIN_WORD.findall(body))
    if weight < 8:  # too short to tell
        return False
    share = cjk / weight
    return share >= 0.5 if lang == "en" else share < 0.1
