"""The trial: the article's closing advice, run. The same small training pipeline on the two best candidates.

Modules: `templates` (the reviewed scripts, one per framework x task, and their LOC and concepts), `data`
(synthetic data, or the user's CSV/NPZ validated), `envs` (one virtual environment per framework from its
hash-pinned lock, cached), `limits` (the child process: time, memory and CPU limits, killed by process group),
`runner` (the runs, probes and measures), `report` (criteria tied to the article's lines; JSON, Markdown,
HTML with SVG plots; saved and listed), `jobs` (a trial as a background job with progress and cancel, for the
HTTP routes and the UI), `cli` (`assistant trial`). No script a model wrote is ever executed: only templates.
"""
from .runner import TrialRequest, run_trial

__all__ = ["TrialRequest", "run_trial"]
