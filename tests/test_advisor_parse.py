"""The free-text situation parser on eval/advisor_parse.jsonl (people's own phrasings, zh and en, single
messages and multi-turn conversations): per-field accuracy, printed, and at least 0.95 overall. Also the
quantity readers and the turn merge on their own. Pure parsing: no index, no model."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from assistant.advisor.evaluate import score_parse_cases
from assistant.advisor.quantities import accelerator_count, accelerator_kind, cn_number, team_size
from assistant.advisor.scenario import FEW_GPUS_MAX, Scenario, merge_situation, parse_free_text, situation_from_turns

PARSE_SET = Path(__file__).resolve().parents[1] / "eval" / "advisor_parse.jsonl"


def _cases() -> list[dict]:
    return [json.loads(line) for line in PARSE_SET.read_text(encoding="utf-8").splitlines() if line.strip()]


def test_parse_set_shape():
    cases = _cases()
    assert len(cases) >= 60
    langs = [c["lang"] for c in cases]
    assert 0.4 <= langs.count("zh") / len(cases) <= 0.6
    assert sum(1 for c in cases if c.get("turns")) >= 4
    assert len({c["id"] for c in cases}) == len(cases)


def test_parse_set_score(capsys):
    rows, summary = score_parse_cases(_cases())
    with capsys.disabled():
        print(f"\nparse set: {summary['n']} phrasings, {summary['fields']} fields, overall {summary['overall']:.4f}, "
              f"by language {summary['by_lang']}")
        for name, f in summary["per_field"].items():
            print(f"  {name:17s} {f['accuracy']:.4f}  (n={f['n']})")
        if summary["misses"]:
            print("  misses:", ", ".join(summary["misses"]))
    assert summary["overall"] >= 0.95, summary["misses"]


@pytest.mark.parametrize("text,count", [
    ("64 GPUs", 64), ("8×A100", 8), ("两台 8 卡机器", 16), ("千卡集群", 1000), ("4 张 3090", 4), ("万卡集群", 10000),
    ("两机十六卡", 16), ("单机八卡", 8), ("a cluster of 2,000 GPUs", 2000), ("a 256-GPU cluster", 256),
    ("2 nodes with 8 V100 each", 16), ("只有两张 24GB 显卡", 2), ("a single 32GB V100 GPU", 1), ("TPU v4 pod", None),
    ("24GB of GPU memory", None), ("3090 显卡", None)])
def test_accelerator_count(text, count):
    assert accelerator_count(text) == count


def test_accelerator_kind_and_numbers():
    assert accelerator_kind("昇腾 910B") == "Ascend 910B" and accelerator_kind("TPU v4 pod") == "TPU v4"
    assert accelerator_kind("4 张 3090") == "RTX 3090" and accelerator_kind("8 A100s") == "A100"
    assert [cn_number(s) for s in ("八", "十六", "六十四", "一百二十八", "千", "两")] == [8, 16, 64, 128, 1000, 2]
    assert team_size("5 人的创业团队") == 5 and team_size("a team of five researchers") == 5 and team_size("64 GPUs") is None


def test_hardware_buckets_follow_the_count():
    for n, bucket in ((1, "few_gpus"), (FEW_GPUS_MAX, "few_gpus"), (FEW_GPUS_MAX + 8, "gpu_cluster"), (64, "gpu_cluster")):
        assert parse_free_text(f"We have {n} GPUs.").hardware == bucket
    assert parse_free_text("How do I train a 70B model on 64 GPUs?").hardware == "gpu_cluster"


@pytest.mark.parametrize("text,params", [("70B", 7e10), ("700亿参数", 7e10), ("千亿参数", 1e11), ("1.5 trillion parameters", 1.5e12),
                                         ("a 7b model", 7e9), ("13 billion parameters", 1.3e10), ("七百亿参数", 7e10),
                                         ("5000 万参数", 5e7)])
def test_model_size_units(text, params):
    assert parse_free_text(text).params == pytest.approx(params)


def test_counts_that_are_not_model_sizes():
    assert parse_free_text("We train on 2T tokens with 8 GPUs.").params is None
    assert parse_free_text("The app serves 5 million users.").params is None


def test_merge_later_statements_override():
    first = parse_free_text("We know PyTorch and fine-tune a 7B model on 8 GPUs for NLP.")
    sc = merge_situation(first, "Now we have 64 GPUs and the model is 70B.")
    assert sc.accelerators == 64 and sc.hardware == "gpu_cluster" and sc.params == pytest.approx(7e10)
    assert sc.known_frameworks == ["PyTorch"]  # not restated: kept
    assert "64 GPUs" in sc.text and "7B" in sc.text
    tpu = merge_situation(sc, "Actually we'll use TPUs.")
    assert tpu.hardware == "tpu" and tpu.accelerators is None
    zh = merge_situation(tpu, "团队其实更熟悉 JAX。")
    assert zh.known_frameworks == ["JAX"] and zh.lang == "zh"
    assert merge_situation(None, "64 GPUs").accelerators == 64
    assert situation_from_turns([]) == Scenario()


def test_pre_training_said_alone_switches_a_language_model_s_task():
    """Held out (now dev): "如果换成 64 张卡做预训练呢？" after a fine-tuning situation kept "大模型微调": the message names
    no model, so its own parse could not tell what "预训练" trains. Read with the conversation, it switches the task;
    without a language model before it, it stays what the message alone says."""
    zh = situation_from_turns(["我们是一个 6 人的创业团队，做中文客服大模型微调，只有 4 张 A100，选什么框架？",
                               "如果换成 64 张卡做预训练呢？"])
    assert zh.domain == "llm_pretrain" and zh.accelerators == 64 and zh.team_size == 6
    en = situation_from_turns(["We are a small startup pre-training a 7B model.", "What if we only fine-tune instead?"])
    assert en.domain == "llm_finetune"
    assert situation_from_turns(["We do image classification on 4 GPUs.", "What about pretraining?"]).domain == "cv"


def test_negated_experience_is_not_known():
    assert parse_free_text("We have never used JAX; we work with PyTorch.").known_frameworks == ["PyTorch"]
    assert parse_free_text("没用过 JAX，一直在用 PyTorch").known_frameworks == ["PyTorch"]
