"""Offline evaluation: gold sets -> AssistantService -> metrics -> results.jsonl, summary.json, report.html.

Modules: dataset (JSONL loading), metrics (pure functions), judge (entailment for ALCE citation metrics),
runner (run_eval), report (HTML), gate (CI thresholds). See docs/evaluation.md.
"""
from .runner import run_eval

__all__ = ["run_eval"]
