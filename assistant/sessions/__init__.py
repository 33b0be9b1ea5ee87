"""Sessions, messages and feedback: the contract, the logic and SQLite (store.py), PostgreSQL (postgres.py), and
`open_store`, which picks one from the settings."""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from .postgres import PostgresSessionStore
from .store import (
    CLIENT_PATTERN,
    ID_PATTERN,
    SCHEMA_VERSION,
    SessionStorage,
    SessionStore,
    unknown_session,
    valid_id,
)

if TYPE_CHECKING:
    from ..settings import Settings

__all__ = ["CLIENT_PATTERN", "ID_PATTERN", "SCHEMA_VERSION", "PostgresSessionStore", "SessionStorage", "SessionStore",
           "open_store", "unknown_session", "valid_id"]


def open_store(settings: Settings) -> SessionStorage:
    """The store the settings name: PostgreSQL for a `database_url`, else SQLite in the state directory."""
    age, count = settings.session_max_age_days, settings.session_max_count
    if settings.database_url:
        return PostgresSessionStore(settings.database_url, max_age_days=age, max_sessions=count)
    return SessionStore(Path(settings.state_dir) / "assistant.db", max_age_days=age, max_sessions=count)
