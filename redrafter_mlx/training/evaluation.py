"""How a drafter is scored during training, and which score makes it the best so far."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from mlx import nn

from ..decoding import generate_redrafter
from ..drafting import TreeShape
from ..drafting.seam import TreeDrafter
from ..tuning import DraftPlan
from .config import Evaluation, TrainConfig
from .replay import replay


def decode_eval(
    model: nn.Module,
    drafter: TreeDrafter,
    prompts: Sequence[list[int]],
    *,
    beam_width: int,
    beam_length: int,
    search_width: int | None = None,
    max_tokens: int = 128,
    eos_ids: frozenset[int] | set[int] = frozenset(),
    lookup: bool = False,
) -> dict[str, float]:
    """Greedy ReDrafter decoding of the prompts: tokens/step, compression, time per step.
    Without the context lookup by default: training's evals measure the drafter."""
    plan = DraftPlan(TreeShape(beam_width, beam_length, max(search_width or 0, beam_width)), lookup=lookup)
    tokens = steps = verified = 0
    seconds = 0.0
    for ids in prompts:
        last = None
        for step in generate_redrafter(model, drafter, ids, plan, max_tokens=max_tokens, eos_ids=eos_ids):
            last = step.stats
        if last is None:
            continue
        tokens += sum(last.accepted_per_step)
        steps += len(last.accepted_per_step)
        verified += sum(last.verified_tokens)
        seconds += last.generation_time
    return {
        "tokens_per_step": tokens / steps if steps else 0.0,
        "compression": verified / (steps * beam_width * beam_length) if steps else 0.0,
        "ms_per_step": 1000 * seconds / steps if steps else 0.0,
        "steps": steps,
    }


@dataclass(frozen=True)
class HeldOut:
    """What the evals score a drafter on."""

    positions: tuple[np.ndarray, np.ndarray]  # (hidden (N, D), windows (N, T+1)): top-1/top-5
    answers: Sequence[tuple[np.ndarray, np.ndarray]] = ()  # (tokens, hidden) per answer: replayed
    prompt_ids: Sequence[list[int]] = ()  # prompts decoded (the first `eval_prompts`)
    eos_ids: frozenset[int] | set[int] = frozenset()

    def settings(self, evals: Evaluation) -> dict[str, int]:
        """What a score depends on: scores measured under other settings are not comparable."""
        return {
            "heldout_positions": len(self.positions[0]),
            "heldout_answers": len(self.answers),
            "eval_prompts": min(evals.eval_prompts, len(self.prompt_ids)),
            "beam_width": evals.tree.beam_width,
            "beam_length": evals.tree.beam_length,
            "search_width": evals.tree.search_width,
            "eval_max_tokens": evals.eval_max_tokens,
        }


def evaluate(model: nn.Module, drafter: TreeDrafter, heldout: HeldOut, cfg: TrainConfig, step: int) -> dict[str, Any]:
    """One eval entry: held-out top-1/top-5 per depth (`Recipe.accuracy`), tokens/step replayed
    on the held-out answers (`replay.replay`, without lookups: it measures the drafter; not for
    a stateful drafter, which drafts from a per-generation cache the replay does not keep), and
    tokens/step decoding the first `eval_prompts` prompts; each only where there is data for it.
    The tree's beams are cut to the drafter's deepest (`max_beam_length`: heads or stages + 1)."""
    entry: dict[str, Any] = {"step": step}
    evals = cfg.evaluation
    tree = evals.tree
    tree = replace(tree, beam_length=min(tree.beam_length, drafter.max_beam_length or tree.beam_length))
    if len(heldout.positions[0]):
        entry |= cfg.recipe.accuracy(drafter, model, heldout.positions)
    if heldout.answers and not drafter.stateful:
        entry["replay_tokens_per_step"] = replay(
            drafter, model.embedding, heldout.answers, tree, max_tokens=evals.eval_max_tokens, lookup=False
        ).tokens_per_step
    if heldout.prompt_ids and evals.eval_prompts:
        entry |= decode_eval(
            model,
            drafter,
            list(heldout.prompt_ids)[: evals.eval_prompts],
            beam_width=tree.beam_width,
            beam_length=tree.beam_length,
            search_width=tree.search_width,
            max_tokens=evals.eval_max_tokens,
            eos_ids=heldout.eos_ids,
        )
    return entry


def score(entry: dict[str, Any], beam_length: int) -> float:
    """The number the best drafter maximises: the first measured of replayed tokens/step
    (every held-out answer), decoded tokens/step (a few prompts), held-out top-1 averaged
    over the depths a beam of `beam_length` drafts. Tokens/step decides because it is what
    decoding gets; top-1 weighs all depths alike, while a step only reaches depth j through
    depths 1..j-1."""
    for key in ("replay_tokens_per_step", "tokens_per_step"):
        if key in entry:
            return entry[key]
    top1 = entry.get("top1", [0.0])
    return float(np.mean(top1[: max(1, beam_length - 1)]))


def format_entry(entry: dict[str, Any]) -> str:
    """One eval entry as one console line."""
    parts = [f"step {entry['step']}", f"loss {entry.get('loss', float('nan')):.3f}"]
    if "top1" in entry:
        parts.append("top1 " + "/".join(f"{a:.2f}" for a in entry["top1"]))
        parts.append("top5 " + "/".join(f"{a:.2f}" for a in entry["top5"]))
    if "replay_tokens_per_step" in entry:
        parts.append(f"held-out tokens/step {entry['replay_tokens_per_step']:.2f}")
    if "tokens_per_step" in entry:
        parts.append(f"tokens/step {entry['tokens_per_step']:.2f} ({entry['ms_per_step']:.0f} ms/step)")
    return "  ".join(parts)
