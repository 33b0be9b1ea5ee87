"""A one-shot `assistant ask` that the refusal policy declines: wall time and peak memory of the whole process, with
the pinned context sized from the model's vocabulary alone (what the product does, `Engines.count_tokens`) against
the same process sizing it with the loaded model (the baseline: the weights mapped only to count tokens), measured in
the same run, alternating, each question in a fresh process.

    python bench/oneshot.py [--index-dir index] [--repeat 3] [--json OUT]

Each run is `python -m assistant ask --json QUESTION` in a child process (the baseline replaces
`Engines.count_tokens` with the loaded model's count before the CLI runs); wall time and the child's peak RSS come
from the operating system (os.wait4). The answer of both must be the refusal, and the same.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

QUESTIONS = ("明天北京天气怎么样？", "What is a good recipe for pork dumplings?", "帮我写一首关于秋天的诗。")

RUN = """
import sys
if sys.argv[1] == "model":
    from assistant.runtime import Engines
    Engines.count_tokens = lambda self, text: self.llm.count_tokens(text)
from assistant.cli import main
sys.exit(main(sys.argv[2:]))
"""


def run(mode: str, question: str, index_dir: str) -> dict[str, object]:
    started = time.perf_counter()
    child = subprocess.Popen([sys.executable, "-c", RUN, mode, "ask", "--index-dir", index_dir, "--json", question],
                             cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    assert child.stdout is not None
    out = child.stdout.read()
    _, status, usage = os.wait4(child.pid, 0)
    child.returncode = os.waitstatus_to_exitcode(status)  # the wait is done: Popen must not wait again
    wall = time.perf_counter() - started
    body = json.loads(out)
    return {"mode": mode, "question": question, "wall_s": round(wall, 3), "rss_mb": round(usage.ru_maxrss / 1024, 1),
            "refused": bool(body.get("refused")), "answer": body.get("answer", "")}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--index-dir", default="index")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    rows: list[dict[str, object]] = []
    for r in range(args.repeat):
        for q in QUESTIONS:
            for mode in (("vocab", "model") if r % 2 == 0 else ("model", "vocab")):
                rows.append(run(mode, q, args.index_dir))
                print(json.dumps({k: v for k, v in rows[-1].items() if k != "answer"}, ensure_ascii=False), flush=True)
    for q in QUESTIONS:
        answers = {str(x["answer"]) for x in rows if x["question"] == q}
        assert len(answers) == 1, (q, answers)
        assert all(x["refused"] for x in rows if x["question"] == q), q
    summary: dict[str, dict[str, float]] = {}
    for mode in ("vocab", "model"):
        walls = [float(x["wall_s"]) for x in rows if x["mode"] == mode]  # type: ignore[arg-type]
        rss = [float(x["rss_mb"]) for x in rows if x["mode"] == mode]  # type: ignore[arg-type]
        summary[mode] = {"wall_p50_s": round(statistics.median(walls), 2), "rss_p50_mb": round(statistics.median(rss))}
    v, m = summary["vocab"], summary["model"]
    print(f"refused one-shot ask, {len(rows) // 2} runs each: vocabulary count {v['wall_p50_s']} s, {v['rss_p50_mb']} MB;"
          f" model count (baseline) {m['wall_p50_s']} s, {m['rss_p50_mb']} MB;"
          f" ratio wall {v['wall_p50_s'] / m['wall_p50_s']:.2f} x, memory {v['rss_p50_mb'] / m['rss_p50_mb']:.2f} x")
    if args.json:
        args.json.write_text(json.dumps({"summary": summary, "runs": rows}, ensure_ascii=False, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
