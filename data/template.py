"""The template record shared by the prompt-set builder's content modules."""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Callable


@dataclass(frozen=True)
class T:
    """One prompt template.

    ``text`` and each of ``followups`` are ``str.format`` strings. Fields are filled from the
    slot lists (see ``templates_text``) or, first, from the dict returned by ``make(rng)``, which
    lets a template compute consistent values (numbers of a word problem, a generated passage).
    ``quota`` is how many distinct prompts to draw from the template.
    """

    tid: str
    category: str
    text: str
    followups: tuple[str, ...] = ()
    quota: int = 20
    make: Callable[[random.Random], dict] | None = None
