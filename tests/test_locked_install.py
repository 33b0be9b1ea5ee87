"""A fresh install takes exactly the locked versions, whatever the index offers (tools/locked_install.py).

The index here is a folder the test writes: every file of requirements/lock.txt (`pip download` by hash) plus a
newer uvicorn (0.99.0, a stub wheel with the `standard` extra), the situation that broke every fresh install when
uvicorn 0.55.0 came out after the lock. The venv is made by `python3 -m venv`, with the pip it bundles, as a user
has it. The old command (`pip install --require-hashes -r lock`) fails on that index; the project's install takes
exactly the lock and `pip check` passes.
"""
from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LOCK = ROOT / "requirements" / "lock.txt"
SCRIPT = ROOT / "tools" / "locked_install.py"
BASE_PYTHON = Path(getattr(sys, "_base_executable", sys.executable))

pytestmark = pytest.mark.slow


def _pins(lock: Path) -> dict[str, str]:
    return {m[1].lower().replace("_", "-"): m[2]
            for m in re.finditer(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+) \\", lock.read_text(encoding="utf-8"), re.M)}


def _stub_wheel(folder: Path, name: str, version: str, extra: str) -> Path:
    """A valid, installable wheel of `name` `version` that declares `extra`: a newer release than the lock's."""
    dist = f"{name}-{version}.dist-info"
    files = {
        f"{name}/__init__.py": b"STUB = True\n",
        f"{dist}/METADATA": (f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
                             f"Provides-Extra: {extra}\n").encode(),
        f"{dist}/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = [f"{path},sha256={base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b'=').decode()},"
              f"{len(data)}" for path, data in files.items()] + [f"{dist}/RECORD,,"]
    wheel = folder / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        for path, data in files.items():
            z.writestr(path, data)
        z.writestr(f"{dist}/RECORD", "\n".join(record) + "\n")
    return wheel


@pytest.fixture(scope="module")
def local_index(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("index")
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--disable-pip-version-check", "--no-deps",
                    "--require-hashes", "-r", str(LOCK), "-d", str(folder)], check=True)
    assert _pins(LOCK)["uvicorn"] == "0.54.0"
    _stub_wheel(folder, "uvicorn", "0.99.0", "standard")
    return folder


def _fresh_venv(path: Path) -> Path:
    subprocess.run([str(BASE_PYTHON), "-m", "venv", str(path)], check=True)
    return path


def _offline(index: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    return {**env, "PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(index), "PIP_CONFIG_FILE": os.devnull}


def test_the_old_command_breaks_on_a_newer_release_with_an_extra(local_index: Path, tmp_path: Path) -> None:
    """The hazard is real on this index: the bundled pip resolves chromadb's uvicorn[standard] to the newest."""
    venv = _fresh_venv(tmp_path / "old")
    done = subprocess.run([str(venv / "bin" / "pip"), "install", "--disable-pip-version-check", "--require-hashes",
                           "-r", str(LOCK)], capture_output=True, text=True, env=_offline(local_index))
    assert done.returncode != 0 and "uvicorn" in done.stderr + done.stdout


def test_the_locked_install_takes_exactly_the_lock(local_index: Path, tmp_path: Path) -> None:
    venv = _fresh_venv(tmp_path / "fresh")
    bundled = subprocess.run([str(venv / "bin" / "pip"), "--version"], capture_output=True, text=True).stdout
    env = _offline(local_index)
    subprocess.run([str(BASE_PYTHON), str(SCRIPT), "install", "--venv", str(venv), str(LOCK)], check=True, env=env)
    subprocess.run([str(BASE_PYTHON), str(SCRIPT), "check", "--venv", str(venv)], check=True, env=env)
    listed = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "list", "--format", "json"],
                            capture_output=True, text=True, check=True, env=env).stdout
    installed = {d["name"].lower().replace("_", "-"): d["version"] for d in json.loads(listed)}
    pins = _pins(LOCK)
    wrong = {name: (version, installed.get(name)) for name, version in pins.items() if installed.get(name) != version}
    assert not wrong, f"not installed at the locked version: {wrong}"
    assert installed["uvicorn"] == "0.54.0" and installed["pip"] == pins["pip"] != bundled.split()[1]
