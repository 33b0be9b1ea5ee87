"""Selection intent (assistant/advisor/intent.py): the recommendation questions of eval/gold_recommend.jsonl are
selection questions, the fact questions of eval/gold_fact.jsonl are not; precision and recall are printed and
must both be at least 0.9. Plus phrasings as people ask them, in both languages. Pure text rules, no model."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from assistant.advisor.intent import describes_own_situation, is_selection_question

EVAL = Path(__file__).resolve().parents[1] / "eval"


def _questions(name: str) -> list[tuple[str, str]]:
    rows = [json.loads(line) for line in (EVAL / name).read_text(encoding="utf-8").splitlines() if line.strip()]
    return [(r["question"], r["lang"]) for r in rows]


def test_gold_sets_precision_recall(capsys):
    pos, neg = _questions("gold_recommend.jsonl"), _questions("gold_fact.jsonl")
    tp = sum(is_selection_question(q, lang) for q, lang in pos)
    fp = sum(is_selection_question(q, lang) for q, lang in neg)
    precision = tp / (tp + fp) if tp + fp else 0.0
    recall = tp / len(pos)
    with capsys.disabled():
        print(f"\nselection intent: precision {precision:.3f}, recall {recall:.3f} "
              f"({tp}/{len(pos)} recommendation questions, {fp}/{len(neg)} fact questions flagged)")
    assert precision >= 0.9 and recall >= 0.9


@pytest.mark.parametrize("text", [
    "How do I train a 70B model on 64 GPUs, which stack should I use?", "Which framework is best for TPU training?",
    "我们是一个 5 人的创业团队，主要做 NLP 研究，应该选哪个框架？", "JAX or PyTorch for PDE solvers?", "PaddlePaddle 还是 PyTorch？",
    "best framework for recommendation systems", "训练框架怎么选？", "有没有适合我们团队的框架？", "TPU 训练推荐什么框架",
    "Should we switch from TensorFlow to PyTorch?", "我们该用 DeepSpeed 还是 Megatron？", "Is JAX a good choice for our team?",
    "What would you suggest for a 5-person startup doing CV?", "我们只有 4 张 3090，用什么训练 13B 模型？",
    "团队都是 PyTorch 出身，训练这块的框架和库怎么搭比较稳？", "在 PyTorch 生态里，用哪个库做这种模型并行效率最高？",
    "The model ships inside our mobile app. What should we train with?", "Our engineers know TF and PyTorch. Which should we train in?",
    "A colleague wants us to move to TensorFlow. What would you start with?"])
def test_selection_questions(text):
    assert is_selection_question(text, None)


@pytest.mark.parametrize("text", [
    "What is ZeRO stage 3?", "DeepSpeed 怎么配置 offload？", "Which plugin is recommended for models under 2B parameters?",
    "PyTorch 和 TensorFlow 的分布式 API 有什么区别？", "How does FSDP shard parameters?", "飞桨推荐的动转静使用方式是什么？",
    "TensorFlow 多机训练时用哪个环境变量指定集群配置？", "Which library does tf.function use to convert control flow?", ""])
def test_fact_questions(text):
    assert not is_selection_question(text, None)


@pytest.mark.parametrize("text,expected", [
    # the asker's situation in two or more fields, no framework named but the team's: a choice, however worded
    ("我们 6 个人的小团队，手上 4 张 4090，要微调一个 13B 的模型，这事该怎么搞？", True),
    ("Our lab has a TPU v4 pod and does PDE research. What's the plan?", True),
    ("我们团队都用 PyTorch，要做千亿参数的预训练，集群 1024 卡，怎么规划？", True),
    # a framework named that is not the team's own: a fact about it
    ("我们有 8 张 A100，怎么用 DeepSpeed 训练 7B 模型？", False),
    ("Our team has 8 GPUs; how do we enable ZeRO-3 in DeepSpeed?", False),
    # one field only, or no question, or not the asker's situation
    ("我们有 8 张 A100，怎么看显存占用？", False), ("We are a 5-person startup doing CV research.", False),
    ("A 70B model on 64 GPUs needs how much memory per GPU?", False)])
def test_a_question_stating_its_own_situation(text, expected):
    assert describes_own_situation(text) is expected
