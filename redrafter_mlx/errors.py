"""Exceptions that mean "the user's input is wrong", shown as one line by the CLI."""

from __future__ import annotations

import json

from .distill_workers import WorkerFailed
from .gguf import GGUFError
from .loading import ModelLoadError

USER_ERRORS: tuple[type[BaseException], ...] = (
    ModelLoadError,
    GGUFError,
    FileNotFoundError,
    FileExistsError,
    NotADirectoryError,
    PermissionError,
    json.JSONDecodeError,
    ValueError,
    WorkerFailed,
)
