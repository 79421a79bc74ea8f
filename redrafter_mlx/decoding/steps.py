"""What every decoder yields: `Step`s of tokens with the running `GenerationStats`, and the
limits an answer stops at (EOS, max_tokens, the model's context)."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field

from ..errors import InputError
from ..models.llm import LLM


@dataclass
class GenerationStats:
    """Counters every decoder keeps; `steps` = LLM forward passes after prefill."""

    prompt_tokens: int = 0
    cached_tokens: int = 0  # prompt tokens whose keys/values came from a prompt cache
    num_tokens: int = 0
    prompt_time: float = 0.0
    generation_time: float = 0.0
    accepted_per_step: list[int] = field(default_factory=list)
    verified_tokens: list[int] = field(default_factory=list)  # unique tokens of each verified tree
    tree_cells: list[int] = field(default_factory=list)  # W * L of each verified tree (L may adapt)
    phase_times: dict[str, float] = field(default_factory=dict)
    finish_reason: str = "length"  # "stop" when an EOS token ended generation

    @property
    def steps(self) -> int:
        return len(self.accepted_per_step)

    @property
    def prompt_tps(self) -> float:
        return self.prompt_tokens / self.prompt_time if self.prompt_time else 0.0

    @property
    def generation_tps(self) -> float:
        return self.num_tokens / self.generation_time if self.generation_time else 0.0

    @property
    def compression(self) -> float | None:
        """Tree attention's saving: verified tokens / the W * L cells drafted (None: no tree)."""
        return sum(self.verified_tokens) / sum(self.tree_cells) if self.tree_cells else None

    @property
    def tokens_per_step(self) -> float:
        """Tokens produced per forward pass after prefill (AR: 1.0)."""
        return sum(self.accepted_per_step) / self.steps if self.steps else 1.0


@dataclass
class Step:
    tokens: list[int]  # tokens this step produced, in order; never an EOS
    stats: GenerationStats


def answer_part(tokens: list[int], eos_ids: set[int] | frozenset[int], room: int) -> tuple[list[int], bool]:
    """What a step's accepted tokens add to the answer: those before the first EOS, at most
    `room` of them; and whether an EOS ended the answer (not one past the room: plain decoding
    ends at max_tokens before it draws that token)."""
    stop = next((i for i, t in enumerate(tokens) if t in eos_ids), None)
    return tokens[: len(tokens) if stop is None else stop][:room], stop is not None and stop < room


def context_room(model: LLM, used: int) -> int:
    """Tokens that still fit in the model's context after `used` tokens (prompt and history)."""
    limit = model.args.max_position_embeddings
    if not limit:
        return sys.maxsize
    if used >= limit:
        raise InputError(
            f"the prompt is {used} tokens, but the model's context holds {limit}: shorten it "
            f"(or, in chat, /reset the conversation)"
        )
    return limit - used
