"""An answer keeps the question's language on every path, with every packaged model: asked, then regenerated twice
(each regeneration samples hotter, which is when the small models drift into the language of their evidence: the
notes have Chinese sections). Real service, real index of corpus/, the pinned article, real GGUF models."""
from __future__ import annotations

from pathlib import Path

import pytest

from assistant.lang import off_language
from assistant.settings import load_settings

pytestmark = pytest.mark.slow

CASES = [("fast", "What does ZeRO stage 3 partition in DeepSpeed?", "en"),
         ("fast", "DeepSpeed 的 ZeRO 第 3 阶段切分了哪些东西？", "zh"),
         ("default", "What does ZeRO stage 3 partition in DeepSpeed?", "en"),
         ("default", "DeepSpeed 的 ZeRO 第 3 阶段切分了哪些东西？", "zh"),
         ("tiny", "What does ZeRO stage 3 partition in DeepSpeed?", "en")]  # tiny is English-only


@pytest.mark.parametrize(("model", "question", "lang"), CASES)
def test_regenerate_keeps_the_questions_language(model: str, question: str, lang: str, corpus_index: Path,
                                                 tmp_path: Path) -> None:
    from assistant.service import AssistantService

    svc = AssistantService(load_settings(index_dir=corpus_index, state_dir=tmp_path, model=model,
                                         max_answer_tokens=120))
    try:
        svc.load(warm=True)
        first = svc.ask(question)
        answers = [first] + [svc.regenerate(first.session_id) for _ in range(2)]
        for a in answers:
            assert a.language == lang and not a.refused, a.answer
            assert a.answer.strip() and not off_language(a.answer, lang), (model, a.answer, a.diagnostics)
        assert answers[-1].alternatives == 3
    finally:
        svc.close()
