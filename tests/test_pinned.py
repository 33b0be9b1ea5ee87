"""The pinned context (assistant/answer/pinned.py): the reference article always in the model's context as the
prefix every fact answer starts with, its passages cited like any other, the pins a user sets within the budget.

Real index (real embedder, real Chroma), real 0.5B model for the answers, real HTTP against `assistant serve`.
The prefix's KV cache (kept, reused, rebuilt) is tested on the engine in test_llm.py.
"""
from __future__ import annotations

import json
import threading
from pathlib import Path

import httpx
import pytest
from httpkit import error_of

from assistant.answer import pinned as pinning
from assistant.answer.citations import CitationChecker, renumber
from assistant.answer.pipeline import extra_hits
from assistant.answer.pipeline import focus as focus_of
from assistant.answer.policy import RefusalThresholds, decide
from assistant.answer.prompt import build_messages
from assistant.errors import UserError
from assistant.text import rough_tokens
from assistant.types import Citation, Hit

# a hand translation of the article's closing advice: its passage's reading in English
CLOSING_ADVICE_EN = (
    "In short, there is no single right answer to which framework's training support to choose. The best advice: for "
    "a core project, take some time to run a simplified training pipeline on your real data with the two most likely "
    "candidate frameworks, and feel the differences in development efficiency, ease of debugging, training speed and "
    "resource use.")


def _article(service) -> pinning.PinnedContext:
    return service.pinned_context()


def test_the_article_is_pinned_by_default_in_reading_order_under_its_headings(service) -> None:
    ctx = _article(service)
    assert ctx.sources and all("/article/" in s for s in ctx.sources)
    assert ctx.k == len([c for c in service.retriever.snap.chunks if c.source in ctx.sources])
    starts = [c.lines[0] for c in ctx.chunks]
    assert starts == sorted(starts)
    assert "[1] " in ctx.system and f"[{ctx.k}] " in ctx.system and f"[{ctx.k + 1}] " not in ctx.system
    assert "计算图管理" in ctx.system and "## 一、训练支持的“核心三要素”" in ctx.system
    assert ctx.tokens == service.llm.count_tokens(ctx.system) <= service.settings.pinned_token_budget
    assert [s.n for s in ctx.numbered()] == list(range(1, ctx.k + 1))


def test_pins_beyond_the_budget_are_refused_in_both_languages(service) -> None:
    chunks = service.retriever.snap.chunks
    with pytest.raises(UserError) as err:
        pinning.build(chunks, list(_article(service).sources), rough_tokens, budget=500)
    assert err.value.status == 409 and "500" in err.value.en and "预算" in err.value.zh
    assert pinning.build(chunks, ["no/such/file.md"], rough_tokens, budget=500) is pinning.NONE


def test_only_passages_ranked_above_the_pinned_ones_follow_the_prefix(service) -> None:
    ctx = _article(service)
    article, other = ctx.chunks[0], next(c for c in service.retriever.snap.chunks if not ctx.holds(c))
    hit = lambda c: Hit(chunk=c, score=1.0)  # noqa: E731
    assert extra_hits([hit(article), hit(other)], ctx) == []  # the best match is pinned: no passage added
    assert extra_hits([hit(other), hit(article), hit(other)], ctx) == [hit(other)]
    assert extra_hits([hit(other), hit(article)], pinning.NONE) == [hit(other), hit(article)]
    assert extra_hits([hit(other), hit(article)], ctx, article=True) == []  # the Route says the article answers it


def test_citations_are_numbered_in_the_order_the_answer_cites_them() -> None:
    def cite(n: int) -> Citation:
        return Citation(n=n, chunk_id=f"c{n}", title="", heading_path=[], source="s", lines=[1, 2], snippet="x",
                        support=0.5)

    text, cites = renumber("A [13]. B [7][13]. C x[0].", [cite(7), cite(13)])
    assert text == "A [1]. B [2][1]. C x[0]." and [(c.n, c.chunk_id) for c in cites] == [(1, "c13"), (2, "c7")]


@pytest.mark.slow
def test_an_article_question_is_answered_from_the_prefix_and_cites_the_article(service) -> None:
    ctx = _article(service)
    answer = service.ask("评价一个框架的训练支持能力，主要看哪几个核心要素？")
    assert not answer.refused and answer.citations
    assert answer.usage["prompt_tokens"] > ctx.tokens  # the whole article was in the prompt
    assert any(c.source in ctx.sources for c in answer.citations)
    assert [c.n for c in answer.citations] == list(range(1, len(answer.citations) + 1))
    for c in answer.citations:  # every [n] opens the passage it names
        assert service.passage(c.chunk_id) is not None and f"[{c.n}]" in answer.answer
    assert service.llm.last_usage.extra["cached_tokens"] >= ctx.tokens - 8  # the prefix was not prefilled again


@pytest.mark.slow
def test_pins_over_http_list_pin_unpin_and_refuse(fast_server) -> None:
    base = fast_server.base
    with httpx.Client(base_url=base, timeout=120) as http:
        before = http.get("/api/pinned").json()
        assert before["enabled"] and before["sources"] and before["tokens"] <= before["budget"]
        docs = http.get("/api/documents").json()["documents"]
        assert {d["source"] for d in docs if d["pinned"]} == set(before["sources"])
        article = before["sources"][0]  # a source path: the pin routes take ids, sources or names
        big = max((d for d in docs if not d["pinned"]), key=lambda d: d["chunks"])
        assert big["chunks"] >= 10  # with the article, a page this long is beyond the default budget
        r = http.put(f"/api/documents/{big['id']}/pin", headers={"Accept-Language": "zh-CN"})
        assert r.status_code == 409 and "预算" in error_of(r)["message"]
        assert http.get("/api/pinned").json() == before  # nothing changed
        r = http.put("/api/documents/no-such-document/pin")
        assert r.status_code == 404 and "no-such-document" in error_of(r)["message"]
        try:
            r = http.delete(f"/api/documents/{article}/pin")
            assert r.status_code == 200 and r.json()["sources"] == [] and r.json()["tokens"] == 0
        finally:
            restored = http.put(f"/api/documents/{article}/pin")
        assert restored.status_code == 200 and restored.json()["sources"] == before["sources"]


def test_the_pinned_passages_closest_to_a_question_in_the_other_language_are_named_in_its_turn(service) -> None:
    ctx = _article(service)
    q = "Which trend does the guide describe as making distributed training accessible to everyone?"
    near = service.retriever.similarities(q, ctx.chunks)
    assert len(near) == ctx.k
    focus = focus_of(near, 2)
    assert len(focus) == 2 and near[focus[0] - 1] == max(near)
    assert "平民化" in ctx.chunks[focus[0] - 1].text  # the trend's own passage, found across languages
    user = build_messages(q, [], "en", system=ctx.system, focus=focus)[-1]["content"]
    assert f"most related to the question: [{focus[0]}], [{focus[1]}]." in user
    assert "most related" not in build_messages(q, [], "en", system=ctx.system)[-1]["content"]  # no focus: no line
    assert focus_of(near, 0) == [] and focus_of([], 2) == []


def test_a_pinned_passage_is_as_close_as_the_closer_of_its_own_words_and_its_twins(service) -> None:
    """An English question is far from the Chinese passage that answers it and close to its English twin: the
    closeness the refusal and the focus line read is the closer of the two readings (the twin's text here is a
    hand translation of the closing advice)."""
    ctx = _article(service)
    i = next(i for i, c in enumerate(ctx.chunks) if "简化版的训练Pipeline" in c.text)
    english = CLOSING_ADVICE_EN
    texts = [english if j == i else c.text for j, c in enumerate(ctx.chunks)]
    q = "If I test two frameworks on our own data, what should I compare between them?"
    own = service.retriever.similarities(q, ctx.chunks)
    both = service.retriever.similarities(q, ctx.chunks, texts=texts)
    assert both[i] > own[i] + 0.02 and both[i] == max(both), (own[i], both[i], max(both))
    assert all(b >= o for b, o in zip(both, own, strict=True))  # never farther than in the documents' own words
    assert service.retriever.similarities(q, ctx.chunks, texts=texts) == both  # the twin's vectors are kept


def test_a_pinned_passage_ranks_as_the_better_of_its_own_words_and_its_reading_in_the_questions_language(
        service) -> None:
    """Search reads a pinned passage also through its twin (`readings`): the English question about the article's
    closing advice ranks the Chinese passage far down on its own words, and first once its English reading is given,
    so no passage of another document is put before it in the user's turn (extra_hits)."""
    ctx = _article(service)
    i = next(i for i, c in enumerate(ctx.chunks) if "简化版的训练Pipeline" in c.text)
    english = CLOSING_ADVICE_EN
    q = "If I test two frameworks on our own data, what should I compare between them?"
    own = service.retriever.search(q, k=5)
    read = service.retriever.search(q, k=5, readings={ctx.chunks[i].id: english})
    assert ctx.chunks[i].id not in [h.chunk.id for h in own[:1]] and extra_hits(own, ctx)
    assert read[0].chunk.id == ctx.chunks[i].id and extra_hits(read, ctx) == [], [h.chunk.source for h in read]
    assert read[0].dense >= max(service.retriever.similarities(q, ctx.chunks, texts=[
        english if j == i else c.text for j, c in enumerate(ctx.chunks)])) - 1e-6
    chinese = "两个候选框架用自己的数据试一下，要比较哪些方面？"  # a question in the passage's own language: no change
    assert [h.chunk.id for h in service.retriever.search(chinese, k=5, readings={ctx.chunks[i].id: english})] == \
        [h.chunk.id for h in service.retriever.search(chinese, k=5)]


def test_a_text_outside_the_index_gets_the_bm25_score_it_would_have_inside(service) -> None:
    """`KeywordIndex.score_texts` (a reading's keyword score) reproduces the index's own BM25 for an indexed chunk."""
    from assistant.index.keyword import keyword_text
    from assistant.text import tokenize

    r = service.retriever
    tokens = tokenize("ZeRO stage 3 partitions optimizer states gradients parameters")
    best = r.snap.keyword.search(tokens, k=3)
    texts = [keyword_text(r.snap.chunks[row]) for row, _ in best]
    got = r.snap.keyword.score_texts(tokens, texts, r._avgdl())
    assert got == pytest.approx([s for _, s in best], rel=1e-4) and got[0] > 0


def test_the_keyword_index_keeps_its_chunks_mean_length(service, tmp_path) -> None:
    """The mean length BM25 scores an outside text with is saved with the index at build time (no tokenizing every
    chunk on the first question that needs it) and equals the one computed from the chunks."""
    from assistant.index.keyword import KeywordIndex, keyword_text
    from assistant.text import tokenize

    chunks = service.retriever.snap.chunks
    computed = sum(len(tokenize(keyword_text(c))) or 1 for c in chunks) / len(chunks)
    assert service.retriever.snap.keyword.mean_length == pytest.approx(computed)
    KeywordIndex.build(["ZeRO stage 3 partitions parameters", "飞桨 分布式 训练"]).save(tmp_path)
    assert KeywordIndex.load(tmp_path).mean_length == pytest.approx(
        (len(tokenize("ZeRO stage 3 partitions parameters")) + len(tokenize("飞桨 分布式 训练"))) / 2)
    (tmp_path / "mean_length.json").unlink()
    assert KeywordIndex.load(tmp_path).mean_length is None  # an index saved before: the retriever computes it


def test_closeness_to_the_pinned_article_is_evidence_and_an_off_topic_question_stays_refused(service) -> None:
    ctx = _article(service)
    other = [c for c in service.retriever.snap.chunks if not ctx.holds(c)][:3]
    weak = [Hit(chunk=c, score=0.2, dense=0.2) for c in other]  # what English notes score for an article question
    q = "What is the first question a team should ask itself about its own skills?"
    assert decide(q, weak).reason == "weak_evidence"
    close = max(service.retriever.similarities(q, ctx.chunks))
    assert close >= RefusalThresholds().min_dense and not decide(q, weak, pinned_dense=close).refuse
    off = "What is the capital of Australia?"
    assert max(service.retriever.similarities(off, ctx.chunks)) < RefusalThresholds().min_dense
    assert decide(off, service.retriever.search(off, k=5),
                  pinned_dense=max(service.retriever.similarities(off, ctx.chunks))).refuse


def test_a_question_about_what_the_article_says_reads_the_whole_article_and_is_never_answered_by_a_quote(
        service) -> None:
    """A question that points at the pinned article is answered from it however far its words are from each passage
    ("what does the article advise": close to none of its sentences); one whose answer the article lacks is refused,
    not answered with the closest sentence; a subject the documents never name is still refused."""
    def route(q: str):
        found = service.answerer.retrieve(q, "zh")
        return service.answerer.route(q, q, "zh", found, None, [])[0]

    asked = "文章最后给了什么建议？"
    assert route(asked).decision.reason == "about_pinned" and not route(asked).decision.refuse
    assert route("最后给了什么建议？").decision.reason == "weak_evidence"  # the same words, not about the article
    assert route("文章里提到北京的天气了吗？").decision.reason == "off_subject"
    closing = [s.n for s in _article(service).numbered() if "简化版的训练" in s.text]
    kept = service.answerer.check_draft(asked, f"文章建议在两个最可能的候选框架上各跑一个简化版的训练Pipeline[{closing[0]}]。")
    assert kept is not None and not kept.refused and kept.citations
    lacking = service.answerer.check_draft("这篇文章的作者是谁？", "这篇文章的作者是张三。")
    assert lacking is not None and lacking.refused and not lacking.citations
    assert lacking.diagnostics["fallback"] == ""


def test_a_sentence_listing_the_items_of_a_section_cites_each_item_passage(service) -> None:
    ctx = _article(service)
    src = ctx.numbered()
    items = [s.n for s in src if len(s.hit.chunk.heading_path) == 3 and "一、" in s.hit.chunk.heading_path[1]]
    assert len(items) == 3  # the article's three core elements, a passage each under their own heading
    checker = CitationChecker(service.embedder, service.pipeline_config.support_threshold)
    listed = checker.check("评价框架主要看计算图管理、分布式训练能力、生态与工具链。", src)
    assert all(f"[{n}]" in listed.text for n in items) and {c.n for c in listed.citations} >= set(items)
    english = checker.check("The three core elements are computational graph management, distributed training "
                            "capability, and the ecosystem and toolchain.", src)
    assert {c.n for c in english.citations} >= set(items[1:])
    # one item named beside something no passage says is not a listing: removed
    assert checker.check("主要看计算图管理和天气预报。", src).text == ""


@pytest.mark.slow
def test_a_process_that_never_loaded_reuses_the_prefix_file_and_a_selection_answer_costs_no_second_prefill(
        service, fast_settings) -> None:
    """`assistant ask` and `assistant eval` never call load(): their first fact answer loads the prefix file the
    server wrote (no 3k-token prefill), and a selection answer's short prompt, which displaces the prefix from the
    KV cache, is followed by a fact answer that copies it back instead of prefilling it."""
    from assistant.service import AssistantService

    ctx = _article(service)
    writer = AssistantService(fast_settings)  # one process: its first fact answer keeps the prefix in its file
    try:
        assert not writer.ask("PaddlePaddle 是由哪家公司主导开发的？").refused
    finally:
        writer.close()
    cold = AssistantService(fast_settings)  # the next process loads it
    try:
        first = cold.ask("PaddlePaddle 是由哪家公司主导开发的？")
        assert not first.refused and cold.llm.warmed_from == "disk"
        assert cold.llm.last_usage.extra["cached_tokens"] >= ctx.tokens - 8
        chosen = cold.ask("我们是 5 个人的研究小组，做新模型结构的探索，只有 4 张 3090，训练框架选哪个？")
        assert chosen.advice is not None  # the Advisor's path, with its own short prompt
        again = cold.ask("PyTorch 由哪家公司主导？")
        assert not again.refused and cold.llm.last_usage.extra["cached_tokens"] >= ctx.tokens - 8
    finally:
        cold.close()


def _first_passages(service, k: int = 3) -> pinning.PinnedContext:
    ctx = _article(service)
    chunks = list(ctx.chunks[:k])
    system = pinning.render(chunks)
    return pinning.PinnedContext(ctx.sources, tuple(chunks), system, service.llm.count_tokens(system))


@pytest.mark.slow
def test_the_twin_is_translated_once_kept_on_disk_and_translated_again_only_where_a_passage_changed(
        service, tmp_path, caplog) -> None:
    """An English question reads the Chinese article's English twin: each passage translated once by the model and
    kept; a new process reuses the file; a changed passage alone is translated again; a damaged file is rebuilt."""
    import dataclasses

    from assistant.answering.twin import Twins
    from assistant.text import cjk_count

    llm = service.llm

    def twins() -> Twins:
        return Twins(tmp_path, lambda: llm, lambda: llm, lambda: 4000)

    ctx = _first_passages(service)
    started = threading.Event()

    def translating_model():
        started.set()
        return llm

    first = Twins(tmp_path, translating_model, lambda: llm, lambda: 4000)
    assert first.of(ctx, "zh") is ctx  # Chinese questions read the article as it is
    built: list[pinning.PinnedContext] = []
    builder = threading.Thread(target=lambda: built.append(first.of(ctx, "en")))  # a server's background build
    builder.start()
    assert started.wait(60)
    assert first.of(ctx, "en") is ctx  # a question meanwhile does not wait for the translations
    builder.join(300)
    (twin,) = built
    assert first.translated == 3 and twin.lang == "en" and twin.chunks == ctx.chunks
    assert first.of(ctx, "en") is twin
    assert all(cjk_count(t) < cjk_count(c.text) / 3 for t, c in zip(twin.texts, ctx.chunks, strict=True))
    assert twin.system != ctx.system and all(t.split()[0] in twin.system for t in twin.texts)
    # the check reads the translation, the citation opens the original passage
    assert [s.hit.chunk.id for s in twin.numbered()] == [c.id for c in ctx.chunks]
    assert [s.text for s in twin.numbered()] == list(twin.texts)
    assert [s.text for s in twin.originals()] == [c.text for c in ctx.chunks]

    again = twins()  # another process: the translations come from the file
    assert again.of(ctx, "en").texts == twin.texts and again.translated == 0

    changed = dataclasses.replace(ctx.chunks[1], text=ctx.chunks[1].text + "另外，它还支持混合精度训练。")
    chunks = (ctx.chunks[0], changed, ctx.chunks[2])
    edited = pinning.PinnedContext(ctx.sources, chunks, pinning.render(list(chunks)), 0)
    assert again.of(edited, "en").texts[::2] == twin.texts[::2] and again.translated == 1

    (path,) = (tmp_path / "twin").glob("translations-*.json")
    path.write_text('{"format": 1, "entries": [', encoding="utf-8")
    damaged = twins()
    with caplog.at_level("WARNING", logger="assistant.answering.twin"):
        assert damaged.of(ctx, "en").lang == "en"
    assert damaged.translated == 3 and any("not read" in r.getMessage() for r in caplog.records)
    assert len(json.loads(path.read_text(encoding="utf-8"))["entries"]) == 3  # whole again


def test_a_refused_question_in_the_other_language_builds_no_twin(fast_settings, tmp_path: Path) -> None:
    """An off-topic English question is refused without the twin's translations (minutes on a first start) being
    made: the refusal reads a twin only once it is translated."""
    from assistant.service import AssistantService

    svc = AssistantService(fast_settings)
    try:
        twins = svc.pins.twins
        assert twins is not None
        kept, twins.dir = twins.dir, tmp_path / "twin"  # a first start: no translations on disk
        ans = svc.ask("Give me a recipe for dumplings.")
        assert ans.refused and twins.built() == [] and twins.translated == 0 and not twins.dir.exists()
        twins.dir = kept
        svc.ask("What are the three core elements for judging a framework's training support?")
        assert twins.built() == ["en"]
    finally:
        svc.close()


def test_an_english_question_reads_the_english_twin_and_its_citations_quote_the_original(service) -> None:
    """The prompt of an English article question starts with the twin (a server caches its prefix), a Chinese one
    with the article itself; the citation check scores a claim against the article's own words, so a citation's
    snippet is the article's sentence."""
    from assistant.answer.citations import CitationChecker, split_sentences

    zh, en = _article(service), service.pinned_context(None, "en")
    assert en.lang == "en" and en.chunks == zh.chunks and en.system != zh.system
    assert service.pins.prefixes() == [en.system, zh.system]  # what a server makes cached prefixes after ready
    messages = service.answerer.prompt_messages("What are the three core elements for judging a framework's "
                                                "training support?")
    assert messages[0]["content"] == en.system
    assert service.answerer.prompt_messages("评价框架训练支持能力主要看哪几个核心要素？")[0]["content"] == zh.system

    source = next(s for s in en.numbered() if "分布式" in s.hit.chunk.text and len(s.text) > 80)
    claim = max(split_sentences(source.text), key=len)  # the twin's words, as the model read them
    checked = CitationChecker(service.embedder).check(f"{claim} [{source.n}]", en.numbered())
    assert [c.chunk_id for c in checked.citations] == [source.hit.chunk.id]
    assert checked.citations[0].snippet in source.hit.chunk.text  # the article's sentence, not the translation


def test_a_refused_question_never_loads_the_model_and_the_vocabulary_counts_as_the_model(fast_settings) -> None:
    """Sizing the pinned context (and finding its English twin's translations) needs the model's token count and
    name, not its weights: a one-shot `assistant ask` that the policy refuses loaded the 1.5B model (0.7 s, RSS 2.2 GB)
    only to count (bench/oneshot.py). The count from the vocabulary alone is the model's."""
    from assistant.service import AssistantService

    svc = AssistantService(fast_settings)
    try:
        for question in ("明天北京天气怎么样？", "What is a good recipe for pork dumplings?"):
            assert svc.ask(question).refused, question
        assert not svc.engines.model_loaded
        texts = [svc.pinned_context().system, "ZeRO-3 的 offload_param [1]", "<|im_start|>user"]
        counts = [svc.engines.count_tokens(t) for t in texts]
        assert counts[0] > 1000 and not svc.engines.model_loaded
        assert [svc.llm.count_tokens(t) for t in texts] == counts
    finally:
        svc.close()
