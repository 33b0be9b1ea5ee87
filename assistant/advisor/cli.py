"""The `assistant advise` options and output: a readable ranked result with its table, or one JSON object.

`add_arguments(parser)` adds the scenario options to the subcommand's parser; `run_advise(service, args)`
builds the scenario (fields, free text or both), calls `service.advise` and prints. `--rubric` prints the
rubric (criteria, weights, facts with their sources) without touching the index.
"""
from __future__ import annotations

import argparse
import json
import textwrap
from typing import Any

from ..interfaces import Answerer
from .rubric import load_rubric
from .scenario import DOMAINS, HARDWARE, STAGES


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--known", action="append", metavar="FRAMEWORK", help="a framework the team knows (repeatable)")
    p.add_argument("--stage", choices=STAGES, help="project stage")
    p.add_argument("--hardware", choices=HARDWARE, help="training hardware")
    p.add_argument("--model-scale", help="model size in parameters, e.g. 7B, 300M, 175B, 千亿")
    p.add_argument("--data-scale", help="data size, e.g. 5TB")
    p.add_argument("--domain", choices=DOMAINS, help="application domain")
    p.add_argument("--goal", action="append", metavar="GOAL",
                   help="long-term goal (repeatable): localisation, mobile, server, cloud:<name>, long_sequence, moe, ...")
    p.add_argument("--text", help="free description of the situation (Chinese or English); fills fields not given")
    p.add_argument("--lang", choices=["zh", "en"], help="output language (default: the language of --text, else en)")
    p.add_argument("--json", action="store_true", help="print one JSON object (ranking, table, what_would_change, ...)")
    p.add_argument("--rubric", action="store_true", help="print the rubric (criteria, weights, facts, sources) and exit")


def scenario_from_args(args: argparse.Namespace) -> dict[str, Any]:
    d: dict[str, Any] = {"text": args.text or ""}
    pairs = (("known_frameworks", args.known), ("stage", args.stage), ("hardware", args.hardware),
             ("model_scale", args.model_scale), ("data_scale", args.data_scale), ("domain", args.domain),
             ("goals", args.goal), ("lang", args.lang))
    d.update({k: v for k, v in pairs if v})
    return d


def run_advise(service: Answerer, args: argparse.Namespace) -> int:
    if getattr(args, "rubric", False):
        _print_rubric(args.lang or "en", as_json=args.json)
        return 0
    advice = service.advise(scenario_from_args(args)).to_dict()
    if args.json:
        print(json.dumps(advice, ensure_ascii=False, indent=2))
    else:
        print(render_text(advice))
    return 0


def render_text(a: dict[str, Any]) -> str:
    zh = a["language"] == "zh"
    out = [a["summary"], ""]
    if a.get("tie"):
        out.append(a["tie"]["text"])
        for d in a["tie"]["decides"]:
            out.append(f"  {d['candidate']}:")
            out += [f"     {'选它，如果' if zh else 'choose it if'}: {c['text']} " + "".join(f"[{n}]" for n in c["citations"])
                    for c in d["choose_if"]]
        out.append("")
    for i, r in enumerate(a["ranking"], 1):
        out.append(f"{i}. {r['name']}  {r['score']:.3f}")
        for reason in r["reasons"][:4]:
            sign = "-" if reason.get("points", 0) < 0 else "+"
            out.append(f"     {sign} {reason['text']} " + "".join(f"[{n}]" for n in reason["citations"]))
    out += ["", "对比表" if zh else "Table", _table_text(a["table"])]
    if a["what_would_change"]:
        out += ["", "什么会改变结论：" if zh else "What would change the answer:"]
        out += [f"  - {w['text']} " + "".join(f"[{n}]" for n in w["citations"]) for w in a["what_would_change"]]
    tp = a["trial_plan"]
    out += ["", ("试验计划：" if zh else "Trial plan: ") + tp["text"] + " " + "".join(f"[{n}]" for n in tp["citations"])]
    out += [f"  {i}. {s}" for i, s in enumerate(tp["steps"], 1)]
    out += ["  " + ("测量：" if zh else "Measure: ") + ", ".join(tp["measure"]), "", "来源：" if zh else "Sources:"]
    for c in a["citations"]:
        out.append(f"  [{c['n']}] {c['path']}:{c['lines'][0]}-{c['lines'][1]}  {' > '.join(c['heading_path'][1:])}")
    return "\n".join(out)


def _table_text(table: dict[str, Any]) -> str:
    crits = table["criteria"]
    head = f"{'':24}" + "".join(f"{table['labels'][c][:12]:>14}" for c in crits)
    lines = [head]
    for row in table["rows"]:
        cells = "".join(f"{row['cells'][c]['score']:>8.2f} {'[' + str(row['cells'][c]['citations'][0]) + ']':<5}"
                        for c in crits)
        lines.append(f"{row['name']:24}{cells}")
    return "\n".join(lines)


def _print_rubric(lang: str, as_json: bool) -> None:
    r = load_rubric()
    facts: list[dict[str, Any]] = [{"id": f.id, "candidate": f.candidate, "criterion": f.criterion, "when": f.when, "points": f.points,
              "claim": f.claim[lang], "source": f.source, "query": f.query} for f in r.facts]
    if as_json:
        print(json.dumps({"weights": r.weights, "scale": r.scale, "criteria": r.criteria, "facts": facts},
                         ensure_ascii=False, indent=2))
        return
    print("weights: " + ", ".join(f"{c} {w:.2f}" for c, w in r.weights.items()) + f"  (scale ±{r.scale:g} points)")
    for f in facts:
        when = ", ".join(f"{k}={v}" for k, v in f["when"].items()) or "always"
        print(f"{f['points']:+.0f}  {f['candidate']:22} {f['criterion']:11} [{when}] {f['source']}")
        print(textwrap.indent(textwrap.fill(f["claim"], 110), "      "))
