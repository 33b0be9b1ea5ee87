"""API keys: loading, hashing and constant-time matching. Owns what a key *is* to the rest of the program.

Keys come from settings.api_keys (ASSISTANT_API_KEYS, comma-separated) and settings.api_keys_file
(ASSISTANT_API_KEYS_FILE, one key a line; blank lines and lines starting with # are skipped). Only their
sha256 digests are kept ("sha256:<hex>"): settings hash the environment's keys as they are read, and the
file is hashed line by line as it is read. There is no default key: with none configured, `KeyRing.enabled`
is False and the server is a single local user's (loopback only, see ui/server.py serve()).

A key's *owner id* (`owner_id`) is the first 16 hex digits of its digest: what a session row stores to say
which key created it (assistant/sessions/). It names the key without being usable as one.
"""
from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from .errors import UserError

_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")


def hash_key(key: str) -> str:
    """The stored form of a key: 'sha256:<64 hex>'."""
    return "sha256:" + hashlib.sha256(key.encode("utf-8")).hexdigest()


def owner_id(digest: str) -> str:
    """The id a session row stores for the key with this digest (16 hex digits)."""
    return digest.removeprefix("sha256:")[:16]


def hash_keys(value: Any) -> tuple[str, ...]:
    """Digests of keys given as a comma-separated string or a list; digests already hashed stay as they are
    (so re-validating settings does not hash twice). Empty items are dropped."""
    if value is None:
        return ()
    items: Iterable[Any] = value.split(",") if isinstance(value, str) else value
    out = []
    for item in items:
        text = str(item).strip()
        if text:
            out.append(text if _DIGEST.match(text) else hash_key(text))
    return tuple(dict.fromkeys(out))


def read_key_file(path: Path) -> tuple[str, ...]:
    """Digests of the keys in a file (one a line). A missing or unreadable file is a UserError."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise UserError("keys_file", f"Cannot read the API keys file {path}: {exc.strerror or exc}.",
                        f"无法读取 API 密钥文件 {path}：{exc.strerror or exc}。") from None
    return hash_keys([ln for ln in lines if ln.strip() and not ln.lstrip().startswith("#")])


class KeyRing:
    """The configured keys, as digests. `match` is constant-time in the presented key and the ring's size."""

    def __init__(self, digests: Iterable[str] = ()) -> None:
        self._digests = tuple(dict.fromkeys(digests))

    @classmethod
    def from_settings(cls, settings: Any) -> KeyRing:
        digests = tuple(getattr(settings, "api_keys", ()) or ())
        path = getattr(settings, "api_keys_file", None)
        if path:
            digests += read_key_file(Path(path))
        return cls(digests)

    @property
    def enabled(self) -> bool:
        return bool(self._digests)

    def __len__(self) -> int:
        return len(self._digests)

    def match(self, presented: str | None) -> str | None:
        """The owner id of the presented key when it is one of ours, else None. Every digest is compared
        (hmac.compare_digest), so the time taken says nothing about which one matched, or how closely."""
        if not presented:
            return None
        candidate = hash_key(presented).encode()
        found: str | None = None
        for digest in self._digests:
            if hmac.compare_digest(candidate, digest.encode()):
                found = digest
        return owner_id(found) if found is not None else None
