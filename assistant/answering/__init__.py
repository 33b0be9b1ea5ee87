"""Answering: one question in a session to one answer's events, the same way for every adapter.

answerer.py sequences a question (session order, follow-up rewrite, retrieval, refusal, route) into a plan;
fact.py and choose.py make the plans of fact and selection answers; loop.py runs any plan (queue turn, stop,
status, language rule, timings, saving the turn).
"""
from .answerer import Answerer
from .loop import AnswerLoop, Plan, final

__all__ = ["AnswerLoop", "Answerer", "Plan", "final"]
