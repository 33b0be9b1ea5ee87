"""The frameworks the product knows, their aliases in both languages, and bilingual concept terms.

Used by ingestion (which frameworks a chunk is about), retrieval (query expansion across
languages, comparison questions) and the Advisor. Pure data and small functions, no I/O.
"""
from __future__ import annotations

import re
from collections.abc import Iterable

from .text import has_cjk, table_cells

# canonical name -> aliases (lower-case matching; Chinese aliases matched as substrings)
FRAMEWORKS: dict[str, tuple[str, ...]] = {
    "PyTorch": ("pytorch", "torch", "py torch", "fsdp", "torch.compile", "torchscript", "ddp"),
    "TensorFlow": ("tensorflow", "tf.function", "tf.distribute", "keras", "tfx", "tensorboard", "tf2", "tf 2"),
    "PaddlePaddle": ("paddlepaddle", "paddle", "飞桨", "paddlenlp", "paddlehub", "百度飞桨"),
    "JAX": ("jax", "jax.jit", "pmap", "vmap", "xla", "flax", "optax", "haiku"),
    "Megatron-LM": ("megatron-lm", "megatron", "megatron core", "megatron-core", "mcore"),
    "DeepSpeed": ("deepspeed", "deep speed", "zero-offload", "zero offload", "zero-infinity"),
    "Colossal-AI": ("colossal-ai", "colossalai", "colossal ai", "colossal"),
}

# Short ASCII aliases that must match as whole words (else "tf" matches "stuff").
_WORD_ALIASES = {"tf": "TensorFlow", "pt": "PyTorch"}

# Bilingual concept terms: each group is one concept; a query mentioning any term is
# expanded with the others so that a Chinese question reaches English passages and back.
CONCEPTS: tuple[tuple[str, ...], ...] = (
    ("张量并行", "tensor parallelism", "tensor parallel", "tensor model parallel", "模型并行"),
    ("流水线并行", "pipeline parallelism", "pipeline parallel", "管道并行"),
    ("数据并行", "data parallelism", "data parallel", "distributeddataparallel"),
    ("序列并行", "sequence parallelism", "sequence parallel", "ulysses", "context parallel"),
    ("专家并行", "expert parallelism", "mixture of experts", "moe", "混合专家"),
    ("完全分片数据并行", "fully sharded data parallel", "fsdp", "分片"),
    ("零冗余优化器", "zero redundancy optimizer", "zero", "optimizer state sharding", "分组切分", "group sharded"),
    ("混合精度", "mixed precision", "fp16", "bf16", "amp", "半精度"),
    ("显存", "gpu memory", "memory", "内存", "offload", "卸载"),
    ("动态图", "eager execution", "eager mode", "dynamic graph", "imperative"),
    ("静态图", "graph mode", "static graph", "computational graph", "计算图", "graph"),
    ("动转静", "dynamic-to-static", "to_static", "dy2static", "paddle.jit"),
    ("即时编译", "just-in-time compilation", "jit", "compile", "编译"),
    ("自动向量化", "automatic vectorization", "vmap"),
    ("分布式训练", "distributed training", "distributed", "multi-gpu", "多机多卡", "多卡", "multi-worker"),
    ("自动并行", "auto parallel", "automatic parallelism", "semi-automatic parallel"),
    # two senses of "checkpoint": saving training state, and recomputing activations to save memory
    ("检查点", "checkpoint", "checkpointing", "save checkpoint", "分布式检查点"),
    ("激活检查点", "activation checkpointing", "gradient checkpointing", "重计算", "recompute", "remat"),
    ("部署", "deployment", "serving", "inference", "推理"),
    ("生态", "ecosystem", "toolkit", "model hub", "模型库"),
    ("可视化", "visualization", "tensorboard", "visualdl"),
    ("国产化", "domestic", "localization", "国产芯片", "昇腾", "ascend", "npu"),
    ("大模型", "large language model", "llm", "大语言模型", "千亿参数", "billion parameters"),
    ("预训练", "pre-training", "pretraining", "pretrain"),
    ("微调", "fine-tuning", "finetuning", "fine-tune"),
    ("硬件", "hardware", "gpu", "tpu", "npu"),
    ("调试", "debugging", "debug", "pdb"),
    ("初创公司", "startup", "small team", "小团队"),
    ("研究", "research", "prototype", "原型", "科研"),
    ("生产环境", "production", "生产", "规模化"),
)

_ALIAS_PATTERNS: list[tuple[re.Pattern[str], str]] = []
for _name, _aliases in FRAMEWORKS.items():
    for _a in (_name.lower(), *_aliases):
        if has_cjk(_a):
            _ALIAS_PATTERNS.append((re.compile(re.escape(_a)), _name))
        else:
            _ALIAS_PATTERNS.append((re.compile(r"(?<![a-z0-9])" + re.escape(_a) + r"(?![a-z0-9])"), _name))
for _a, _name in _WORD_ALIASES.items():
    _ALIAS_PATTERNS.append((re.compile(r"(?<![a-z0-9_.])" + re.escape(_a) + r"(?![a-z0-9_])"), _name))


def find_frameworks(text: str) -> list[str]:
    """Canonical framework names mentioned in text, in order of first mention."""
    low = text.lower()
    found: dict[str, int] = {}
    for pat, name in _ALIAS_PATTERNS:
        m = pat.search(low)
        if m and (name not in found or m.start() < found[name]):
            found[name] = m.start()
    return sorted(found, key=found.__getitem__)


def names_only(text: str) -> bool:
    """Whether `text` says nothing but frameworks' names ("PyTorch。", "JAX and PyTorch.", "飞桨。"), citation marks
    aside."""
    names = find_frameworks(text)
    if not names:
        return False
    rest = text.lower()
    for name in names:
        rest = rest.replace(name.lower(), " ")
    rest = re.sub(r"\[\d+\]|\b(?:and|or)\b|[和或与、+/\s\W]", "", rest)
    return len(rest) <= 2  # an alias left over ("飞桨。")


def spoken(names: list[str], text: str) -> str:
    """The first two of `names` as one subject in `text`'s language ("PyTorch 和 JAX", "PyTorch and JAX")."""
    return (" 和 " if has_cjk(text) else " and ").join(names[:2])


def said_of(text: str, names: list[str]) -> str | None:
    """`text` with the one framework it names said as `names` instead ("Which company leads PaddlePaddle?", [TensorFlow]
    -> "Which company leads TensorFlow?"), every mention of it; None when it names none, or several."""
    named = find_frameworks(text)
    if len(named) != 1 or not names:
        return None
    low = text.lower()
    spans = sorted({m.span() for pat, name in _ALIAS_PATTERNS if name == named[0] for m in pat.finditer(low)})
    kept: list[tuple[int, int]] = []
    for a, b in spans:  # the longest alias where two overlap ("megatron-lm", not "megatron")
        if kept and a < kept[-1][1]:
            if b - a > kept[-1][1] - kept[-1][0]:
                kept[-1] = (a, b)
            continue
        kept.append((a, b))
    subject = spoken(names, text)
    for a, b in reversed(kept):
        text = text[:a] + subject + text[b:]
    return text


def framework_counts(text: str) -> dict[str, int]:
    """How often each framework is mentioned (used to tag chunks and documents)."""
    low = text.lower()
    counts: dict[str, int] = {}
    for pat, name in _ALIAS_PATTERNS:
        n = len(pat.findall(low))
        if n:
            counts[name] = counts.get(name, 0) + n
    return counts


def canonical(name: str) -> str | None:
    """The canonical name for a user-supplied framework name or alias, or None."""
    found = find_frameworks(name)
    return found[0] if found else None


def expand_terms(text: str) -> list[str]:
    """Terms to add to a query so that it matches passages in the other language."""
    low = text.lower()
    extra: list[str] = []
    for group in CONCEPTS:
        if any(_term_in(t, low) for t in group):
            extra.extend(t for t in group if not _term_in(t, low))
    for name in find_frameworks(text):
        if name.lower() not in low:
            extra.append(name)
    return extra


def _term_in(term: str, low: str) -> bool:
    if has_cjk(term):
        return term in low
    return re.search(r"(?<![a-z0-9])" + re.escape(term) + r"(?![a-z0-9])", low) is not None


def frameworks_of(text: str, known: Iterable[str] = ()) -> set[str]:
    """The frameworks a passage or sentence is about: those it is known to be about (its chunk's) and those it names."""
    return set(known) | set(find_frameworks(text))


def sentence_frameworks(text: str, sentences: list[str]) -> list[set[str]]:
    """The frameworks each of a passage's sentences (`split_sentences(text)`) is about: those it names, and in a
    table those its row's first cell names (the article's comparison table: "| JAX | ... | 但在多机多卡生态上，相比
    PyTorch/TensorFlow仍处发展期 |" is about JAX, although the sentence names only the two it is compared with)."""
    out: list[set[str]] = []
    pos = 0
    for sentence in sentences:
        names = set(find_frameworks(sentence))
        at = text.find(sentence, pos)
        if at >= 0:
            pos = end = at + len(sentence)
            line_end = text.find("\n", end - 1)
            row = text[text.rfind("\n", 0, end - 1) + 1 : line_end if line_end >= 0 else len(text)].strip()
            if row.startswith("|"):  # the line the sentence ends on
                names |= set(find_frameworks(table_cells(row)[0]))
        out.append(names)
    return out
