"""The Advisor: rubric loading, scenario parsing (zh/en), scoring on hand-made scenarios with known outcomes,
determinism, and that every table cell cites a real passage of the index. Uses the real corpus index; the
Advisor must never call the language model (a service whose model raises proves it)."""
from __future__ import annotations

import argparse
import json

import pytest

from assistant.advisor import Advice, advise
from assistant.advisor.cli import add_arguments, run_advise
from assistant.advisor.evaluate import score_cases
from assistant.advisor.rubric import applies, criterion_score, load_rubric, resolve_facts, score
from assistant.advisor.scenario import Scenario, parse_free_text, parse_scale
from assistant.errors import UserError


# ---- pure parts ----------------------------------------------------------------------------------
@pytest.mark.parametrize("raw,params", [("7B", 7e9), ("300M", 3e8), ("1.5b", 1.5e9), ("175B", 1.75e11), ("千亿", 1e11),
                                        ("1750亿", 1.75e11), ("130 亿", 1.3e10), ("10-billion", 1e10), ("1T", 1e12)])
def test_parse_scale(raw, params):
    assert parse_scale(raw) == pytest.approx(params)


def test_parse_free_text_chinese():
    sc = parse_free_text("我们是5人初创团队，熟悉 PyTorch，要在昇腾 NPU 上预训练千亿参数的中文大模型，必须国产化。")
    assert sc.lang == "zh" and sc.known_frameworks == ["PyTorch"]
    assert sc.hardware == "npu" and "localisation" in sc.goals
    assert sc.params == pytest.approx(1e11) and sc.domain == "llm_pretrain"
    assert sc.org == "startup" and sc.team_size == 5 and sc.stage is None  # a start-up is an org, not a stage


def test_parse_free_text_english():
    sc = parse_free_text("Our team knows TensorFlow. We have Cloud TPU pods and deploy models to mobile phones.")
    assert sc.lang == "en" and sc.known_frameworks == ["TensorFlow"]
    assert sc.hardware == "tpu" and "mobile" in sc.goals and "cloud:gcp" in sc.goals
    sc2 = parse_free_text("A startup fine-tuning a 7B model on a few GPUs; we run out of GPU memory.")
    assert sc2.org == "startup" and sc2.stage is None and sc2.params == pytest.approx(7e9)
    assert sc2.domain == "llm_finetune" and sc2.hardware == "few_gpus" and "memory_limited" in sc2.goals
    assert parse_free_text("听说研究界更流行 PyTorch，团队都只用过 TensorFlow").known_frameworks == ["TensorFlow"]


def test_from_dict_explicit_fields_win_and_bad_values_are_user_errors():
    sc = Scenario.from_dict({"hardware": "few_gpus", "text": "我们有 TPU，想做长序列训练"})
    assert sc.hardware == "few_gpus" and "long_sequence" in sc.goals and sc.lang == "zh"
    with pytest.raises(UserError):
        Scenario.from_dict({"hardware": "quantum"})
    with pytest.raises(UserError):
        Scenario.from_dict({"known_frameworks": ["NotAFramework"]})


def test_rubric_loads_with_every_candidate_and_criterion_covered():
    r = load_rubric()
    assert r.candidates == ["PyTorch", "TensorFlow", "PaddlePaddle", "JAX", "PyTorch + DeepSpeed",
                            "PyTorch + Megatron-LM", "Colossal-AI"]
    assert max(r.weights, key=r.weights.get) == "team" and sum(r.weights.values()) == pytest.approx(1.0)
    for name in r.candidates:
        for crit in r.weights:
            assert any(f.candidate == name and f.criterion == crit for f in r.facts), (name, crit)
    assert all(f.claim["zh"] and f.claim["en"] and f.source and f.match for f in r.facts)


def test_conditions_and_criterion_score():
    r = load_rubric()
    fact = next(f for f in r.facts if f.id == "jax-hw-tpu")
    assert applies(fact, Scenario(hardware="tpu"), "JAX") and not applies(fact, Scenario(hardware="npu"), "JAX")
    knows = next(f for f in r.facts if f.id == "team-knows:PyTorch + DeepSpeed")
    assert applies(knows, Scenario(known_frameworks=["PyTorch"]), "PyTorch")
    assert not applies(knows, Scenario(known_frameworks=["JAX"]), "PyTorch")
    assert criterion_score(0, 4) == 0.5 and criterion_score(9, 4) == 1.0 and criterion_score(-2, 4) == 0.25


def test_unresolved_facts_are_dropped_from_scoring():
    r = load_rubric()
    sc = Scenario(hardware="tpu", stage="research", domain="scientific")
    all_ids = {f.id: None for f in r.facts}
    with_jax = score(r, sc, all_ids)
    without = score(r, sc, {k: v for k, v in all_ids.items() if not k.startswith("jax-")})
    assert with_jax[0].name == "JAX" and without[0].name != "JAX"


# ---- with the real index -------------------------------------------------------------------------
def test_every_fact_resolves_to_a_matching_passage(adv_service):
    r = load_rubric()
    for lang in ("zh", "en"):
        resolved = resolve_facts(adv_service, r, lang)
        missing = [f.id for f in r.facts if f.id not in resolved]
        assert not missing, missing
        for f in r.facts:
            hit = resolved[f.id]
            assert hit.chunk.source.endswith(f.source)
            assert any(m.lower() in hit.chunk.text.lower() for m in f.match)


@pytest.mark.parametrize("scenario,expected", [
    ({"hardware": "tpu", "domain": "scientific", "stage": "research"}, {"JAX"}),
    ({"text": "国企项目，要求国产化替代，硬件是昇腾 NPU，做中文文本分类。"}, {"PaddlePaddle"}),
    ({"known_frameworks": ["PyTorch"], "stage": "production", "hardware": "gpu_cluster", "model_scale": "175B",
      "domain": "llm_pretrain"}, {"PyTorch + Megatron-LM", "PyTorch + DeepSpeed"}),
    ({"known_frameworks": ["PyTorch"], "stage": "prototype", "hardware": "few_gpus", "model_scale": "13B",
      "domain": "llm_finetune", "goals": ["memory_limited"]}, {"PyTorch + DeepSpeed", "Colossal-AI"}),
    ({"stage": "production", "hardware": "cpu", "domain": "cv", "goals": ["mobile", "server"], "lang": "en"}, {"TensorFlow"}),
    ({"text": "PhD student with one GPU exploring new architectures, I know PyTorch and debug with pdb."}, {"PyTorch"}),
])
def test_known_outcomes(adv_service, scenario, expected):
    assert advise(adv_service, scenario).ranking[0].name in expected


def test_advice_structure_and_citations(adv_service):
    a = advise(adv_service, "我们熟悉 PyTorch，有 TPU，做物理模拟研究。")
    assert isinstance(a, Advice)
    d = a.to_dict()
    assert set(d) >= {"ranking", "table", "what_would_change", "trial_plan", "citations", "scenario", "language"}
    assert d["language"] == "zh" and len(d["ranking"]) == 7
    assert [r["name"] for r in d["ranking"]] == [row["name"] for row in d["table"]["rows"]]
    scores = [r["score"] for r in d["ranking"]]
    assert scores == sorted(scores, reverse=True)
    assert [c["n"] for c in d["citations"]] == list(range(1, len(d["citations"]) + 1))
    records = {c["n"]: c for c in d["citations"]}
    for c in d["citations"]:
        chunk = adv_service.passage(c["chunk_id"])
        assert chunk is not None and list(chunk.lines) == c["lines"] and c["snippet"][:50] in chunk.text
        assert set(c) >= {"n", "chunk_id", "title", "heading_path", "source", "lines", "snippet", "support", "supported"}
    for row in d["table"]["rows"]:
        assert set(row["cells"]) == set(d["table"]["criteria"]) == set(load_rubric().weights)
        for cell in row["cells"].values():
            assert cell["citations"] and all(n in records for n in cell["citations"]) and cell["text"]
    for r in d["ranking"]:
        assert r["reasons"] and all(x["citations"] and x["text"] for x in r["reasons"])
        assert set(r["criteria"]) == set(d["table"]["criteria"])
        assert {c["n"] for c in r["citations"]} <= set(records)
    tp = d["trial_plan"]
    assert tp["candidates"] == [d["ranking"][0]["name"], d["ranking"][1]["name"]] and tp["citations"]
    assert "简化版的训练Pipeline" in records[tp["citations"][0]]["snippet"]
    assert len(tp["measure"]) == 4


def test_what_would_change_reports_a_different_top(adv_service):
    d = advise(adv_service, {"known_frameworks": ["PyTorch"], "stage": "research", "hardware": "few_gpus",
                             "domain": "scientific", "lang": "en"}).to_dict()
    top = d["ranking"][0]["name"]
    assert d["what_would_change"]
    for w in d["what_would_change"]:
        assert w["new_top"] != top and w["citations"] and top in w["text"]
        alt = advise(adv_service, {**d["scenario"], **_changed(d["scenario"], w)}).to_dict()
        assert alt["ranking"][0]["name"] == w["new_top"]


def test_advice_among_the_compared_candidates_is_theirs_throughout(adv_service):
    """"PaddlePaddle or PyTorch?" for a team that knows TensorFlow: TensorFlow ranks first among all, but the ranking,
    table, margin, trial and what would change are the two compared (a change says which of them comes first)."""
    s = {"text": "8 GPUs, the team knows TensorFlow, a production recommender model", "lang": "en"}
    assert advise(adv_service, s).to_dict()["ranking"][0]["name"] == "TensorFlow"
    among = ("PaddlePaddle", "PyTorch")
    d = advise(adv_service, s, among).to_dict()
    assert d["compared"] == ["PyTorch", "PaddlePaddle"]  # in the rubric's order
    assert {r["name"] for r in d["ranking"]} == set(among) == {r["name"] for r in d["table"]["rows"]}
    assert set(d["trial_plan"]["candidates"]) == set(among) and {d["margin"]["top"], d["margin"]["runner_up"]} == set(among)
    assert d["what_would_change"] and all(w["new_top"] in among and "TensorFlow" not in w["text"]
                                          for w in d["what_would_change"])
    alone = advise(adv_service, s, ("PyTorch", "Keras")).to_dict()  # fewer than two of the rubric's: all ranked
    assert alone["compared"] == [] and alone["ranking"][0]["name"] == "TensorFlow"


def _changed(scenario: dict, w: dict) -> dict:
    if w["field"] == "known_frameworks":
        return {"known_frameworks": [w["value"]]}
    if w["field"] == "goals":
        return {"goals": [*scenario["goals"], w["value"]]}
    return {w["field"]: w["value"]}


def test_deterministic(adv_service):
    s = {"text": "We fine-tune a 7B model on 8 GPUs and run out of GPU memory with plain DDP.", "known_frameworks": ["PyTorch"]}
    assert json.dumps(advise(adv_service, s).to_dict()) == json.dumps(advise(adv_service, s).to_dict())


def test_score_cases_summary(adv_service):
    cases = [{"id": "a", "lang": "en", "scenario": {"hardware": "tpu", "domain": "scientific", "stage": "research"},
              "expected_top1": "JAX", "acceptable": ["JAX"]},
             {"id": "b", "lang": "en", "scenario": {"hardware": "tpu", "domain": "scientific", "stage": "research"},
              "expected_top1": "TensorFlow", "acceptable": ["TensorFlow", "JAX"]}]
    rows, summary = score_cases(adv_service, cases)
    assert summary["n"] == 2 and summary["top1_accuracy"] == 0.5 and summary["acceptable_top1"] == 1.0
    assert summary["cell_citation_validity"] == 1.0 and rows[0]["top1"] == "JAX"


def test_cli_json_and_text(adv_service, capsys):
    p = argparse.ArgumentParser()
    add_arguments(p)
    assert run_advise(adv_service, p.parse_args(["--text", "5人初创公司，只有几张 GPU", "--json"])) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["language"] == "zh" and out["ranking"][0]["name"] == "PyTorch" and out["table"]["rows"]
    assert run_advise(adv_service, p.parse_args(["--hardware", "tpu", "--domain", "rl", "--stage", "research"])) == 0
    text = capsys.readouterr().out
    assert text.startswith("Recommended: JAX") and "Sources:" in text and "[1]" in text
    assert run_advise(adv_service, p.parse_args(["--rubric"])) == 0
    assert "weights: team 0.25" in capsys.readouterr().out


def test_empty_scenario_is_a_user_error(adv_service):
    with pytest.raises(UserError):
        advise(adv_service, {"text": "", "lang": "zh"})


def test_ui_tab_renders_anchors_to_passages(adv_service):
    pytest.importorskip("gradio")
    from ui.advisor_tab import render_advice_html, scenario_from_form

    sc = scenario_from_form("", ["JAX"], "research", "tpu", "rl", "", [], "en")
    assert sc == {"text": "", "lang": "en", "stage": "research", "hardware": "tpu", "domain": "rl", "known_frameworks": ["JAX"]}
    page = render_advice_html(advise(adv_service, sc).to_dict())
    import re

    refs = set(re.findall(r"href='#adv-cite-(\d+)'", page))
    ids = set(re.findall(r"id='adv-cite-(\d+)'", page))
    assert refs and refs <= ids and "<table class='adv-table'>" in page
