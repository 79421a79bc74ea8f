"""The one exception type for "the user's input is wrong".

The CLI shows an `InputError` (and the OS errors of a user's path) as one line and exits
non-zero; anything else is a bug and keeps its traceback. It subclasses `ValueError`, so code
that already catches `ValueError` around the library keeps working.
"""

from __future__ import annotations


class InputError(ValueError):
    """Bad input: a missing or malformed model, checkpoint, file or option value."""


class DrafterLoadError(InputError):
    """A drafter folder that cannot be loaded; the message says which file, key or shape."""
