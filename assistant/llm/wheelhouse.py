"""The llama-cpp-python build: which CPU features it is compiled for, and the wheelhouse that keeps it.

llama-cpp-python has no wheel for this kind of machine, so it compiles from source. Two things went wrong
with pip doing that on its own: `-DGGML_NATIVE=ON` compiled in whatever the build machine's CPU advertised
(AMX tile kernels on a CPU that reports AMX, which then died with SIGILL on the first real prompt), and pip's
wheel cache ignores CMAKE_ARGS, so changing the flags silently reused the old build.

This module owns both: `PORTABLE` is the default feature set (AVX2, FMA, F16C, BMI2: every x86-64 server CPU
of the last decade, nothing that depends on the build machine); `NATIVE` is the opt-in (`LLAMA_NATIVE=1`).
The wheel is built once per (version, flags) into `<cache>/wheels/llama-cpp-python/<version>-<key>/`, outside
the checkout, so a fresh clone and CI reuse it, and installed from there; a change of flags means a new key
and one new build. `build.json` beside the wheel (and copied into the venv) records version, flags and key, so
`assistant doctor` can compare the build against the CPU.

It runs before the project is installed (`python3 assistant/llm/wheelhouse.py ensure ...` from the Makefile),
so it uses the standard library only.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

PACKAGE = "llama-cpp-python"
VERSION = "0.3.36"
_COMMON = ["-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_EXAMPLES=OFF", "-DLLAMA_BUILD_TOOLS=OFF",
           "-DLLAMA_BUILD_SERVER=OFF"]
# Every instruction-set switch is spelled out: ggml's defaults change between versions, and runtime
# dispatch (GGML_CPU_ALL_VARIANTS / GGML_BACKEND_DL) picks its variant from CPUID alone, which is exactly
# what chose the AMX kernels on the machine that crashed.
PORTABLE = ["-DGGML_NATIVE=OFF", "-DGGML_CPU_ALL_VARIANTS=OFF", "-DGGML_BACKEND_DL=OFF",
            "-DGGML_SSE42=ON", "-DGGML_AVX=ON", "-DGGML_AVX2=ON", "-DGGML_FMA=ON", "-DGGML_F16C=ON",
            "-DGGML_BMI2=ON", "-DGGML_AVX_VNNI=OFF", "-DGGML_AVX512=OFF", "-DGGML_AVX512_VBMI=OFF",
            "-DGGML_AVX512_VNNI=OFF", "-DGGML_AVX512_BF16=OFF", "-DGGML_AMX_TILE=OFF", "-DGGML_AMX_INT8=OFF",
            "-DGGML_AMX_BF16=OFF"] + _COMMON
NATIVE = ["-DGGML_NATIVE=ON"] + _COMMON
# /proc/cpuinfo flag names the portable build needs (sse4_2 is implied by avx2 on every real CPU).
PORTABLE_CPU_FLAGS = ("avx", "avx2", "fma", "f16c", "bmi2")


def flags_for(native: bool) -> list[str]:
    return list(NATIVE if native else PORTABLE)


def build_key(version: str, flags: list[str]) -> str:
    """Short, stable id of one build: the version and the exact flags, in order."""
    digest = hashlib.sha256((version + "\0" + "\0".join(flags)).encode()).hexdigest()[:12]
    return f"{version}-{digest}"


def cache_root() -> Path:
    base = os.environ.get("ASSISTANT_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "framework-advisor")
    return Path(base).expanduser()


def wheel_dir(key: str, root: Path | None = None) -> Path:
    return (root or cache_root()) / "wheels" / PACKAGE / key


def source_lock(version: str = VERSION) -> Path:
    """requirements/llama.txt: the engine's sdist pinned by hash (written by `make lock`)."""
    lock = Path(__file__).resolve().parents[2] / "requirements" / "llama.txt"
    if f"{PACKAGE}=={version}" not in lock.read_text(encoding="utf-8"):
        raise SystemExit(f"wheelhouse: {lock} does not pin {PACKAGE}=={version}; run `make lock`")
    return lock


def build_record(native: bool, version: str = VERSION) -> dict:
    flags = flags_for(native)
    return {"package": PACKAGE, "version": version, "native": native, "cmake_args": flags,
            "key": build_key(version, flags),
            "cpu_flags_required": [] if native else list(PORTABLE_CPU_FLAGS)}


def installed_record(prefix: str | Path | None = None) -> dict | None:
    """The build.json of the llama-cpp-python installed in this (or the given) environment, if recorded."""
    path = Path(prefix or sys.prefix) / "llama-build.json"
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _find_wheel(directory: Path) -> Path | None:
    wheels = sorted(directory.glob("llama_cpp_python-*.whl"))
    return wheels[-1] if wheels else None


def build_wheel(record: dict, directory: Path, pip: list[str]) -> Path:
    """Compile the wheel into a temp dir beside `directory`, then move it in: no half-built wheel is ever found."""
    directory.parent.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, CMAKE_ARGS=" ".join(record["cmake_args"]))
    env.setdefault("CMAKE_BUILD_PARALLEL_LEVEL", str(os.cpu_count() or 2))
    with tempfile.TemporaryDirectory(dir=directory.parent, prefix=".build-") as tmp:
        print(f"wheelhouse: compiling {PACKAGE}=={record['version']} ({'native' if record['native'] else 'portable'}"
              f" build {record['key']}); this takes 5-20 minutes on 2 cores, once", flush=True)
        # --no-cache-dir: pip's own wheel cache is keyed without CMAKE_ARGS and would hand back an old build.
        # The sdist comes by hash (requirements/llama.txt) and the build backend from the venv, which the lock
        # filled (--no-build-isolation): an isolated build would fetch the newest scikit-build-core unpinned.
        subprocess.run([*pip, "wheel", "--no-deps", "--no-cache-dir", "--no-binary", PACKAGE, "--no-build-isolation",
                        "--require-hashes", "-r", str(source_lock(record["version"])), "-w", tmp],
                       env=env, check=True)
        built = _find_wheel(Path(tmp))
        if built is None:
            raise SystemExit(f"wheelhouse: pip produced no {PACKAGE} wheel in {tmp}")
        Path(tmp, "build.json").write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
        if directory.exists():
            shutil.rmtree(directory)
        os.replace(tmp, directory)
        os.makedirs(tmp, exist_ok=True)  # TemporaryDirectory removes it on exit
    wheel = _find_wheel(directory)
    assert wheel is not None
    return wheel


def ensure(venv: Path, native: bool, rebuild: bool = False) -> int:
    """Make `venv` hold the llama-cpp-python build for these flags: build once, reinstall from the wheelhouse."""
    record = build_record(native)
    python = venv / "bin" / "python"
    pip = [str(python), "-m", "pip"]
    directory = wheel_dir(record["key"])
    current = installed_record(venv)
    if not rebuild and current and current.get("key") == record["key"] and _installed_version(python) == VERSION:
        print(f"wheelhouse: {PACKAGE} {record['key']} already installed")
        return 0
    wheel = None if rebuild else _find_wheel(directory)
    if wheel is None:
        wheel = build_wheel(record, directory, pip)
    else:
        print(f"wheelhouse: installing {wheel.name} from {directory} (build {record['key']})", flush=True)
    subprocess.run([*pip, "install", "-q", "--force-reinstall", "--no-deps", str(wheel)], check=True)
    (venv / "llama-build.json").write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    return 0


def _installed_version(python: Path) -> str | None:
    out = subprocess.run([str(python), "-c", "import importlib.metadata as m; print(m.version('llama-cpp-python'))"],
                         capture_output=True, text=True)
    return out.stdout.strip() if out.returncode == 0 else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Build llama-cpp-python once per flags and install it from the "
                                                 "wheelhouse under the user's cache directory.")
    sub = parser.add_subparsers(dest="cmd", required=True)
    for name in ("ensure", "rebuild"):
        p = sub.add_parser(name)
        p.add_argument("--venv", type=Path, required=True)
        p.add_argument("--native", action="store_true", help="-march=native build (opt-in: only for a CPU you know)")
    key = sub.add_parser("key", help="print the build key for these flags")
    key.add_argument("--native", action="store_true")
    args = parser.parse_args(argv)
    if args.cmd == "key":
        print(build_record(args.native)["key"])
        return 0
    return ensure(args.venv, args.native, rebuild=args.cmd == "rebuild")


if __name__ == "__main__":
    sys.exit(main())
