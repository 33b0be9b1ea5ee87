"""Sentence splitting and light normalisation for both languages (shared by prompts and citation checks)."""
from __future__ import annotations

import re
import unicodedata

# A sentence ends at 。！？；!? or at . followed by space/end (not inside 3.14 or tf.function), plus any closing
# quotes/brackets and trailing citation markers like [1][2] or [1], [2].
_SENT_END = re.compile(
    r"(?<=[。！？；!?])(?:[”’」』）)\]]*)(?:\s*[,，、]?\s*\[\d+(?:\s*[,，]\s*\d+)*\])*\s*"
    r"|(?<=[a-z0-9)\]`\"'])\.(?:\s*[,，、]?\s*\[\d+(?:\s*[,，]\s*\d+)*\])*(?=\s|$)\s*",
    re.IGNORECASE,
)


def split_sentences(text: str) -> list[str]:
    """Split text into sentences, keeping each sentence's own citation markers with it."""
    out: list[str] = []
    for block in re.split(r"\n\s*\n|\n(?=\s*(?:[-*•]|\d+[.)、])\s)", text):
        block = block.strip()
        if not block:
            continue
        start = 0
        for m in _SENT_END.finditer(block):
            end = m.end()
            piece = block[start:end].strip()
            if piece:
                out.append(piece)
            start = end
        rest = block[start:].strip()
        if rest:
            out.append(rest)
    return out


# a subject that is only a pronoun ("这个包名……", "This API ...", "It ..."); 此外/其次/其实/其他/那么 are not pronouns
_PRONOUN_START = re.compile(r"^[*_|>#\-•\s]*(?:(?:这|那|它|该|此|其)(?!外|次|实|他|么)|(?:This|That|These|Those|It|Its|They|Their)\b)")


def starts_with_pronoun(sentence: str) -> bool:
    """Whether a sentence (or a table cell / list item, markup ignored) takes its subject from the text before it."""
    return bool(_PRONOUN_START.match(sentence))


def normalise(text: str) -> str:
    """Full-width to half-width, lower case, collapsed spaces."""
    return re.sub(r"\s+", " ", unicodedata.normalize("NFKC", text)).strip().lower()
