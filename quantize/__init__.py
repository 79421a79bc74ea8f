"""Quantize an LLM and/or a drafter and save folders that redrafter and mlx-lm load.

The LLM goes through mlx-lm's own `quantize_model` (so the folder is exactly what
`mlx_lm.convert -q` would write); the drafter through `rnn_heads.quantize_drafter`.
"""

from __future__ import annotations

from pathlib import Path

from mlx.utils import tree_flatten
from mlx_lm.utils import quantize_model as mlx_lm_quantize_model

from redrafter_mlx.drafting.kinds.rnn import RecurrentDrafter
from redrafter_mlx.drafting.kinds.rnn import save as save_drafter
from redrafter_mlx.drafting.kinds.rnn_heads import quantize_drafter
from redrafter_mlx.errors import InputError
from redrafter_mlx.formats.checkpoint import check_target
from redrafter_mlx.formats.export import export_hf_folder
from redrafter_mlx.formats.loading import LoadedModel

BITS = (4, 8)
GROUP_SIZES = (32, 64, 128)


def check_settings(bits: int, group_size: int) -> None:
    if bits not in BITS:
        raise InputError(f"--bits must be one of {BITS}, got {bits}")
    if group_size not in GROUP_SIZES:
        raise InputError(f"--group-size must be one of {GROUP_SIZES}, got {group_size}")


def quantize_llm(loaded: LoadedModel, out: Path, bits: int, group_size: int, force: bool = False) -> Path:
    """Quantize the loaded model in place and write it as an mlx-lm-loadable folder."""
    check_settings(bits, group_size)
    model, config = mlx_lm_quantize_model(loaded.model, dict(loaded.config), group_size, bits)
    weights = dict(tree_flatten(model.parameters()))
    return export_hf_folder(config, weights, loaded.tokenizer._tokenizer, out, force=force)


def quantize_and_save_drafter(
    drafter: RecurrentDrafter, out: Path, bits: int, group_size: int, force: bool = False
) -> Path:
    """Quantize a drafter in place and save it (refusing to overwrite without force)."""
    check_settings(bits, group_size)
    out = Path(out)
    check_target(out, force)
    return save_drafter(quantize_drafter(drafter, bits=bits, group_size=group_size), out)
