"""Where servesim keeps what it writes unasked: one data folder, never the working directory.

The folder is ``$SERVESIM_DATA_DIR`` when set, else the user's data directory (platformdirs:
``~/.local/share/servesim`` on Linux). Outboxes, tuning studies, the action log and the web
workbench's database live under it; every command that writes there names the path it wrote.
"""

from __future__ import annotations

import os
from pathlib import Path

ENV_VAR = "SERVESIM_DATA_DIR"


def data_dir(override: str | Path | None = None) -> Path:
    """The data folder (created on first use): ``override``, ``$SERVESIM_DATA_DIR``, or the user's."""
    if override is not None:
        path = Path(override)
    elif os.environ.get(ENV_VAR):
        path = Path(os.environ[ENV_VAR])
    else:
        from platformdirs import user_data_dir

        path = Path(user_data_dir("servesim", appauthor=False))
    path.mkdir(parents=True, exist_ok=True)
    return path


__all__ = ["ENV_VAR", "data_dir"]
