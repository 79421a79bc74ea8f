"""Reshaping a recurrent drafter's head for a smaller, faster drafter: trimming it to the K
tokens the LLM emits most and quantizing its linear layers. (Folding a tied head into an
untied one, which loading does next to the LLM, is `rnn.untie_head`.)"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import mlx.core as mx
import mlx.nn as nn
import numpy as np
from mlx.utils import tree_flatten

from ...errors import InputError
from .rnn import RecurrentDrafter


def _quantizable(group_size: int) -> Callable[[str, nn.Module], bool]:
    """Linear layers whose input width splits into whole quantization groups."""
    return lambda _path, m: isinstance(m, nn.Linear) and m.weight.shape[-1] % group_size == 0


def quantize_drafter(drafter: RecurrentDrafter, bits: int = 4, group_size: int = 64) -> RecurrentDrafter:
    """Quantize the drafter's Linear layers in place (affine, `bits` per weight); layers
    whose input width is not a multiple of group_size stay in floating point. The setting
    is recorded in the config so `rnn.save` / `rnn.load` round-trip it."""
    if drafter.config.quantization is not None:
        raise InputError("the drafter is already quantized")
    nn.quantize(drafter, group_size=group_size, bits=bits, class_predicate=_quantizable(group_size))
    drafter.config = replace(drafter.config, quantization={"group_size": group_size, "bits": bits})
    return drafter


def trim_head(drafter: RecurrentDrafter, token_ids: np.ndarray) -> RecurrentDrafter:
    """The same drafter with its head restricted to `token_ids` (K,) vocabulary ids (best
    first): an untied head keeps those rows of its weight, a tied one will score those rows
    of the LLM embedding. The K tokens keep exactly the logits they had; the others can no
    longer be drafted (verification, hence the output, is unchanged). A trimmed head can be
    trimmed further, to some of its own tokens. Trim before quantizing.
    Raises ValueError for a quantized head, ids that are not K distinct vocabulary ids, or
    ids a trimmed head does not score."""
    config = drafter.config
    if config.quantization is not None:
        raise ValueError("trim the head before quantizing the drafter")
    ids = np.asarray(token_ids)
    if ids.ndim != 1 or ids.size == 0 or not np.issubdtype(ids.dtype, np.integer):
        raise ValueError(f"token_ids must be a non-empty 1-D integer array, got shape {ids.shape} {ids.dtype}")
    if ids.min() < 0 or ids.max() >= config.vocab_size or np.unique(ids).size != ids.size:
        raise ValueError(f"token_ids must be distinct ids in [0, {config.vocab_size})")
    rows = ids.astype(np.int32)
    if drafter.is_trimmed:  # rows of the head are positions in its token subset
        kept = np.array(drafter.token_ids)
        position = {int(t): i for i, t in enumerate(kept)}
        if any(int(t) not in position for t in ids):
            raise ValueError(f"the head is trimmed to {kept.size} tokens: it can only keep some of those")
        rows = np.array([position[int(t)] for t in ids], dtype=np.int32)
    head, rows = f"lm_head.{config.num_draft_layers}.", mx.array(rows)
    weights = [
        (k, v[rows] if k.startswith(head) else v) for k, v in tree_flatten(drafter.parameters()) if k != "token_ids"
    ]
    trimmed = drafter.rebuilt(
        replace(config, token_subset_size=ids.size), weights + [("token_ids", mx.array(ids.astype(np.int32)))]
    )
    mx.eval(trimmed.parameters())
    return trimmed
