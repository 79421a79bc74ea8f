"""Convert a PyTorch-trained ReDrafter drafter into an MLX drafter folder.

Sources: a folder (or one file in it) holding config.json plus one of model.safetensors,
pytorch_model.bin or model.pt. Key names are those of Apple's reference checkpoints
(see rnn.py), or the variants TensorRT-LLM's `examples/redrafter/convert_checkpoint.py`
accepts: `input_projs.*` / `lm_heads.*` for `input_proj.*` / `lm_head.*`, and `0.{i}.*` for
`lm_head.{i}.*` (the head saved as element 0 of a container). A `0.` prefix on any other
key (a whole drafter saved inside a container) is stripped.

safetensors are read by MLX itself; .bin / .pt need PyTorch (an optional dependency).
A full-vocabulary head can be trimmed to the K tokens the target LLM emits most
(`formats.target_llm.head_tokens_for`): drafting then reads K head rows per step instead of V.
The output is written beside OUT and renamed into place, so OUT is never half-written.
"""

from __future__ import annotations

from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

import mlx.core as mx
import numpy as np
from mlx.utils import tree_flatten

from ...errors import DrafterLoadError, InputError
from ...formats.checkpoint import check_target, read_checkpoint, save_staged
from ...formats.target_llm import check_llm_config
from .rnn import IGNORED_KEYS, DrafterConfig, RecurrentDrafter, build_drafter, read_config, read_ngrams, save
from .rnn_heads import quantize_drafter, trim_head

WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin", "model.pt")
QUANT_BITS = (4, 8)
GROUP_SIZES = (32, 64, 128)  # what mx.quantize supports
_RENAMED_PREFIXES = (("input_projs.", "input_proj."), ("lm_heads.", "lm_head."))


def convert_drafter(
    src: Path,
    out: Path,
    *,
    dtype: mx.Dtype,
    bits: int | None = None,
    group_size: int = 64,
    llm_config: dict[str, Any] | None = None,
    head_token_ids: np.ndarray | None = None,
    head_tokens: int | None = None,
    force: bool = False,
) -> Path:
    """Validate SRC against its config.json (and the target LLM's config when given), cast
    to `dtype`, trim the head to `head_token_ids` (K,) when given (`head_tokens_for`), or a
    trimmed head to its own `head_tokens` best-ranked tokens (its token ids are best first),
    optionally quantize to `bits`, and write an MLX drafter folder at OUT.
    Raises InputError (DrafterLoadError, TargetExists...) or FileExistsError with one-line messages."""
    src, out = Path(src).expanduser(), Path(out).expanduser().absolute()
    _check_quantization(bits, group_size)
    folder, weights_file = locate_checkpoint(src)
    if folder.resolve().is_relative_to(out.resolve()):
        raise InputError(f"{out} holds the source checkpoint; write to another folder")
    check_target(out, force)
    config = read_config(folder)
    if config.quantization is not None:
        raise DrafterLoadError(f"{folder}: already a quantized MLX drafter, nothing to convert")
    if llm_config is not None:
        check_llm_config(config, llm_config)
    weights = canonical_weights(read_checkpoint(weights_file), weights_file)
    drafter = build_drafter(config, weights, weights_file, dtype)
    drafter.ngrams = read_ngrams(folder, config)  # an MLX drafter's n-gram table travels with it
    if head_tokens is not None and drafter.is_trimmed:
        if head_tokens > config.token_subset_size:
            raise DrafterLoadError(
                f"{folder}: the head is trimmed to {config.token_subset_size:,} tokens; "
                f"it can keep fewer, not {head_tokens:,}"
            )
        head_token_ids = np.array(drafter.token_ids)[:head_tokens]
    if head_token_ids is not None:
        try:
            drafter = trim_head(drafter, head_token_ids)
        except ValueError as e:
            raise DrafterLoadError(f"{folder}: {e}") from None
    if bits is not None:
        quantize_drafter(drafter, bits=bits, group_size=group_size)
    return save_staged(partial(save, drafter), out)


def _check_quantization(bits: int | None, group_size: int) -> None:
    """Fail before reading a possibly large checkpoint."""
    if bits is not None and bits not in QUANT_BITS:
        raise InputError(f"bits must be one of {QUANT_BITS}, got {bits}")
    if bits is not None and group_size not in GROUP_SIZES:
        raise InputError(f"group size must be one of {GROUP_SIZES}, got {group_size}")


def locate_checkpoint(src: Path) -> tuple[Path, Path]:
    """(folder holding config.json, weights file) for a checkpoint folder or weights file."""
    if src.is_file():
        return src.parent, src
    if not src.is_dir():
        raise DrafterLoadError(f"{src}: no such file or folder")
    found = next((src / name for name in WEIGHT_FILES if (src / name).is_file()), None)
    if found is None:
        raise DrafterLoadError(f"{src}: no drafter weights (expected one of {', '.join(WEIGHT_FILES)})")
    return src, found


def canonical_key(key: str) -> str:
    """Reference name for a reference or TensorRT-LLM-style key."""
    if key.startswith("0."):
        rest = key[2:]
        key = f"lm_head.{rest}" if rest[:1].isdigit() else rest
    for old, new in _RENAMED_PREFIXES:
        if key.startswith(old):
            return new + key[len(old) :]
    return key


def canonical_weights(weights: dict[str, mx.array], source: Path) -> dict[str, mx.array]:
    """Rename to reference keys and drop unused ones; two keys naming one weight is an error."""
    renamed: dict[str, mx.array] = {}
    origin: dict[str, str] = {}
    for key, value in weights.items():
        name = canonical_key(key)
        if name in origin:
            raise DrafterLoadError(f"{source}: keys {origin[name]!r} and {key!r} both name {name!r}")
        origin[name] = key
        if name not in IGNORED_KEYS:
            renamed[name] = value
    return renamed


def parameter_count(config: DrafterConfig) -> int:
    """Logical (unquantized) parameter count from shapes alone: MLX initialisation is lazy,
    so building an unquantized RecurrentDrafter to count costs no memory or compute."""
    plain = RecurrentDrafter(replace(config, quantization=None))
    return sum(v.size for _, v in tree_flatten(plain.trainable_parameters()))
