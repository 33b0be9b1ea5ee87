"""Replay the answer pipeline on the gold sets with a deterministic model, to show a change keeps behaviour.

Every gold question (follow-ups in their sessions) goes through the real service: follow-up rewrite, retrieval,
refusal policy, evidence, prompt, citation check. The model is ScriptedChatModel answering with the first
sentence of each of the first three sources, cited [1]..[3], plus one uncited and one mis-cited sentence, so
the check has work to do. Each case prints one JSON line: a digest of every prompt, the checked answer, its
citations (chunk, lines, support), refused, and the Advisor's ranking for the Advisor set.

Run it before and after a change, on the same index, and diff the outputs:

    python bench/replay.py --index-dir index --out /tmp/before.jsonl   # on the old commit
    python bench/replay.py --index-dir index --out /tmp/after.jsonl    # on the new one
    diff /tmp/before.jsonl /tmp/after.jsonl && echo identical

No generation runs, so it takes about a minute; what it cannot show is a change in the model's own output.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from assistant.evaluate.dataset import load_set  # noqa: E402
from assistant.evaluate.runner import ask_case  # noqa: E402
from assistant.llm.scripted import ScriptedChatModel  # noqa: E402
from assistant.service import AssistantService  # noqa: E402
from assistant.settings import load_settings  # noqa: E402

SETS = ["gold_fact", "gold_recommend", "gold_followup", "gold_out_of_scope", "gold_adversarial", "advisor"]
_SOURCE = re.compile(r"^\[(\d+)\] (.+)$", re.M)  # format_source: "[n] text" on one line


def scripted_answer(messages: list[dict[str, str]]) -> str:
    """Cite the first sentence of sources 1-3 correctly, then add an uncited and a mis-cited sentence.
    Self-contained on purpose (not scripted.quote_sources): it must run unchanged on older commits."""
    prompt = messages[-1]["content"]
    found = _SOURCE.findall(prompt)
    out = []
    for n, body in found[:3]:
        first = re.split(r"(?<=[。！？.!?])\s*", body.strip())[0].strip()
        if first:
            out.append(f"{first} [{n}]")
    out.append("This sentence has no citation.")
    if found:
        out.append(f"The moon is made of green cheese [{found[0][0]}].")
    return " ".join(out)


class Recording(ScriptedChatModel):
    def __init__(self) -> None:
        super().__init__(scripted_answer)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--index-dir", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--state-dir", default=None, help="sessions go here (default: a temp dir)")
    args = ap.parse_args()
    import tempfile

    state = args.state_dir or tempfile.mkdtemp(prefix="replay-state-")
    settings = load_settings(index_dir=args.index_dir, state_dir=state)
    model = Recording()
    svc = AssistantService(settings, chat_model=model)
    lines = []
    for name in SETS:
        gold = load_set(REPO / "eval" / f"{name}.jsonl")
        for case in gold.cases:
            before = len(model.calls)
            answer = ask_case(svc, case)
            prompts = [hashlib.sha256(json.dumps(m, ensure_ascii=False).encode()).hexdigest()[:16]
                       for m in model.calls[before:]]
            lines.append({"id": case.id, "prompts": prompts, "standalone": answer.standalone_question,
                          "answer": answer.answer, "refused": answer.refused,
                          "citations": [[c.n, c.chunk_id, c.lines, round(c.support, 4)] for c in answer.citations],
                          "sources": [h.chunk.id for h in answer.sources]})
        for sc in gold.scenarios:
            advice = svc.advise(sc["scenario"]).to_dict()
            lines.append({"id": sc["id"], "ranking": advice["ranking"], "summary": advice["summary"]})
    Path(args.out).write_text("".join(json.dumps(x, ensure_ascii=False) + "\n" for x in lines), encoding="utf-8")
    print(f"{len(lines)} cases, {len(model.calls)} prompts -> {args.out}")
    svc.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
