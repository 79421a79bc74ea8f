"""Medusa (arXiv 2401.10774): independent heads on the LLM's last hidden state.

Head h reads the LLM's final-norm hidden state at position t and predicts the token at
t + h + 2 (head 0: the token after the LLM's own next token), through `num_layers` ResBlocks
`x + silu(W x + b)` and a bias-free vocabulary projection. Upstream (FasterDecoding/Medusa,
`medusa/model/medusa_model.py`) saves `medusa_head.state_dict()` of an
nn.ModuleList of nn.Sequential as `medusa_lm_head.pt` (newer trainers:
`medusa_lm_head.safetensors`): keys `{h}.{i}.linear.{weight,bias}` for i < num_layers and
`{h}.{num_layers}.weight`. Our MLX folder's model.safetensors holds exactly those keys
(the module's parameters are the same names under `heads.`), so converting is a re-save.
Upstream repeats one ResBlock object when num_layers > 1 (`[ResBlock(h)] * n`), so those
keys hold equal tensors; loaded as independent layers they compute the same function.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import mlx.core as mx
import mlx.nn as nn
from mlx.utils import tree_flatten

from ...errors import DrafterLoadError, InputError
from ...formats.checkpoint import (
    CONFIG_FILE,
    WEIGHTS_FILE,
    cast_floats,
    check_target,
    check_weights,
    read_checkpoint,
    read_weights,
    save_staged,
)
from ...formats.target_llm import check_llm_config
from ..seam import StepFn, TreeDrafter
from .rnn import ResBlock

MODEL_TYPE = "medusa_drafter"
UPSTREAM_FILES = ("medusa_lm_head.safetensors", "medusa_lm_head.pt")
_PREFIX = "heads."  # the module's parameter names are the file's keys under this
_PROJECTION = re.compile(r"(\d+)\.(\d+)\.weight")  # upstream `{h}.{num_layers}.weight`


@dataclass(frozen=True)
class MedusaConfig:
    """The MLX folder's config.json."""

    vocab_size: int
    hidden_size: int
    num_heads: int
    num_layers: int  # ResBlocks per head
    model_type: str = field(default=MODEL_TYPE)

    def __post_init__(self) -> None:
        for name in ("vocab_size", "hidden_size", "num_heads"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        if self.num_layers < 0:
            raise ValueError(f"num_layers must be >= 0, got {self.num_layers}")

    @classmethod
    def from_dict(cls, config: dict[str, Any]) -> MedusaConfig:
        if config.get("model_type") != MODEL_TYPE:
            raise ValueError(f"model_type is {config.get('model_type')!r}, expected {MODEL_TYPE!r}")
        missing = [k for k in ("vocab_size", "hidden_size", "num_heads", "num_layers") if k not in config]
        if missing:
            raise ValueError(f"config lacks required field(s): {', '.join(missing)}")
        return cls(**{k: v for k, v in config.items() if k in cls.__dataclass_fields__})


class Medusa(nn.Module, TreeDrafter):
    """The Medusa heads as a tree drafter.

    The heads ignore the drafted tokens: the logits at depth d are head d's on the context,
    the same for every beam, so the state is empty and beam search (each beam's score plus
    one shared distribution, W best kept) returns exactly the W most likely paths of the
    product of the heads' independent (top-k warped) distributions: a path in the top W has
    its prefix in the top W of the shorter paths.
    """

    kind = "medusa"

    def __init__(self, config: MedusaConfig):
        super().__init__()
        self.config = config
        hidden = config.hidden_size
        self.heads = [
            [ResBlock(hidden) for _ in range(config.num_layers)] + [nn.Linear(hidden, config.vocab_size, bias=False)]
            for _ in range(config.num_heads)
        ]
        self.source: Path | None = None  # the folder it was loaded from

    @property
    def max_beam_length(self) -> int:
        """One drafted token per head, after the guaranteed one."""
        return self.config.num_heads + 1

    def file_weights(self) -> dict[str, mx.array]:
        """The parameters under the checkpoint's (upstream's) key names."""
        return {k.removeprefix(_PREFIX): v for k, v in tree_flatten(self.parameters())}

    def head_logits(self, hidden: mx.array, head: int) -> mx.array:
        """hidden (..., hidden_size) -> head `head`'s logits (..., vocab_size)."""
        for layer in self.heads[head]:
            hidden = layer(hidden)
        return hidden

    def for_target(self, model: Any, name: str) -> Medusa:
        """The heads read the LLM's hidden state and score its vocabulary: both sizes must match."""
        self.check_sizes(self.config.vocab_size, self.config.hidden_size, model, name)
        return self

    def draft_steps(self, context: mx.array, embedding: Any) -> tuple[tuple[()], StepFn]:
        """Stateless: depth d gives head d's logits (B, 1, V) on the context, for all beams."""

        def step(state: tuple[()], tokens: mx.array, depth: int) -> tuple[tuple[()], mx.array]:
            if depth >= self.config.num_heads:
                raise InputError(
                    f"this Medusa drafter has {self.config.num_heads} heads: beam length at most "
                    f"{self.max_beam_length}, asked to draft token {depth + 1}"
                )
            return state, self.head_logits(context, depth)

        return (), step


def save(medusa: Medusa, folder: Path) -> Path:
    """Write config.json and model.safetensors (upstream's keys)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / CONFIG_FILE).write_text(json.dumps(asdict(medusa.config), indent=2) + "\n")
    mx.save_safetensors(str(folder / WEIGHTS_FILE), medusa.file_weights(), metadata={"format": "mlx"})
    return folder


def load(folder: Path, dtype: mx.Dtype) -> Medusa:
    """A Medusa drafter folder (config.json + model.safetensors). Raises DrafterLoadError."""
    folder = Path(folder)
    config_file = folder / CONFIG_FILE
    try:
        config = MedusaConfig.from_dict(json.loads(config_file.read_text()))
    except OSError as e:
        raise DrafterLoadError(f"{config_file}: unreadable ({e.strerror})") from None
    except (TypeError, ValueError) as e:  # JSONDecodeError included
        raise DrafterLoadError(f"{config_file}: {e}") from None
    medusa = build_medusa(config, read_weights(folder), folder / WEIGHTS_FILE, dtype)
    medusa.source = folder
    return medusa


def build_medusa(config: MedusaConfig, weights: dict[str, mx.array], source: Path, dtype: mx.Dtype) -> Medusa:
    """A Medusa holding `weights` (upstream's keys, floats cast to `dtype`) after checking
    every key and shape."""
    medusa = Medusa(config)
    check_weights(medusa.file_weights(), weights, source)
    medusa.load_weights([(_PREFIX + k, cast_floats(v, dtype)) for k, v in weights.items()])
    return medusa


def is_upstream(folder: Path) -> bool:
    """Whether `folder` is an upstream Medusa checkpoint (holds `medusa_lm_head.*`) or such a file."""
    folder = Path(folder)
    if folder.is_file():
        return folder.name in UPSTREAM_FILES
    return any((folder / name).is_file() for name in UPSTREAM_FILES)


def upstream_config(weights: dict[str, mx.array], source: Path) -> MedusaConfig:
    """Head count, layers per head and sizes read off the keys: the uploaded config.json's
    `medusa_num_heads` cannot be trusted (it need not match the weights), so it is not read."""
    projections = {(int(m[1]), int(m[2])): weights[k] for k in weights if (m := _PROJECTION.fullmatch(k))}
    if not projections:
        raise DrafterLoadError(f"{source}: no Medusa heads (no vocabulary projection key like '0.1.weight')")
    layers = sorted({i for _, i in projections})
    if len(layers) != 1:
        counts = ", ".join(f"head {h}: {i}" for h, i in sorted(projections))
        raise DrafterLoadError(f"{source}: heads have differing layer counts ({counts})")
    shape = next(iter(projections.values())).shape
    if len(shape) != 2:
        raise DrafterLoadError(f"{source}: vocabulary projections must be 2-D (vocab, hidden), got {tuple(shape)}")
    try:
        return MedusaConfig(shape[0], shape[1], 1 + max(h for h, _ in projections), layers[0])
    except ValueError as e:
        raise DrafterLoadError(f"{source}: {e}") from None


def convert(
    src: Path, out: Path, *, dtype: mx.Dtype, llm_config: dict[str, Any] | None = None, force: bool = False
) -> Path:
    """Convert an upstream Medusa checkpoint (a folder holding `medusa_lm_head.safetensors`
    or `.pt`, or that file) into an MLX drafter folder at OUT, checked key by key (and
    against the target LLM's config when given). Nothing is written unless it all checks out.
    Raises InputError (DrafterLoadError, TargetExists...) or FileExistsError with one-line messages."""
    src, out = Path(src).expanduser(), Path(out).expanduser().absolute()
    if src.is_dir():
        weights_file = next((src / n for n in UPSTREAM_FILES if (src / n).is_file()), None)
        if weights_file is None:
            raise DrafterLoadError(f"{src}: no Medusa weights (expected {' or '.join(UPSTREAM_FILES)})")
    elif src.is_file():
        weights_file = src
    else:
        raise DrafterLoadError(f"{src}: no such file or folder")
    if weights_file.parent.resolve().is_relative_to(out.resolve()):
        raise InputError(f"{out} holds the source checkpoint; write to another folder")
    check_target(out, force)
    weights = read_checkpoint(weights_file)
    config = upstream_config(weights, weights_file)
    if llm_config is not None:
        check_llm_config(config, llm_config)
    medusa = build_medusa(config, weights, weights_file, dtype)
    return save_staged(partial(save, medusa), out)
