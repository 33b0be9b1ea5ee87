"""Prefill and decode speed of llama-cpp-python builds, side by side in one run (issue: portable vs native build).

Each build is a Python environment with llama-cpp-python installed (the project's .venv holds the portable
default; `python3 assistant/llm/wheelhouse.py ensure --venv DIR --native` makes a native one). For each round,
every build runs the same child script in turn (so a drifting machine affects them alike): load the GGUF, prefill
a fixed prompt of about 360 tokens, decode 64 tokens greedily. Prints tokens/s per build (median of the rounds) and
the ratio of each build to the first one.

    python bench/engine.py --python .venv/bin/python --python /tmp/native/bin/python --model default --rounds 3
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

CHILD = r"""
import json, sys, time
import llama_cpp
path, threads = sys.argv[1], int(sys.argv[2])
llm = llama_cpp.Llama(model_path=path, n_ctx=2048, n_threads=threads, n_threads_batch=threads, n_batch=512,
                      verbose=False, seed=7)
text = ("ZeRO partitions optimizer states, gradients and parameters across data-parallel ranks. "
        "张量并行把一层的矩阵乘法切分到多张卡上，流水线并行把不同的层放到不同的设备上。 ") * 12
tokens = llm.tokenize(text.encode("utf-8"))[:360]
llm.reset()
t0 = time.perf_counter()
llm.eval(tokens)
prefill = time.perf_counter() - t0
out = []
t1 = time.perf_counter()
for _ in range(64):
    tok = llm.sample(temp=0.0)
    out.append(tok)
    llm.eval([tok])
decode = time.perf_counter() - t1
info = llama_cpp.llama_print_system_info().decode(errors="replace")
print(json.dumps({"prompt_tokens": len(tokens), "prefill_tps": len(tokens) / prefill, "decode_tps": 64 / decode,
                  "system_info": info}))
"""


def run_child(python: str, model: Path, threads: int) -> dict:
    out = subprocess.run([python, "-c", CHILD, str(model), str(threads)], capture_output=True, text=True, check=False)
    if out.returncode != 0:
        return {"error": f"exit {out.returncode}: {out.stderr.strip()[-300:]}"}
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--python", action="append", required=True, help="a Python with a llama-cpp-python build (repeat)")
    ap.add_argument("--model", default="default", help="packaged model name or .gguf path")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json", help="write the figures here")
    args = ap.parse_args()
    from assistant.llm.models import prepare_model
    from assistant.settings import load_settings

    model = prepare_model(args.model, load_settings().cache_dir)
    runs: dict[str, list[dict]] = {p: [] for p in args.python}
    for r in range(args.rounds):
        for p in args.python:
            res = run_child(p, model, args.threads)
            runs[p].append(res)
            print(f"round {r + 1} {p}: " + (res.get("error") or
                  f"prefill {res['prefill_tps']:.1f} tok/s, decode {res['decode_tps']:.1f} tok/s"), flush=True)
    summary = []
    for p, rs in runs.items():
        ok = [x for x in rs if "error" not in x]
        row = {"python": p, "rounds": len(ok), "errors": [x["error"] for x in rs if "error" in x]}
        if ok:
            row |= {"prefill_tps": round(statistics.median(x["prefill_tps"] for x in ok), 2),
                    "decode_tps": round(statistics.median(x["decode_tps"] for x in ok), 2),
                    "prompt_tokens": ok[0]["prompt_tokens"], "system_info": ok[0]["system_info"].strip()}
        summary.append(row)
    base = summary[0]
    print(f"\nmodel {model.name}, {args.threads} threads, median of {args.rounds} rounds")
    for row in summary:
        if "prefill_tps" not in row:
            print(f"{row['python']}: failed ({row['errors'][:1]})")
            continue
        ratio = (f"  ({row['prefill_tps'] / base['prefill_tps']:.3f} x / {row['decode_tps'] / base['decode_tps']:.3f} x"
                 " the first)") if "prefill_tps" in base and row is not base else ""
        print(f"{row['python']}: prefill {row['prefill_tps']:.1f} tok/s, decode {row['decode_tps']:.1f} tok/s{ratio}")
        print(f"    {row['system_info']}")
    if args.json:
        Path(args.json).write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
