"""Routing accuracy: the kind the router gives each question (fact, selection, out of scope) against the kind its
gold set says, per language, and what routing costs per question.

    python bench/route_accuracy.py --index-dir DIR [--rules] [--list] [--cv] [FILE.jsonl ...]

Without files, the dev sets of eval/ (not eval/test/). Each case goes through what the service does before it
answers, on the service's own steps: the follow-up rewrite from the turn before (its stored kind and, for a
selection, the frameworks its answer recommended; a multi-turn case's earlier turns are routed first), the answerer's
retrieval (which embeds the standalone question once, and reads the pinned article through its twin when the state
folder has one for the question's language), then the answerer's `route` (assistant/route.py: the classifier reads
that vector; the refusal policy decides out of scope, with the pinned passages' closeness as the answer computes it).
Gold: the case's kind ("selection" and "recommend" are selection; a follow-up's last turn is a fact); the Advisor's
scenarios (advisor.jsonl, advisor_parse.jsonl) are selection.

--rules: the router without its classifier (the wording rules alone: what runs without an embedder).
--state-dir: the service's state folder (the classifier's cache, the twin's translations); default the settings'.
--before: the rules as they were before the router (selection.is_selection over policy.rewrite_followup); run it
  with PYTHONPATH at a checkout of that commit (b85d19d), where those functions exist.
--cv: also the classifier's 5-fold cross-validated accuracy on the dev phrasings (assistant/route_phrasings.jsonl),
  alone and with the wording rules where it is unsure: the dev figure for wording it was not trained on.
--list: the misrouted cases; refused for the blind split (eval/test/), which is run once, for its figure only.
Cost: the router's own time per question (the pinned passages' closeness and the route; the vector comes from
retrieval's cache), p50 and mean, in ms, and the classifier's one-off training time for this embedder.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from assistant.answer.policy import strip_injection  # noqa: E402
from assistant.lang import detect_language  # noqa: E402
from assistant.service import AssistantService  # noqa: E402
from assistant.settings import load_settings  # noqa: E402

DEV = ["gold_fact", "gold_docs_dev", "gold_article_en", "gold_article_en_2", "gold_followup", "gold_selection_followup", "gold_near_domain",
       "gold_out_of_scope", "gold_adversarial", "gold_recommend", "gold_selection", "gold_selection_2",
       "gold_selection_blind1", "advisor", "advisor_parse"]
GOLD = {"selection": "selection", "recommend": "selection", "fact": "fact", "followup": "fact",
        "out_of_scope": "out_of_scope"}


def cases(path: Path) -> list[tuple[str, str, list[str], str]]:
    """(id, lang, turns, gold kind) of each case of a set."""
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        r = json.loads(line)
        turns = r.get("turns") or [r.get("question") or r.get("text") or r.get("scenario", {}).get("text", "")]
        kind = GOLD.get(r.get("kind", ""), "selection" if path.name.startswith("advisor") else "")
        if turns[-1] and kind:
            out.append((r["id"], r.get("lang") or detect_language(turns[-1]), turns, kind))
    return out


def router_of(args, svc):
    """A function (turns, lang) -> (kind of the last turn, ms the router took for it)."""
    if args.before:  # the rules before the router, at their own commit
        from assistant.advisor.intent import is_selection_question
        from assistant.answer import selection
        from assistant.answer.policy import decide, rewrite_followup

        retriever = svc.retriever
        known = retriever.knows
        pinned = svc.pinned_context()

        def before(turns: list[str], lang: str) -> tuple[str, float]:
            history = [m for t in turns[:-1] for m in ({"role": "user", "content": t}, {"role": "assistant", "content": ""})]
            q = strip_injection(turns[-1]) or turns[-1]
            standalone = rewrite_followup(q, history)
            hits = retriever.search(standalone, k=5)
            near = max(retriever.similarities(standalone, pinned.chunks), default=0.0)
            t = time.perf_counter()
            d = decide(standalone, hits, known=known, choosing=is_selection_question(standalone), pinned_dense=near)
            kind = "out_of_scope" if d.refuse else "selection" if selection.is_selection(
                standalone, list(turns[:-1]), lang, asked=turns[-1]) else "fact"
            return kind, (time.perf_counter() - t) * 1000
        return before

    from assistant.route import Turn, remembered, standalone_question

    if args.rules:
        svc.kind_classifier = lambda: None  # the router decides by wording
    else:
        svc.kind_classifier()  # trained (or read from the state folder) before the first case is timed

    def after(turns: list[str], lang: str) -> tuple[str, float]:
        previous: Turn | None = None
        for i, t in enumerate(turns):
            q = strip_injection(t) or t
            standalone = standalone_question(q, previous, list(turns[:i]))
            tl = detect_language(t)
            found = svc.answerer.retrieve(standalone, tl)
            start = time.perf_counter()
            r, _near = svc.answerer.route(q, standalone, tl, found, previous, list(turns[:i]))
            ms = (time.perf_counter() - start) * 1000
            sel = svc.answerer.selection(r) if r.selection and i < len(turns) - 1 else None
            # what the session store keeps of the turn: its kind and the frameworks a selection answer recommended
            previous = Turn.from_message(t, {"standalone_question": standalone,
                                             "route": remembered(r, sel.recommended if sel else None)})
        return r.kind, ms
    return after


def cross_validated(retriever) -> None:
    """5-fold accuracy of selection-vs-not on the dev phrasings: the classifier alone, and as the router uses it."""
    from assistant import kinds
    from assistant.route import SELECTION, kind_of

    rows = kinds.load_phrasings()
    x = retriever.embedder.queries([r["text"] for r in rows]).astype(np.float64)
    y = np.array([r["kind"] == "selection" for r in rows], dtype=np.float64)
    order = np.random.default_rng(0).permutation(len(rows))
    p = np.zeros(len(rows))
    for fold in np.array_split(order, 5):
        train = np.setdiff1d(order, fold)
        w, b = kinds.fit(x[train], y[train])
        p[fold] = [kinds.KindClassifier("cv", w, b).selection_probability(v) for v in x[fold]]
    routed = np.array([kind_of(r["text"], r["text"], r["lang"], probability=pi)[0] == SELECTION
                       for r, pi in zip(rows, p, strict=True)])
    rules = np.array([kind_of(r["text"], r["text"], r["lang"])[0] == SELECTION for r in rows])
    for lang in ("zh", "en"):
        m = np.array([r["lang"] == lang for r in rows])
        print(f"cv {lang}: n={m.sum()} classifier {((p[m] >= 0.5) == y[m]).mean():.3f}  router "
              f"{(routed[m] == y[m]).mean():.3f}  wording rules {(rules[m] == y[m]).mean():.3f}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("files", nargs="*")
    ap.add_argument("--index-dir", required=True)
    ap.add_argument("--rules", action="store_true", help="no classifier: the wording rules alone")
    ap.add_argument("--before", action="store_true", help="the rules before the router (run at that commit)")
    ap.add_argument("--state-dir", help="the service's state folder (default: the settings')")
    ap.add_argument("--cv", action="store_true", help="also the classifier's cross-validated accuracy")
    ap.add_argument("--list", action="store_true", help="print misrouted cases (dev only)")
    args = ap.parse_args()
    files = [Path(f) for f in args.files] or [REPO / "eval" / f"{n}.jsonl" for n in DEV]
    blind = any("test" in f.parts for f in files)
    if args.list and blind:
        ap.error("--list is for the dev sets: the blind split is run for its figure only")
    over = {"index_dir": Path(args.index_dir)} | ({"state_dir": Path(args.state_dir)} if args.state_dir else {})
    svc = AssistantService(load_settings(**over))
    _ = svc.retriever  # the index and the embedder load before the classifier's time is taken
    t = time.perf_counter()
    decide_kind = router_of(args, svc)
    train_s = time.perf_counter() - t
    totals: dict[str, list[int]] = {"zh": [0, 0], "en": [0, 0]}
    ms: list[float] = []
    for f in files:
        per = {"zh": [0, 0], "en": [0, 0]}
        for cid, lang, turns, gold in cases(f):
            kind, cost = decide_kind(turns, lang)
            ms.append(cost)
            lg = "zh" if lang == "zh" else "en"
            per[lg][0] += kind == gold
            per[lg][1] += 1
            if args.list and kind != gold:
                print(f"  {cid}: {gold} -> {kind} | {turns[-1][:90]}")
        for lg in per:
            totals[lg][0] += per[lg][0]
            totals[lg][1] += per[lg][1]
        print(f"{f.name}: " + "  ".join(f"{lg} {c}/{n}" for lg, (c, n) in per.items() if n), flush=True)
    label = "before" if args.before else "rules" if args.rules else "router"
    for lg, (c, n) in totals.items():
        print(f"{label} {'blind' if blind else 'dev'} {lg}: {c}/{n} = {c / max(n, 1):.3f}")
    c, n = sum(v[0] for v in totals.values()), sum(v[1] for v in totals.values())
    print(f"{label} {'blind' if blind else 'dev'} all: {c}/{n} = {c / max(n, 1):.3f}")
    print(f"cost per question: p50 {statistics.median(ms):.2f} ms, mean {statistics.mean(ms):.2f} ms"
          + ("" if args.before or args.rules else f"; classifier trained in {train_s:.1f} s (once per embedder)"))
    if args.cv:
        cross_validated(svc.retriever)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
