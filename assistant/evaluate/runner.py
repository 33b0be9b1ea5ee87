"""Running gold sets through the AssistantService and writing results.jsonl, summary.json and report.html.

Owns: asking each case (every turn of a multi-turn case in one session; only the last answer is scored),
turning an Answer into a result row with its metrics and the stage where each key fact was lost (factloss.py), the ALCE judge pass, Advisor sets (delegated to
assistant.advisor.evaluate.score_cases, imported lazily) and the output files. Metric definitions live in
metrics.py, the judge in judge.py, the HTML in report.py.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from ..answer.citations import is_factual, parse_markers, quoted_claim
from ..errors import UserError
from ..interfaces import Answerer
from ..text import split_sentences
from ..types import Answer
from . import metrics as M
from .dataset import EvalCase, load_set
from .factloss import classify, loss_table
from .judge import make_judge

PASSAGE_CHARS = 800  # judge premise per cited passage: bounded so a 0.5B judge call stays ~2-3 s


def run_eval(service: Answerer, set_paths: list[Path], out_dir: Path, limit: int | None = None,
             baseline: Path | None = None, progress: bool = True, judge: str = "combined",
             judge_model: str | None = None) -> dict[str, Any]:
    """Evaluate every set, write the three output files into out_dir and return the summary."""
    from tqdm import tqdm

    sets = [load_set(Path(p), limit) for p in set_paths]
    problems = [p for s in sets for p in s.problems]
    for p in problems:
        print(f"warning: skipped malformed line {p}", file=sys.stderr)
    entail = make_judge(judge, _judge_llm(service, judge_model), service.embedder)
    rows: list[dict[str, Any]] = []
    cases = [(s.path.name, c) for s in sets for c in s.cases]
    for set_name, case in tqdm(cases, desc="eval", unit="case", file=sys.stderr, disable=not progress):
        rows.append(evaluate_case(service, case, entail, set_name))
    summary = M.aggregate(rows)
    summary["fact_loss"] = loss_table(rows)
    summary["sets"] = [str(s.path) for s in sets]
    summary["skipped_lines"] = problems
    summary["judge"] = {"mode": judge, "model": judge_model or "service"}
    advisor = _run_advisor_sets(service, [s for s in sets if s.is_advisor])
    if advisor:
        summary["advisor"] = advisor
    write_outputs(Path(out_dir), rows, summary, baseline)
    return summary


def _judge_llm(service: Answerer, judge_model: str | None) -> Any:
    if not judge_model:
        return service.llm
    from ..llm.factory import create_chat_model

    return create_chat_model(service.settings.model_copy(update={"model": judge_model}))


def ask_case(service: Answerer, case: EvalCase) -> Answer:
    """Ask every turn in one session; return the last answer."""
    session_id = None
    answer = None
    for turn in case.turns:
        answer = service.ask(turn, session_id=session_id)
        session_id = answer.session_id
    assert answer is not None
    return answer


def evaluate_case(service: Answerer, case: EvalCase, entail: Any, set_name: str = "") -> dict[str, Any]:
    """One result row: id, lang, kind, question, answer, citations, refused, metrics, timings, fact_loss."""
    row: dict[str, Any] = {"id": case.id, "set": set_name, "lang": case.lang, "kind": case.kind, "split": case.split,
                           "question": case.question, "turns": case.turns, "answer": "", "citations": [],
                           "refused": False, "metrics": {}, "timings": {}}
    try:
        answer = ask_case(service, case)
    except (UserError, RuntimeError) as e:  # one broken case must not stop the run
        row["error"] = str(e)
        row["metrics"] = {"fact_recall": M.fact_recall(case.answer_facts, ""),
                          "refusal_accuracy": M.refusal_correct(case.kind, False)}
        row["fact_loss"] = classify(case.answer_facts, None)
        return row
    ranked = _ranked_paths(service, answer, case)
    row.update(answer=answer.answer, refused=answer.refused, timings=answer.timings,
               citations=[c.to_dict() for c in answer.citations], standalone_question=answer.standalone_question,
               retrieved=ranked[:5], usage=answer.usage,
               raw_answer=(answer.diagnostics or {}).get("raw_answer", ""))
    row["metrics"] = score_answer(case, answer, ranked, _source_paths(service, answer), entail)
    row["unsupported"] = [] if answer.refused else unsupported_sentences(answer, entail)  # verdicts cached
    row["fact_loss"] = classify(case.answer_facts, answer.trace)
    return row


def unsupported_sentences(answer: Answer, entail: Any) -> list[dict[str, Any]]:
    """The factual sentences the judge did not find supported by their cited passages (none cited counts), for
    reading a run case by case; the judge's verdicts are cached, so this asks it nothing new."""
    passages = judged_passages(answer)
    return [{"sentence": text, "cited": list(dict.fromkeys(refs))} for text, refs in answer_sentences(answer.answer)
            if not M.cited_support(text, list(dict.fromkeys(refs)), passages, entail)]


def _cited_chunks(answer: Answer) -> dict[int, Any]:
    """[n] -> the chunk its citation opens (the answer's own numbering, Citation.n), or, for an answer without
    citation records, the n-th listed source."""
    by_id = {h.chunk.id: h.chunk for h in answer.sources}
    cited = {c.n: by_id[c.chunk_id] for c in answer.citations if c.chunk_id in by_id}
    return cited or {i + 1: h.chunk for i, h in enumerate(answer.sources)}


def premise(passage: str) -> str:
    """What the judge reads of one cited passage: its first PASSAGE_CHARS."""
    return passage[:PASSAGE_CHARS]


def judged_passages(answer: Answer) -> dict[int, str]:
    """What the judge reads for each [n]: the premise of the passage its citation opens."""
    return {n: premise(chunk.text) for n, chunk in _cited_chunks(answer).items()}


def score_answer(case: EvalCase, answer: Answer, ranked: list[str], source_paths: dict[int, str],
                 entail: Any) -> dict[str, float | None]:
    """Every case metric for one answer (None where it does not apply)."""
    m: dict[str, float | None] = {
        "fact_recall": M.fact_recall(case.answer_facts, answer.answer),
        "refusal_accuracy": M.refusal_correct(case.kind, answer.refused),
        "hit_at_1": M.hit_at_k(ranked, case.source_files, 1),
        "hit_at_5": M.hit_at_k(ranked, case.source_files, 5),
        "mrr": M.reciprocal_rank(ranked, case.source_files),
        "citation_validity": None, "citation_source_hit": None,
        "citation_recall": None, "citation_precision": None,
        "selection_lead": M.selection_lead(answer.answer, case.accept, answer.refused), "selection_pass": None,
    }
    if answer.refused:
        if case.accept:
            m["selection_pass"] = 0.0
        return m
    valid = {c.n for c in answer.citations} or set(source_paths)
    m["citation_validity"] = M.citation_validity(answer.answer, valid)
    cited = [source_paths[n] for n in M.citation_markers(answer.answer) if n in source_paths]
    m["citation_source_hit"] = M.citation_source_hit(cited, case.source_files)
    sentences = answer_sentences(answer.answer)
    m["citation_recall"], m["citation_precision"] = M.alce_citation_scores(sentences, judged_passages(answer), entail)
    if case.accept:  # the recommendation leads, and every cited reason is supported by its passage
        m["selection_pass"] = float(bool(m["selection_lead"]) and m["citation_recall"] == 1.0)
    return m


def answer_sentences(text: str) -> list[tuple[str, list[int]]]:
    """(sentence without markers, its [n]) for each factual sentence; short connective text is not scored."""
    out = []
    for s in split_sentences(text):
        plain, nums = parse_markers(s)
        if is_factual(plain) and plain.rstrip()[-1:] not in ":：":  # a lead-in ("For your situation (...):") claims nothing
            out.append((quoted_claim(plain), nums))
    return out


def _source_paths(service: Answerer, answer: Answer) -> dict[int, str]:
    """Source number -> file path of the passage (Citation.source may be a URL; paths come from the chunk)."""
    return {n: chunk.source for n, chunk in _cited_chunks(answer).items()}


def _ranked_paths(service: Answerer, answer: Answer, case: EvalCase) -> list[str]:
    """Retrieval ranking for hit@k/MRR: the passages an answer to the standalone question retrieves, as it ranks
    them (refused answers have no sources)."""
    if not case.source_files:
        return []
    hits = service.answer_hits(answer.standalone_question or case.question, k=5)
    return [h.chunk.source for h in hits]


def _run_advisor_sets(service: Answerer, sets: list[Any]) -> dict[str, Any]:
    if not sets:
        return {}
    try:
        from ..advisor.evaluate import score_cases
    except ImportError as e:
        return {"skipped": True, "reason": f"assistant.advisor.evaluate is not available ({e})",
                "sets": [str(s.path) for s in sets]}
    cases = [row for s in sets for row in s.scenarios]
    rows, summary = score_cases(service, cases)
    return {**summary, "n": len(cases), "rows": rows, "sets": [str(s.path) for s in sets]}


def write_outputs(out_dir: Path, rows: list[dict[str, Any]], summary: dict[str, Any],
                  baseline: Path | None) -> None:
    from .report import write_report

    out_dir.mkdir(parents=True, exist_ok=True)
    with (out_dir / "results.jsonl").open("w", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    (out_dir / "summary.json").write_text(json.dumps(summary, ensure_ascii=False, indent=2), encoding="utf-8")
    write_report(out_dir / "report.html", rows, summary, load_baseline(baseline))


def load_baseline(baseline: Path | None) -> dict[str, Any] | None:
    """A previous summary, given its output directory or its summary.json."""
    if baseline is None:
        return None
    p = Path(baseline)
    p = p / "summary.json" if p.is_dir() else p
    return json.loads(p.read_text(encoding="utf-8")) if p.exists() else None
