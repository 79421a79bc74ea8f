"""How a drafter is scored during training, and which score makes it the best so far."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import mlx.core as mx
import numpy as np
from mlx import nn

from ..decoding import generate_redrafter
from ..drafting import TreeShape
from ..drafting.kinds.llm_embedding import Embedding
from ..drafting.seam import TreeDrafter
from ..tuning import DraftPlan
from .config import TrainConfig
from .eagle import eagle_accuracy
from .loss import head_index_map, unrolled_logits
from .replay import replay


def accuracy(
    drafter: TreeDrafter,
    embedding: Embedding,
    hidden: np.ndarray,
    tokens: np.ndarray,
    predict: int,
    batch: int = 2048,
) -> dict[str, list[float]]:
    """Teacher-forced top-1 / top-5 accuracy per depth over ALL targets (a target outside
    the token subset counts as a miss, so trimming is charged for what it cannot propose)."""
    index_map = head_index_map(drafter)
    hit1 = np.zeros(predict)
    hit5 = np.zeros(predict)
    total = np.zeros(predict)
    for s in range(0, len(hidden), batch):
        h = mx.array(hidden[s : s + batch])
        tok = mx.array(tokens[s : s + batch])
        logits = unrolled_logits(drafter, embedding, h, tok, predict)
        for j, lg in enumerate(logits):
            target = tok[:, j + 1]
            head_target = mx.where(target >= 0, index_map[mx.maximum(target, 0)], -1)
            top5 = mx.argpartition(-lg, kth=4, axis=-1)[:, :5] if lg.shape[-1] > 5 else mx.argsort(-lg)[:, :5]
            top1 = mx.argmax(lg, axis=-1)
            valid = target >= 0
            in1 = (top1 == head_target) & (head_target >= 0)
            in5 = ((top5 == head_target[:, None]).any(axis=-1)) & (head_target >= 0)
            r = mx.stack([in1.sum(), in5.sum(), valid.sum()])
            a, b, c = np.array(r).tolist()
            hit1[j] += a
            hit5[j] += b
            total[j] += c
    total = np.maximum(total, 1)
    return {"top1": (hit1 / total).tolist(), "top5": (hit5 / total).tolist()}


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
    prompt_ids: Sequence[list[int]] = ()  # prompts decoded (the first cfg.eval_prompts)
    eos_ids: frozenset[int] | set[int] = frozenset()

    def settings(self, cfg: TrainConfig) -> dict[str, int]:
        """What a score depends on: scores measured under other settings are not comparable."""
        return {
            "heldout_positions": len(self.positions[0]),
            "heldout_answers": len(self.answers),
            "eval_prompts": min(cfg.eval_prompts, len(self.prompt_ids)),
            "beam_width": cfg.beam_width,
            "beam_length": cfg.beam_length,
            "search_width": cfg.search_width,
            "eval_max_tokens": cfg.eval_max_tokens,
        }


def evaluate(model: nn.Module, drafter: TreeDrafter, heldout: HeldOut, cfg: TrainConfig, step: int) -> dict[str, Any]:
    """One eval entry: held-out top-1/top-5 per depth, tokens/step replayed on the held-out
    answers (`replay.replay`, without lookups: it measures the drafter), and tokens/step
    decoding the first `cfg.eval_prompts` prompts; each only where there is data for it.
    The tree's beams are cut to the drafter's deepest (`max_beam_length`: heads or stages + 1).
    EAGLE: top-1/top-5 at depth 1 on the LLM's features (`eagle.eagle_accuracy`), no replay
    (it drafts from a per-generation cache, which the replay does not keep): only the decoding
    of the eval prompts measures its tokens/step."""
    entry: dict[str, Any] = {"step": step}
    cfg = replace(cfg, beam_length=min(cfg.beam_length, drafter.max_beam_length or cfg.beam_length))
    if len(heldout.positions[0]):
        entry |= (
            eagle_accuracy(drafter, model, heldout.positions, cfg.eagle_seq)
            if drafter.kind == "eagle"
            else accuracy(drafter, model.embedding, *heldout.positions, cfg.predict)
        )
    if heldout.answers and not drafter.stateful:
        entry["replay_tokens_per_step"] = replay(
            drafter,
            model.embedding,
            heldout.answers,
            TreeShape(cfg.beam_width, cfg.beam_length, cfg.search_width),
            max_tokens=cfg.eval_max_tokens,
            lookup=False,
        ).tokens_per_step
    if heldout.prompt_ids and cfg.eval_prompts:
        entry |= decode_eval(
            model,
            drafter,
            list(heldout.prompt_ids)[: cfg.eval_prompts],
            beam_width=cfg.beam_width,
            beam_length=cfg.beam_length,
            search_width=cfg.search_width,
            max_tokens=cfg.eval_max_tokens,
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
