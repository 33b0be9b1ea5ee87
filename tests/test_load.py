"""The bounded load test (bench/load.py) in the suite: 20 concurrent clients for 2 minutes against a real
`assistant serve` with the fast model and the real admission settings (rate limit 60 a minute per key,
queue 16, 8 streams), mixing search, answers and streamed answers. The first minute every client sends the
same key (one caller, as 20 clients behind one IP would be: most requests get 429), the second each client its
own key (the rate limit no longer binds; the queue and the stream cap do). In both: no 5xx, every response a
2xx or a 429/503 with Retry-After, every stream ends with `done` or a clean error event, every answer is in
its session afterwards, and some of each kind succeed."""
from __future__ import annotations

import json
import secrets
import sys
from pathlib import Path

import pytest
from httpkit import ServerProcess

pytestmark = pytest.mark.slow

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
from load import run_phases, table  # noqa: E402

CLIENTS = 20
DURATION_S = 120.0


def test_twenty_clients_for_two_minutes(corpus_index: Path, tmp_path: Path) -> None:
    keys = [f"load-key-{n:02d}-" + secrets.token_hex(12) for n in range(CLIENTS)]
    srv = ServerProcess(corpus_index, tmp_path, tmp_path / "server.log", ASSISTANT_MODEL="fast",
                        ASSISTANT_MAX_ANSWER_TOKENS="64", ASSISTANT_API_KEYS=",".join(keys))
    srv.start()
    try:
        report = run_phases(srv.base, CLIENTS, DURATION_S, keys, shared_fraction=0.5)
    finally:
        srv.stop()
    (tmp_path / "load.json").write_text(json.dumps(report, indent=2, ensure_ascii=False))
    for name, s in report["phases"].items():
        print(f"== {name}\n{table(s)}")
        assert s["checks"] == dict.fromkeys(s["checks"], True), (name, s["checks"], s["failures"], s["lost"])
        assert s["elapsed_s"] < DURATION_S / 2 + 330  # stops by itself: the budget plus the last answers
        assert s["answers_read_back"] > 0
    # how many of one caller's requests the rate limit refuses depends on how fast the machine answers: reported,
    # not asserted (bench/results/load-*.json has a run's figures)
    assert set(report["phases"]) == {"one_caller", "key_per_client"}
