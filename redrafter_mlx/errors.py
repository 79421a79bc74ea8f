"""The one exception type for "the user's input is wrong".

The CLI shows an `InputError` (and the OS errors of a user's path) as one line and exits
non-zero; anything else is a bug and keeps its traceback. It subclasses `ValueError`, so code
that already catches `ValueError` around the library keeps working.
"""

from __future__ import annotations

from pathlib import Path


class InputError(ValueError):
    """Bad input: a missing or malformed model, checkpoint, file or option value."""


class DrafterLoadError(InputError):
    """A drafter folder that cannot be loaded; the message says which file, key or shape."""


class TargetExists(InputError):
    """An output folder that already holds files, written only when the caller says to replace it
    (`force=True`); `path` is that folder, so a front end can say how to ask for that."""

    def __init__(self, path: Path):
        super().__init__(f"{path} exists and is not empty")
        self.path = path
