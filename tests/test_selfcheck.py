"""The engine self-check (assistant/llm/selfcheck.py) and the engine's portability, with the real engine.

The pass path runs the real `fast` model in a child; the failure paths use children that really die: one
given a command that kills itself with SIGILL, and a `llama_cpp` package on the child's path whose import
does the same (a broken engine build, as on the AMX machine), through `assistant model prepare` and
`assistant serve`. The portability test disassembles the installed engine.
"""
from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from assistant.llm import wheelhouse
from assistant.llm.models import prepare_model
from assistant.llm.selfcheck import (
    MIN_PROMPT_TOKENS,
    RECORD_FILE,
    EngineCheckFailed,
    engine_build,
    engine_libraries,
    remembered,
    run_selfcheck,
)
from assistant.settings import load_settings

pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed")

REPO = Path(__file__).resolve().parents[1]
CACHE = Path(load_settings().cache_dir)
SIGILL_CHILD = [sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGILL)"]


@pytest.fixture(scope="module")
def fast_path() -> Path:
    return prepare_model("fast", CACHE)


def test_pass_is_measured_then_remembered_without_a_child(tmp_path: Path, fast_path: Path) -> None:
    first = run_selfcheck(fast_path, tmp_path, threads=2)
    assert not first.remembered
    assert first.prompt_tokens >= MIN_PROMPT_TOKENS and first.completion_tokens >= 1
    assert first.prefill_tok_s > 0 and first.decode_tok_s > 0
    assert "prefill" in first.line("en") and "预填充" in first.line("zh")
    assert (tmp_path / RECORD_FILE).is_file()
    # the second call must not spawn a child: given a child that would die, it still returns the pass
    again = run_selfcheck(fast_path, tmp_path, command=SIGILL_CHILD)
    assert again.remembered and again.prompt_tokens == first.prompt_tokens
    assert remembered(fast_path, tmp_path) is not None
    # another cache (no record) runs the child again, so that one dies
    with pytest.raises(EngineCheckFailed):
        run_selfcheck(fast_path, tmp_path / "other", command=SIGILL_CHILD)


def test_a_child_killed_by_sigill_gives_the_message_in_the_users_language(
        tmp_path: Path, fast_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LANG", "en_US.UTF-8")
    monkeypatch.delenv("LC_ALL", raising=False)
    with pytest.raises(EngineCheckFailed) as err:
        run_selfcheck(fast_path, tmp_path, command=SIGILL_CHILD)
    exc = err.value
    assert exc.signal_name == "SIGILL"
    msg = str(exc)
    assert "crashed on a test prompt" in msg and "SIGILL" in msg and "make rebuild-llama" in msg
    assert "LLAMA_NATIVE=" in msg and "CPU instructions" in msg and "Traceback" not in msg
    assert "SIGILL" in exc.zh and "make rebuild-llama" in exc.zh and "崩溃" in exc.zh
    assert not (tmp_path / RECORD_FILE).exists()  # a failure is not remembered
    monkeypatch.setenv("LANG", "zh_CN.UTF-8")
    with pytest.raises(EngineCheckFailed) as err:
        run_selfcheck(fast_path, tmp_path, command=[sys.executable, "-c",
                                                   "import os, signal; os.kill(os.getpid(), signal.SIGSEGV)"])
    assert "SIGSEGV" in str(err.value) and "崩溃" in str(err.value)


def test_a_child_that_hangs_is_stopped_by_the_time_out(tmp_path: Path, fast_path: Path) -> None:
    with pytest.raises(EngineCheckFailed) as err:
        run_selfcheck(fast_path, tmp_path, timeout=1.0, command=[sys.executable, "-c", "import time; time.sleep(60)"])
    assert "1 s" in err.value.en and "make rebuild-llama" in err.value.en


def _broken_engine(folder: Path) -> Path:
    """A llama_cpp package whose import dies by SIGILL, like the AMX build did on its first real prompt."""
    pkg = folder / "broken" / "llama_cpp"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("import os, signal\nos.kill(os.getpid(), signal.SIGILL)\n")
    return pkg.parent


def _cli(args: list[str], tmp_path: Path, extra_path: Path | None = None, **env: str) -> subprocess.CompletedProcess:
    full = dict(os.environ, ASSISTANT_CACHE_DIR=str(tmp_path / "cache"), LANG="en_US.UTF-8", **env)
    full.pop("LC_ALL", None)
    full["PYTHONPATH"] = os.pathsep.join(str(p) for p in [extra_path, REPO] if p)
    return subprocess.run([sys.executable, "-m", "assistant", *args], capture_output=True, text=True, env=full,
                          cwd=tmp_path, timeout=600)


def test_model_prepare_with_a_crashing_engine_exits_non_zero_with_the_message(tmp_path: Path, fast_path: Path) -> None:
    out = _cli(["model", "prepare", str(fast_path)], tmp_path, _broken_engine(tmp_path))
    assert out.returncode == 3, out.stderr
    assert "SIGILL" in out.stderr and "make rebuild-llama" in out.stderr
    assert "Traceback" not in out.stderr + out.stdout


def test_serve_with_a_crashing_engine_exits_before_binding_the_port(tmp_path: Path, fast_path: Path,
                                                                   corpus_index: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = _cli(["serve", "--port", str(port), "--model", str(fast_path)], tmp_path, _broken_engine(tmp_path),
               ASSISTANT_INDEX_DIR=str(corpus_index), ASSISTANT_STATE_DIR=str(tmp_path / "state"))
    assert out.returncode == 3, out.stderr[-2000:]  # a real index: serve's missing-index check passes first
    assert "SIGILL" in out.stderr and "make rebuild-llama" in out.stderr
    assert "Uvicorn running" not in out.stderr and "Traceback" not in out.stderr
    assert not (tmp_path / "state").exists()  # nothing was started: not even the session store


def test_a_corrupt_gguf_fails_prepare_with_a_clear_message(tmp_path: Path) -> None:
    noise = tmp_path / "noise.gguf"
    noise.write_bytes(os.urandom(4096))
    out = _cli(["model", "prepare", str(noise)], tmp_path)
    assert out.returncode == 3 and "not a GGUF model file" in out.stderr and "Traceback" not in out.stderr
    # right signature, garbage after it: the engine itself refuses it, in the child
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF" + os.urandom(1 << 16))
    out = _cli(["model", "prepare", str(bad)], tmp_path)
    assert out.returncode == 3, out.stderr
    assert "self-check failed" in out.stderr and "could not load" in out.stderr
    assert "Traceback" not in out.stderr


def test_engine_build_id_names_the_shared_libraries() -> None:
    build = engine_build()
    names = {lib["name"] for lib in build["libraries"]}
    assert any(n.startswith("libllama") for n in names) and any(n.startswith("libggml-cpu") for n in names)
    assert build["version"] == wheelhouse.VERSION and re.fullmatch(r"[0-9a-f]{16}", build["id"])


# -- portability: what makes the default build run on AVX2-only and AVX-512/AMX CPUs alike -------------------
FORBIDDEN = re.compile(r"%zmm\d|%tmm\d|\btileloadd|\btilezero|\btdpb[a-z]*ps?\b|\btdpbf16ps\b|\bldtilecfg\b")


def test_installed_engine_has_no_avx512_or_amx_instructions() -> None:
    record = wheelhouse.installed_record()
    if record and record.get("native"):
        pytest.skip("the venv has the native build (LLAMA_NATIVE=1): it may use whatever the build CPU has")
    objdump = shutil.which("objdump")
    if objdump is None:
        pytest.skip("objdump (binutils) is not installed")
    libs = [p for p in engine_libraries() if p.name.startswith("libggml") and p.name.endswith(".so")]
    assert any(p.name.startswith("libggml-cpu") for p in libs), libs
    for lib in libs:
        asm = subprocess.run([objdump, "-d", "--no-show-raw-insn", str(lib)], capture_output=True, text=True,
                             check=True).stdout
        assert "ret" in asm  # it really disassembled something
        hits = FORBIDDEN.findall(asm)
        assert not hits, f"{lib.name} contains AVX-512/AMX instructions: {sorted(set(hits))[:10]}"
