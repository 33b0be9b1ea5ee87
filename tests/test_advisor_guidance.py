"""The rubric follows the article's guidance on situations written as people write them (zh and en), with a
readable margin, ties reported as ties with the cited facts that decide, and every reason cited. Real corpus
index and embedder; the Advisor must not touch the language model."""
from __future__ import annotations

import pytest

from assistant.advisor import advise, situation_from_turns
from assistant.advisor.rubric import load_rubric

PT, TF, PD, JAX = "PyTorch", "TensorFlow", "PaddlePaddle", "JAX"
DS, MG, CA = "PyTorch + DeepSpeed", "PyTorch + Megatron-LM", "Colossal-AI"


def _check_traced(a: dict) -> None:
    numbers = {c["n"] for c in a["citations"]}
    for entry in a["ranking"]:
        assert entry["reasons"] and all(r["citations"] and set(r["citations"]) <= numbers for r in entry["reasons"])
    if a["tie"]:
        for d in a["tie"]["decides"]:
            assert all(c["citations"] and set(c["citations"]) <= numbers for c in d["choose_if"])
    m = a["margin"]
    assert m["top"] == a["ranking"][0]["name"] and m["value"] == pytest.approx(a["ranking"][0]["score"] - a["ranking"][1]["score"], abs=1e-3)
    assert (m["label"] == "tie") == (a["tie"] is not None)


# (situation, accepted first choices, candidates that must be in the top two or None)
GUIDANCE = [
    # the issue's three questions
    ("How do I train a 70B model on 64 GPUs, which stack should I use?", {DS, MG}, {DS, MG}),
    ("Which framework is best for TPU training?", {JAX}, None),
    ("我们是一个 5 人的创业团队，主要做 NLP 研究，应该选哪个框架？", {PT}, None),
    # research and fast iteration -> PyTorch
    ("我们是5人初创团队，做研究原型，需要快速迭代，选什么框架？", {PT}, None),
    ("PhD student with one GPU, exploring new architectures every week.", {PT}, None),
    # mature production + experienced team -> TensorFlow
    ("大公司，模型最终要部署到海量用户的产品里，团队工程经验丰富，选什么？", {TF}, None),
    ("Our enterprise needs an end-to-end production ML pipeline with mature tooling. What should we choose?", {TF}, None),
    # localisation and Chinese NLP -> PaddlePaddle
    ("项目有国产化要求，主要做中文 NLP，选哪个框架？", {PD}, None),
    ("We do Chinese NLP for an industrial search product.", {PD}, None),
    ("我们用昇腾 910B 训练，要求国产化。", {PD}, None),
    # TPUs, functional programming, scientific computing -> JAX
    ("We do physics simulations with functional programming on Google TPUs. Which framework should we use?", {JAX}, None),
    ("We like functional programming with jit and vmap for our research code.", {JAX}, None),
    ("Scientific computing: solving PDEs with differentiable simulators on GPUs.", {JAX}, None),
    # pre-training at 100B+ on large clusters -> Megatron-LM / DeepSpeed
    ("We want to pre-train a 175B model on a cluster of 2,000 GPUs.", {MG, DS}, {MG, DS}),
    ("公司有千卡集群，要从头预训练千亿参数的大模型。", {MG, DS}, {MG, DS}),
    # large models on few GPUs -> DeepSpeed ZeRO-Offload or Colossal-AI
    ("We have a single V100 GPU and want to train a 10-billion-parameter model. What can we use?", {DS, CA}, {DS, CA}),
    ("只有两张 24GB 显卡，想微调 130 亿参数的模型。", {DS, CA}, {DS, CA}),
    ("我们只有几张显卡，想训练超出显存的大模型，用什么？", {DS, CA}, None),
    # tensor / pipeline parallelism asked for -> Megatron-LM ("Megatron-LM擅长高效的模型并行")
    ("5000 亿参数的模型，必须上张量并行和流水线并行，集群 2048 卡，用哪个库效率最高？", {MG}, None),
    # Chinese material asked for -> PaddlePaddle ("中文文档和社区支持极具优势"); the team's stack decides
    ("做中文情感分析和命名实体识别，希望框架的中文资料和社区多一点，推荐哪个？", {PD}, None),
    ("Our platform team has run everything on TensorFlow and TFX for five years. New production model: switch or stay?",
     {TF}, None),
]


@pytest.mark.parametrize("text,accepted,top2", GUIDANCE, ids=[g[0][:40] for g in GUIDANCE])
def test_guidance(adv_service, text, accepted, top2):
    a = advise(adv_service, text).to_dict()
    names = [r["name"] for r in a["ranking"]]
    assert names[0] in accepted, (names[:3], a["summary"])
    if top2:
        assert set(names[:2]) == top2, names[:3]
    _check_traced(a)


def test_issue_questions_are_not_ties_and_say_the_margin(adv_service):
    for text, lang in (("Which framework is best for TPU training?", "en"),
                       ("我们是一个 5 人的创业团队，主要做 NLP 研究，应该选哪个框架？", "zh")):
        a = advise(adv_service, text).to_dict()
        assert a["tie"] is None and a["margin"]["value"] >= load_rubric().tie_epsilon
        assert a["language"] == lang and f"{a['margin']['value']:.2f}" in a["summary"]


def test_no_situation_is_the_article_default_in_both_languages(adv_service):
    # asking in Chinese is not a need for Chinese documentation: no tie with PaddlePaddle
    for text in ("训练模型用哪个框架好？", "What deep learning framework would you recommend by default?"):
        a = advise(adv_service, text).to_dict()
        assert a["ranking"][0]["name"] == PT and a["tie"] is None, a["summary"]


def test_tie_is_reported_with_what_decides(adv_service):
    # research (-> PyTorch) against Chinese NLP (-> PaddlePaddle): the article supports both
    a = advise(adv_service, "我们做中文 NLP 研究。").to_dict()
    assert a["tie"] is not None and set(a["tie"]["candidates"]) >= {PT, PD}
    assert "打平" in a["summary"]
    decides = {d["candidate"]: d["choose_if"] for d in a["tie"]["decides"]}
    assert decides[PT] and decides[PD]
    assert any("研究" in c["text"] for c in decides[PT]) and any("中文" in c["text"] for c in decides[PD])
    _check_traced(a)


def test_conversation_turns_change_the_choice(adv_service):
    first = situation_from_turns(["We are a small startup fine-tuning a 7B model on 8 GPUs."])
    later = situation_from_turns(["We are a small startup fine-tuning a 7B model on 8 GPUs.",
                                  "Change of plan: we will pre-train a 175B model on thousands of H100s."])
    a, b = advise(adv_service, first).to_dict(), advise(adv_service, later).to_dict()
    assert a["ranking"][0]["name"] in {PT, DS}
    assert b["ranking"][0]["name"] in {MG, DS} and b["scenario"]["accelerators"] == 1000
