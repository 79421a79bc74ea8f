"""IBM's MLP speculator (arXiv 2404.19124; fms-extras `fms_extras/models/speculator.py`).

Stage i (0 <= i < n_predict) reads the previous state and the token drafted before it;
stage 0 reads the LLM's final-norm hidden state h that predicted the guaranteed token g,
and g itself (fms-extras feeds `argmax(logits)` at h):

    s = h, or rms_norm(h) / sqrt(2) with scale_input (a norm with no weight or bias)
    s = gelu(ln_i(proj_i(s) + emb_i(token) * emb_weight / state_weight));  logits = head_i(s)

with state_weight = 0.5 ** (0.5 / n_predict), emb_weight = sqrt((1 - state_weight**2) *
inner_dim / 2). ln_i is fms `LayerNormParameterized(elementwise_scale, elementwise_shift)`:
an RMS norm (no mean subtraction, eps 1e-6 inside the rsqrt) times weight plus bias; gelu is
the exact (erf) one. The state depends on the drafted tokens, so the generic beam search
reorders it by parent: candidates are the W best beams of our search, not upstream's fixed
per-head top-k tree.

Keys, ours and upstream's (fms-extras names; Hugging Face checkpoints prefix them with
`speculator.`): `emb.{i}.weight` (V, inner), `proj.{i}.weight` (inner, emb_dim for i = 0
else inner), `head.{i}.weight` (V, inner), `ln.{i}.weight`, `ln.{i}.bias` (inner).
tie_weights shares one emb, head and ln across stages and one proj across stages 1.. (proj 0
differs in width): we store only emb.0, proj.0, proj.1, head.0, ln.0.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path
from typing import Any

import mlx.core as mx
import mlx.nn as nn
from mlx.utils import tree_flatten

from ...errors import DrafterLoadError, InputError
from ...formats.checkpoint import (
    CONFIG_FILE,
    TORCH_SUFFIXES,
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

MODEL_TYPE = "mlp_speculator_drafter"
UPSTREAM_TYPE = "mlp_speculator"  # the Hugging Face config of IBM's checkpoints
UPSTREAM_PREFIX = "speculator."  # Hugging Face wraps the fms module as `speculator`
EPS = 1e-6  # LayerNormParameterized's default, used by every upstream norm


@dataclass(frozen=True)
class MLPSpeculatorConfig:
    """config.json: upstream's fields (inner_dim 0 means emb_dim, as upstream)."""

    emb_dim: int
    inner_dim: int
    n_predict: int
    vocab_size: int
    tie_weights: bool = False
    scale_input: bool = False
    model_type: str = MODEL_TYPE

    def __post_init__(self) -> None:
        if self.inner_dim == 0:
            object.__setattr__(self, "inner_dim", self.emb_dim)
        for name in ("emb_dim", "inner_dim", "n_predict", "vocab_size"):
            value = getattr(self, name)
            if type(value) is not int or value <= 0:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if self.tie_weights and self.n_predict < 2:
            raise ValueError("tie_weights needs n_predict >= 2 (there is nothing to tie)")

    @property
    def hidden_size(self) -> int:
        """The LLM hidden size it reads (upstream's config maps hidden_size to emb_dim too)."""
        return self.emb_dim

    @classmethod
    def from_dict(cls, config: dict[str, Any], model_types: tuple[str | None, ...]) -> MLPSpeculatorConfig:
        """Our fields of a config.json whose model_type is one of `model_types`; upstream's
        tree settings (top_k_tokens_per_head, n_candidates) are ignored: ours are W and L."""
        model_type = config.get("model_type")
        if model_type not in model_types:
            expected = " or ".join(repr(t) for t in model_types if t is not None)
            raise ValueError(f"model_type is {model_type!r}, expected {expected}")
        missing = [k for k in ("emb_dim", "n_predict", "vocab_size") if k not in config]
        if missing:
            raise ValueError(f"config lacks required field(s): {', '.join(missing)}")
        fields = {k: v for k, v in config.items() if k in cls.__dataclass_fields__ and k != "model_type"}
        return cls(**{"inner_dim": 0} | fields)


class _ShiftedRMSNorm(nn.Module):
    """fms LayerNormParameterized(elementwise_scale=True, elementwise_shift=True)."""

    def __init__(self, dims: int):
        super().__init__()
        self.weight = mx.ones((dims,))
        self.bias = mx.zeros((dims,))

    def __call__(self, x: mx.array) -> mx.array:
        return mx.fast.rms_norm(x, self.weight, EPS) + self.bias


def _stage(layers: list[nn.Module], i: int) -> nn.Module:
    """Stage i's layer: tied lists hold fewer layers, the last of which serves the rest."""
    return layers[min(i, len(layers) - 1)]


class MLPSpeculator(nn.Module, TreeDrafter):
    """The speculator; it drafts at most n_predict tokens after the guaranteed one."""

    kind = "mlp-speculator"

    def __init__(self, config: MLPSpeculatorConfig):
        super().__init__()
        self.config = config
        n, inner, vocab = config.n_predict, config.inner_dim, config.vocab_size
        stages = 1 if config.tie_weights else n
        self.emb = [nn.Embedding(vocab, inner) for _ in range(stages)]
        self.proj = [
            nn.Linear(config.emb_dim if i == 0 else inner, inner, bias=False)
            for i in range(2 if config.tie_weights else n)
        ]
        self.head = [nn.Linear(inner, vocab, bias=False) for _ in range(stages)]
        self.ln = [_ShiftedRMSNorm(inner) for _ in range(stages)]
        state_weight = 0.5 ** (0.5 / n)
        self.emb_scale = math.sqrt((1 - state_weight**2) * inner / 2) / state_weight
        self.max_beam_length = n + 1
        self.source: Path | None = None  # the folder it was loaded from (keys its calibration)

    def for_target(self, model: Any, name: str) -> MLPSpeculator:
        """It reads the LLM's hidden states and drafts its token ids: sizes must agree."""
        self.check_sizes(self.config.vocab_size, self.config.emb_dim, model, name)
        return self

    def draft_steps(self, context: mx.array, embedding: Any) -> tuple[mx.array, StepFn]:
        """The state is the last stage's output (B, W or 1, inner); it starts as the context.
        `embedding` is unused: every stage has its own token embedding."""
        state = mx.fast.rms_norm(context, None, EPS) / math.sqrt(2) if self.config.scale_input else context

        def step(state: mx.array, tokens: mx.array, depth: int) -> tuple[mx.array, mx.array]:
            if depth >= self.config.n_predict:
                raise InputError(
                    f"this MLP speculator drafts at most {self.config.n_predict} tokens: "
                    f"use a beam length of at most {self.max_beam_length}"
                )
            state = _stage(self.proj, depth)(state) + _stage(self.emb, depth)(tokens) * self.emb_scale
            state = nn.gelu(_stage(self.ln, depth)(state))
            return state, _stage(self.head, depth)(state)

        return state, step


def save(speculator: MLPSpeculator, out_dir: str | Path) -> Path:
    """Write config.json and model.safetensors (keys in the module docstring)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / CONFIG_FILE).write_text(json.dumps(asdict(speculator.config), indent=2) + "\n")
    weights = dict(tree_flatten(speculator.parameters()))
    mx.save_safetensors(str(out / WEIGHTS_FILE), weights, metadata={"format": "mlx"})
    return out


def load(folder: Path, dtype: mx.Dtype = mx.float32) -> MLPSpeculator:
    """An MLP speculator folder (config.json + model.safetensors); raises DrafterLoadError."""
    folder = Path(folder)
    config = _read_config(folder, (MODEL_TYPE,))
    speculator = build_mlp_speculator(config, read_weights(folder), folder / WEIGHTS_FILE, dtype)
    speculator.source = folder
    return speculator


def build_mlp_speculator(
    config: MLPSpeculatorConfig, weights: dict[str, mx.array], source: Path, dtype: mx.Dtype
) -> MLPSpeculator:
    """A speculator holding `weights` (floats cast to `dtype`) after checking every key and shape."""
    speculator = MLPSpeculator(config)
    check_weights(dict(tree_flatten(speculator.parameters())), weights, source)
    speculator.load_weights([(k, cast_floats(v, dtype)) for k, v in weights.items()])
    mx.eval(speculator.parameters())
    return speculator


def convert(
    src: Path, out: Path, *, dtype: mx.Dtype, llm_config: dict[str, Any] | None = None, force: bool = False
) -> Path:
    """An upstream checkpoint (config.json + .safetensors/.bin/.pt weights, fms-extras or
    Hugging Face key names) validated (against the target LLM's config when given), cast to
    `dtype` and written as an MLX drafter folder at OUT; nothing is written on error.
    Raises InputError (DrafterLoadError, TargetExists...) or FileExistsError with one-line messages."""
    src, out = Path(src).expanduser(), Path(out).expanduser().absolute()
    folder, files = _checkpoint_files(src)
    if folder.resolve().is_relative_to(out.resolve()):
        raise InputError(f"{out} holds the source checkpoint; write to another folder")
    check_target(out, force)
    config = _read_config(folder, (UPSTREAM_TYPE, MODEL_TYPE, None))
    if llm_config is not None:
        check_llm_config(config, llm_config)
    weights = _stored_weights(_read_files(files), config, files[0])
    speculator = build_mlp_speculator(config, weights, files[0], dtype)
    return save_staged(partial(save, speculator), out)


def is_upstream(folder: Path) -> bool:
    """Whether `folder`'s config.json describes an MLP speculator (upstream or ours)."""
    try:
        config = json.loads((Path(folder) / CONFIG_FILE).read_text())
    except (OSError, ValueError):
        return False
    if not isinstance(config, dict):
        return False
    kind = config.get("model_type")
    return kind in (UPSTREAM_TYPE, MODEL_TYPE) or (kind is None and {"emb_dim", "n_predict"} <= config.keys())


def _read_config(folder: Path, model_types: tuple[str | None, ...]) -> MLPSpeculatorConfig:
    config_file = folder / CONFIG_FILE
    if not folder.is_dir():
        raise DrafterLoadError(f"{folder}: not an MLP speculator folder (expected {CONFIG_FILE} and weights)")
    if not config_file.is_file():
        raise DrafterLoadError(f"{folder}: no {CONFIG_FILE}")
    try:
        raw = json.loads(config_file.read_text())
        if not isinstance(raw, dict):
            raise ValueError("expected a JSON object")
        return MLPSpeculatorConfig.from_dict(raw, model_types)
    except json.JSONDecodeError as e:
        raise DrafterLoadError(f"{config_file}: invalid JSON ({e})") from None
    except (TypeError, ValueError) as e:
        raise DrafterLoadError(f"{config_file}: {e}") from None


def _checkpoint_files(src: Path) -> tuple[Path, list[Path]]:
    """(folder, weight files): a given file, else the folder's safetensors (shards included),
    else its PyTorch files (Hugging Face folders often hold both formats of the same weights)."""
    if src.is_file():
        return src.parent, [src]
    if not src.is_dir():
        raise DrafterLoadError(f"{src}: no such file or folder")
    files = sorted(p for p in src.iterdir() if p.is_file() and p.suffix == ".safetensors")
    files = files or sorted(p for p in src.iterdir() if p.is_file() and p.suffix in TORCH_SUFFIXES)
    if not files:
        raise DrafterLoadError(f"{src}: no speculator weights (.safetensors, .bin, .pt or .pth)")
    return src, files


def _read_files(files: list[Path]) -> dict[str, mx.array]:
    """All tensors of all files; shards must not repeat a key."""
    weights: dict[str, mx.array] = {}
    for path in files:
        part = read_checkpoint(path)
        repeated = sorted(part.keys() & weights.keys())
        if repeated:
            raise DrafterLoadError(f"{path}: key {repeated[0]!r} is also in another weights file")
        weights |= part
    return weights


def _stored_weights(weights: dict[str, mx.array], config: MLPSpeculatorConfig, source: Path) -> dict[str, mx.array]:
    """Upstream keys as we store them: the `speculator.` prefix dropped and, when tied, each
    group of shared tensors (torch.save keeps every name, safetensors only one) as one key."""
    renamed: dict[str, mx.array] = {}
    for key, value in weights.items():
        name = key.removeprefix(UPSTREAM_PREFIX)
        if name in renamed:
            raise DrafterLoadError(f"{source}: keys {name!r} and {UPSTREAM_PREFIX + name!r} name one weight")
        renamed[name] = value
    if not config.tie_weights:
        return renamed
    n = config.n_predict
    groups = {
        f"{part}.0.{leaf}": [f"{part}.{i}.{leaf}" for i in range(n)]
        for part, leaf in (("emb", "weight"), ("head", "weight"), ("ln", "weight"), ("ln", "bias"))
    }
    groups["proj.1.weight"] = [f"proj.{i}.weight" for i in range(1, n)]
    for kept, members in groups.items():
        present = [k for k in members if k in renamed]
        values = [renamed.pop(k) for k in present]
        if any(v.shape != values[0].shape or not mx.array_equal(v, values[0]) for v in values[1:]):
            raise DrafterLoadError(f"{source}: tie_weights is set but {', '.join(present)} are not one tensor")
        if values:
            renamed[kept] = values[0]
    return renamed
