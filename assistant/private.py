"""Private, durable state on disk: directories 0700 and files 0600 whatever the umask (the sessions database,
index generations, the CURRENT pointer, the embedding cache), and writes that are on disk (fsynced) before a
rename makes them visible."""
from __future__ import annotations

import os
from pathlib import Path

DIR_MODE = 0o700
FILE_MODE = 0o600


def private_dir(path: Path) -> Path:
    """`path` as a directory; the ones created here (it and any missing parents) are 0700."""
    path = Path(path)
    missing = []
    p = path
    while not p.exists():
        missing.append(p)
        p = p.parent
    for d in reversed(missing):
        try:
            d.mkdir(mode=DIR_MODE)
        except FileExistsError:  # made by another process meanwhile
            continue
        os.chmod(d, DIR_MODE)  # mkdir's mode is masked by the umask
    return path


def private_file(path: Path) -> Path:
    """`path` as an existing file with mode 0600 (created empty when missing); its directory must exist."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, FILE_MODE)
    try:
        os.fchmod(fd, FILE_MODE)
    finally:
        os.close(fd)
    return Path(path)


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def seal_tree(root: Path) -> None:
    """Make every file under `root` 0600 and every directory 0700, and fsync them all (files first, then the
    directories from the deepest up), so the tree is complete on disk before it is published."""
    dirs: list[Path] = []
    for here, _subdirs, files in os.walk(root):
        dirs.append(Path(here))
        for name in files:
            fd = os.open(Path(here) / name, os.O_RDONLY)
            try:
                os.fchmod(fd, FILE_MODE)
                os.fsync(fd)
            finally:
                os.close(fd)
    for d in reversed(dirs):
        os.chmod(d, DIR_MODE)
        fsync_dir(d)


def replace_durably(path: Path, text: str) -> None:
    """Write `text` to a 0600 temp file beside `path`, fsync it, rename it over `path`, fsync the directory."""
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, FILE_MODE)
    try:
        os.fchmod(fd, FILE_MODE)
        os.write(fd, text.encode("utf-8"))
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    fsync_dir(path.parent)
