"""The llama-cpp-python wheelhouse: one wheel per (version, flags), never one built with other flags.

Real pip installs into a real throw-away venv. The wheels are small but real wheel files (only metadata, and a
marker module saying which build they are), placed in the wheelhouse under a temp cache dir, so no compile runs.
"""
from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from assistant.llm import wheelhouse as wh


def _tiny_wheel(directory: Path, marker: str) -> Path:
    """A valid llama_cpp_python wheel whose module `llama_build_marker` says `marker`."""
    directory.mkdir(parents=True, exist_ok=True)
    name = f"llama_cpp_python-{wh.VERSION}"
    path = directory / f"{name}-py3-none-any.whl"
    files = {
        "llama_build_marker.py": f"BUILD = {marker!r}\n",
        f"{name}.dist-info/METADATA": f"Metadata-Version: 2.1\nName: llama-cpp-python\nVersion: {wh.VERSION}\n",
        f"{name}.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = "".join(f"{f},,\n" for f in files) + f"{name}.dist-info/RECORD,,\n"
    with zipfile.ZipFile(path, "w") as z:
        for f, text in files.items():
            z.writestr(f, text)
        z.writestr(f"{name}.dist-info/RECORD", record)
    return path


def _marker(venv: Path) -> str:
    out = subprocess.run([str(venv / "bin" / "python"), "-c", "import llama_build_marker as m; print(m.BUILD)"],
                         capture_output=True, text=True, check=True)
    return out.stdout.strip()


def test_keys_follow_version_and_flags() -> None:
    portable, native = wh.build_record(False), wh.build_record(True)
    assert portable["key"] != native["key"]
    assert wh.build_key(wh.VERSION, wh.PORTABLE) == portable["key"]
    assert wh.build_key("0.0.1", wh.PORTABLE) != portable["key"]
    flags = " ".join(portable["cmake_args"])
    assert "-DGGML_NATIVE=OFF" in flags and "-DGGML_AVX2=ON" in flags
    for off in ("AVX512", "AVX512_VNNI", "AVX512_BF16", "AMX_TILE", "AMX_INT8", "AMX_BF16", "BACKEND_DL",
                "CPU_ALL_VARIANTS"):
        assert f"-DGGML_{off}=OFF" in flags
    assert "-DGGML_NATIVE=ON" in " ".join(native["cmake_args"])


@pytest.mark.timeout(300)
def test_a_flag_change_installs_the_other_build_and_back_without_compiling(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    cache = tmp_path / "cache"
    monkeypatch.setenv("ASSISTANT_CACHE_DIR", str(cache))
    portable, native = wh.build_record(False), wh.build_record(True)
    for rec, marker in ((portable, "portable"), (native, "native")):
        _tiny_wheel(wh.wheel_dir(rec["key"]), marker)

    def no_compile(*args: object, **kwargs: object) -> Path:
        raise AssertionError("a wheel for these flags is in the wheelhouse: nothing may be compiled")

    monkeypatch.setattr(wh, "build_wheel", no_compile)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)

    assert wh.ensure(venv, native=False) == 0
    assert _marker(venv) == "portable" and wh.installed_record(venv)["key"] == portable["key"]
    assert wh.ensure(venv, native=True) == 0  # LLAMA_NATIVE=1: the other wheel, not the one installed
    assert _marker(venv) == "native" and wh.installed_record(venv)["key"] == native["key"]
    assert wh.ensure(venv, native=False) == 0  # and back, from the wheelhouse
    assert _marker(venv) == "portable" and wh.installed_record(venv)["key"] == portable["key"]


def test_a_missing_wheel_is_built_for_exactly_these_flags(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With nothing in the wheelhouse, ensure() compiles once, with the record's CMAKE_ARGS (checked through the
    environment pip would get), and a second ensure() finds the result."""
    monkeypatch.setenv("ASSISTANT_CACHE_DIR", str(tmp_path / "cache"))
    seen: list[str] = []

    def fake_pip_wheel(cmd: list[str], env: dict[str, str], check: bool) -> subprocess.CompletedProcess[bytes]:
        seen.append(env["CMAKE_ARGS"])
        assert "--no-cache-dir" in cmd  # pip's wheel cache ignores CMAKE_ARGS
        _tiny_wheel(Path(cmd[cmd.index("-w") + 1]), "built")
        return subprocess.CompletedProcess(cmd, 0)

    record = wh.build_record(False)
    monkeypatch.setattr(wh.subprocess, "run", fake_pip_wheel)
    wheel = wh.build_wheel(record, wh.wheel_dir(record["key"]), ["pip"])
    assert seen == [" ".join(record["cmake_args"])]
    assert wheel.parent == wh.wheel_dir(record["key"]) and (wheel.parent / "build.json").is_file()
    assert not list(wheel.parent.parent.glob(".build-*"))  # the temp build dir is gone
