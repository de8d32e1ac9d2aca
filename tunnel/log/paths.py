"""Where the conversation log lives by default."""

from __future__ import annotations

from pathlib import Path

__all__ = ["DB_ENV_VAR", "default_db_path"]

DB_ENV_VAR = "TUNNEL_LOG_DB"
"""Environment variable the command line reads for `--db`."""


def default_db_path() -> Path:
    """The per-user log database: `<user data dir>/agent-tunnel/log.db` (not created here)."""
    import platformdirs  # here: the command line imports this module for DB_ENV_VAR alone

    return platformdirs.user_data_path("agent-tunnel") / "log.db"
