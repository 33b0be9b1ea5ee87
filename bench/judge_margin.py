"""Can the local chat model judge citations? Reads the hand-labelled (sentence, cited passage) pairs in
eval/handcheck/, asks the model "Does the passage support the claim?" and takes the margin
log P(yes) - log P(no) of its first answer token (no sampling, so a constant yes or no still carries a score),
then prints its AUC against the labels next to the support score's, overall and where support >= 0.70.

    python bench/judge_margin.py --index-dir DIR [--model default|fast] [--limit N] [--json OUT]

The passages are read from the index (chunk ids in the label files). Measured in docs/evaluation.md ("How far the judge can be trusted").
"""
from __future__ import annotations

import argparse
import glob
import json
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from assistant.index.snapshot import IndexSnapshot, current_generation  # noqa: E402
from assistant.llm.models import prepare_model  # noqa: E402
from assistant.settings import load_settings  # noqa: E402

SYSTEM = "You check whether a passage supports a claim. Answer with one word: yes or no."


def _logsumexp(x: np.ndarray) -> float:
    top = float(x.max())
    return float(np.log(np.exp(x - top).sum()) + top)


def auc(scores: list[float], labels: list[bool]) -> float:
    pos = [s for s, y in zip(scores, labels, strict=True) if y]
    neg = [s for s, y in zip(scores, labels, strict=True) if not y]
    return sum((p > n) + 0.5 * (p == n) for p in pos for n in neg) / max(1, len(pos) * len(neg))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--index-dir", required=True)
    ap.add_argument("--model", default="default", help="default (1.5B) or fast (0.5B)")
    ap.add_argument("--json", help="write every pair's margin here")
    ap.add_argument("--limit", type=int, help="only the first N pairs (a smoke run)")
    args = ap.parse_args()
    import llama_cpp

    settings = load_settings()
    path = prepare_model(args.model, settings.cache_dir)
    llm = llama_cpp.Llama(model_path=str(path), n_ctx=2048, n_batch=2048, n_threads=2, verbose=False)
    gen = current_generation(Path(args.index_dir))
    if gen is None:
        sys.exit(f"no index in {args.index_dir}: run `assistant index build` first")
    snap = IndexSnapshot(gen)
    rows = []
    for f in sorted(glob.glob(str(REPO / "eval/handcheck/support-*.json"))):
        for p in json.loads(Path(f).read_text(encoding="utf-8")):
            if all(c in snap.by_id for c in p["passage_chunk"]):
                rows.append({"file": Path(f).name, "i": p["i"], "label": bool(p["final"]), "support": p["support"],
                             "sentence": p["sentence"],
                             "passage": "\n\n".join(snap.by_id[c].text for c in p["passage_chunk"])})
    rows = rows[: args.limit] if args.limit else rows
    first = lambda words: sorted({llm.tokenize(w.encode(), add_bos=False)[0] for w in words})  # noqa: E731
    yes, no = first(["yes", "Yes", " yes", " Yes"]), first(["no", "No", " no", " No"])
    t0 = time.time()
    for r in rows:
        user = (f"Passage:\n{r['passage']}\n\nClaim:\n{r['sentence']}\n\n"
                "Does the passage support the claim? Answer yes or no.")
        prompt = (f"<|im_start|>system\n{SYSTEM}<|im_end|>\n<|im_start|>user\n{user}<|im_end|>\n"
                  "<|im_start|>assistant\n")
        llm.reset()
        llm.eval(llm.tokenize(prompt.encode(), add_bos=False, special=True))
        logits = np.ctypeslib.as_array(llm._ctx.get_logits(), shape=(llm.n_vocab(),)).astype(np.float64)  # noqa: SLF001
        r["margin"] = _logsumexp(logits[yes]) - _logsumexp(logits[no])
    labels = [r["label"] for r in rows]
    hi = [r for r in rows if r["support"] >= 0.70]
    print(f"{len(rows)} labelled pairs ({sum(labels)} supported), {time.time() - t0:.0f} s with the {args.model} model")
    print(f"AUC, all pairs:     margin {auc([r['margin'] for r in rows], labels):.3f}   "
          f"support {auc([r['support'] for r in rows], labels):.3f}")
    print(f"AUC, support>=0.70: margin {auc([r['margin'] for r in hi], [r['label'] for r in hi]):.3f}   "
          f"({len(hi)} pairs)")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, ensure_ascii=False, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
