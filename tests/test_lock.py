"""The hash-pinned locks in requirements/ still match pyproject.toml: every dependency (and extra) is pinned there
at a version its specifier allows, with hashes, and llama-cpp-python is left to the wheelhouse. Fails when a
dependency is added or changed without `make lock`.
"""
from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
PROJECT = canonicalize_name(PYPROJECT["project"]["name"])


def _pins(lock: str) -> dict[str, tuple[str, int]]:
    """name -> (version, number of hashes) of a generated lock."""
    text = (ROOT / "requirements" / lock).read_text(encoding="utf-8")
    pins: dict[str, tuple[str, int]] = {}
    for block in re.split(r"\n(?=[A-Za-z0-9])", text):
        match = re.match(r"([A-Za-z0-9][A-Za-z0-9._-]*)(?:\[[^\]]*\])?==(\S+)", block)
        if match:
            pins[canonicalize_name(match[1])] = (match[2], block.count("--hash=sha256:"))
    return pins


def _requirements(*extras: str) -> list[Requirement]:
    reqs = [Requirement(r) for r in PYPROJECT["project"]["dependencies"]]
    todo, seen = list(extras), set()
    while todo:
        extra = todo.pop()
        if extra in seen:
            continue
        seen.add(extra)
        for line in PYPROJECT["project"]["optional-dependencies"][extra]:
            req = Requirement(line)
            if canonicalize_name(req.name) == PROJECT:  # "framework-advisor[langchain]"
                todo.extend(req.extras)
            else:
                reqs.append(req)
    return reqs


@pytest.mark.parametrize(("lock", "extras"), [("lock.txt", ("dev",)), ("torch.txt", ("dev", "torch"))])
def test_the_lock_pins_every_dependency_of_pyproject(lock: str, extras: tuple[str, ...]) -> None:
    pins = _pins(lock)
    assert pins and all(count >= 1 for _, count in pins.values()), "every pin carries a hash"
    assert "llama-cpp-python" not in pins  # built locally into the wheelhouse; no lock can hash it
    for req in _requirements(*extras):
        name = canonicalize_name(req.name)
        if name == "llama-cpp-python":
            continue
        assert name in pins, f"{req.name} is in pyproject.toml but not in requirements/{lock}: run `make lock`"
        version = pins[name][0]
        assert req.specifier.contains(version, prereleases=True), \
            f"requirements/{lock} pins {req.name}=={version}, pyproject.toml wants {req}: run `make lock`"


def test_the_torch_lock_agrees_with_the_main_lock() -> None:
    main, torch = _pins("lock.txt"), _pins("torch.txt")
    assert {name: pin[0] for name, pin in main.items()} == {name: torch[name][0] for name in main}
    assert torch["torch"][0].startswith("2.13.0")


def test_the_model_lock_pins_requirements_models() -> None:
    wanted = {}
    for line in (ROOT / "requirements-models.txt").read_text(encoding="utf-8").splitlines():
        if line.strip() and not line.startswith("#"):
            name, version = line.split("==")
            wanted[canonicalize_name(name)] = version.strip()
    pins = _pins("models.txt")
    assert {name: pin[0] for name, pin in pins.items()} == wanted
    assert all(count >= 1 for _, count in pins.values())
