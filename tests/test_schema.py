"""schemathesis against a real `assistant serve` (the fast model, real HTTP): every documented operation of
/openapi.json is called with generated valid and invalid requests (examples, coverage, fuzzing and stateful
phases), and no response may be a 5xx, an undocumented status or content type, a body or an SSE event that
violates its schema, or a 2xx to a request the schema forbids. Run once without keys (no security scheme is
advertised then) and once with ASSISTANT_API_KEYS set and the key sent as a Bearer header (a missing key must
be a 401). Answers are capped at a few tokens and the generating routes get few examples, so both runs fit
in about four minutes on two cores."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from httpkit import ServerProcess

pytestmark = pytest.mark.slow

ST = Path(sys.executable).with_name("st")
CHECKS = ("not_a_server_error", "status_code_conformance", "content_type_conformance", "response_schema_conformance",
          "response_headers_conformance", "negative_data_rejection")
KEY = "schemathesis-key-0123456789abcdef"
ANSWER_TOKENS = "16"  # the longest answer then takes a few seconds; the request time-out is far above it
REQUEST_TIMEOUT_S = 300


def config(max_examples: int, answer_examples: int) -> str:
    """schemathesis.toml: the checks above; the operations that run the model get `answer_examples` cases,
    negative ones only in the coverage phase (its positive cases would be dozens of answers), and the
    stateful phase a few short scenarios (ask, read the session, give feedback, delete)."""
    lines = ["[generation]", f"max-examples = {max_examples}", "no-shrink = true", "[checks]", "enabled = false"]
    for check in CHECKS:
        lines += [f"[checks.{check}]", "enabled = true"]
    lines += ["[phases.stateful]", "max-steps = 6", "generation.max-examples = 3",
              "[[operations]]", 'include-path-regex = "^/(api/ask|v1/chat/completions|api/sessions/[^/]+/regenerate)$"',
              f"generation.max-examples = {answer_examples}", 'phases.coverage.generation.mode = "negative"']
    return "\n".join(lines) + "\n"


def run_schemathesis(srv: ServerProcess, tmp: Path, name: str, *args: str, max_examples: int = 10,
                     answer_examples: int = 3) -> dict:
    cfg = tmp / f"{name}.toml"
    cfg.write_text(config(max_examples, answer_examples))
    report = tmp / f"{name}.json"
    cmd = [str(ST), "--config-file", str(cfg), "run", srv.base + "/openapi.json", "--request-timeout",
           str(REQUEST_TIMEOUT_S), "--no-color", "--seed", "17", "--generation-database", "none",
           "--report", "json", "--report-json-path", str(report), *args]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=tmp)
    (tmp / f"{name}.out").write_text(out.stdout + out.stderr)
    assert report.exists(), out.stdout[-3000:] + out.stderr[-3000:]
    result = json.loads(report.read_text())
    assert result["exit_code"] == 0 and not result["failures"] and not result["errors"], out.stdout[-6000:]
    ops, phases = result["operations"], ", ".join(f"{k}: {v['status']}" for k, v in result["phases"].items())
    print(f"\n[schemathesis] {name}: operations {ops['tested']}/{ops['total']}, test cases {result['test_cases']}, "
          f"failures {len(result['failures'])}, phases ({phases})")
    return result


@pytest.fixture(scope="module")
def servers(corpus_index: Path, tmp_path_factory: pytest.TempPathFactory):
    """Two real servers, one without keys and one with a key; rate limit off (schemathesis is one client)."""
    made = []
    for keys in ("", KEY):
        state = tmp_path_factory.mktemp("schema-state")
        srv = ServerProcess(corpus_index, state, state / "server.log", ASSISTANT_MODEL="fast",
                            ASSISTANT_MAX_ANSWER_TOKENS=ANSWER_TOKENS, ASSISTANT_RATE_LIMIT_PER_MINUTE="0",
                            ASSISTANT_API_KEYS=keys)
        made.append(srv)
    try:
        for srv in made:
            srv.start()
        yield made
    finally:
        for srv in made:
            srv.stop()


def test_openapi_holds_without_keys(servers: list[ServerProcess], tmp_path: Path) -> None:
    result = run_schemathesis(servers[0], tmp_path, "plain")
    assert result["operations"]["tested"] == result["operations"]["total"] >= 12
    assert result["test_cases"]["generated"] >= 100
    assert all(p["status"] == "success" for p in result["phases"].values()), result["phases"]


def test_openapi_holds_with_a_key(servers: list[ServerProcess], tmp_path: Path) -> None:
    result = run_schemathesis(servers[1], tmp_path, "keyed", "-H", f"Authorization: Bearer {KEY}",
                              "--phases", "examples,coverage,fuzzing", max_examples=5, answer_examples=2)
    assert result["operations"]["tested"] == result["operations"]["total"] >= 12
