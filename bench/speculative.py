"""Speculative decoding A/B: the product's prompts decoded with and without prompt-lookup drafting.

Same model, same prompts (the product's own, built from retrieval for bench/data/speed.jsonl), greedy
decoding, so both runs should produce the same text; the figures are decode tokens/s and time to first token.

    python bench/speculative.py [--model default|fast] [--limit 10] [--index-dir DIR]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from assistant.llm.llamacpp import LlamaCppChatModel  # noqa: E402
from assistant.llm.models import prepare_model  # noqa: E402
from assistant.service import AssistantService  # noqa: E402
from assistant.settings import load_settings  # noqa: E402


def run(model: LlamaCppChatModel, prompts: list[list[dict]]) -> tuple[list[float], list[float], list[str]]:
    tps, ttft, texts = [], [], []
    for msgs in prompts:
        texts.append("".join(model.stream(msgs, max_tokens=200, temperature=0.0)))
        extra = model.last_usage.extra
        if "decode_tok_s" in extra:
            tps.append(extra["decode_tok_s"])
        ttft.append(extra["ttft_s"])
    return tps, ttft, texts


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="default")
    ap.add_argument("--limit", type=int, default=10)
    ap.add_argument("--index-dir", default=os.environ.get("ASSISTANT_INDEX_DIR", str(REPO / "index")))
    args = ap.parse_args()
    settings = load_settings(index_dir=args.index_dir, state_dir=tempfile.mkdtemp(), model=args.model)
    svc = AssistantService(settings)
    path = prepare_model(args.model, settings.cache_dir)
    questions = [json.loads(x)["question"] for x in (REPO / "bench/data/speed.jsonl").read_text().splitlines()
                 if x.strip()][: args.limit]
    results = {}
    for mode in ("none", "prompt_lookup"):
        model = LlamaCppChatModel(path, n_threads=settings.threads, speculative=mode)
        prompts = [svc.prompt_messages(q, model.count_tokens) for q in questions]
        results[mode] = run(model, prompts)
        model.close()
    base_tps, base_ttft, base_text = results["none"]
    spec_tps, spec_ttft, spec_text = results["prompt_lookup"]
    same = sum(a == b for a, b in zip(base_text, spec_text, strict=True))
    print(f"model {args.model}, {len(questions)} prompts, greedy")
    print(f"decode tok/s p50: none {statistics.median(base_tps):.2f}  prompt_lookup {statistics.median(spec_tps):.2f}"
          f"  ratio {statistics.median(spec_tps) / statistics.median(base_tps):.2f}")
    print(f"first token s p50: none {statistics.median(base_ttft):.2f}  prompt_lookup "
          f"{statistics.median(spec_ttft):.2f}")
    print(f"identical outputs: {same}/{len(questions)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
