"""EAGLE-3 (arXiv 2503.01840): one decoder layer over three of the target's layers' features,
with its own head over a reduced vocabulary.

Upstream layout (SafeAILab/EAGLE `eagle/model/cnets.py`, e.g. yuhuili/EAGLE3-LLaMA3.1-Instruct-8B;
every linear layer without bias): `fc.weight` (H, 3H) maps the concatenated target features to
the drafter's width; one decoder layer `midlayer.*` whose attention reads
[input_layernorm(token embedding); hidden_norm(h)] (2H wide: `q/k/v_proj` are (., 2H)), whose
residual is h, then the usual MLP with `post_attention_layernorm`; a final `norm`; `lm_head`
(v, H) over the draft vocabulary; `d2t` (v,) int, a draft id's target id being
`draft + d2t[draft]`, and `t2d` (V,) bool, which target ids the draft vocabulary holds. The
token embedding is the target's (not in the checkpoint). The target features are the inputs
of its decoder layers 2, L // 2 and L - 3 (L layers), concatenated in that order; the drafter's
own next input is its pre-norm output, which is H wide, so `fc` applies only to 3H inputs. As
in EAGLE-1, the input at position t pairs token t + 1 with feature t. Heads are
hidden_size / num_attention_heads wide; RoPE uses `rope_theta` (10,000 when absent).
"""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any

import mlx.core as mx
import mlx.nn as nn
from mlx_lm.models.llama import ModelArgs

from ...errors import DrafterLoadError
from ...formats.checkpoint import (
    checkpoint_keys,
    save_staged,
)
from ...models.llama import Attention
from ..seam import TreeDrafter
from .eagle import EagleMLP, EagleSession, build_eagle, read_upstream, save, upstream_weights
from .eagle import load as load_eagle

MODEL_TYPE = "eagle3_drafter"


def target_layers(num_layers: int) -> tuple[int, int, int]:
    """The target layers whose inputs EAGLE-3 reads: low, middle and high."""
    return (2, num_layers // 2, num_layers - 3)


class WideAttention(Attention):
    """Llama attention whose queries, keys and values read a 2H-wide input."""

    def __init__(self, args: ModelArgs):
        super().__init__(args)
        wide = 2 * args.hidden_size
        self.q_proj = nn.Linear(wide, self.n_heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(wide, self.n_kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(wide, self.n_kv_heads * self.head_dim, bias=False)


class MidLayer(nn.Module):
    """Upstream's `midlayer`: attention over [normed embedding; normed hidden], residual h."""

    def __init__(self, args: ModelArgs):
        super().__init__()
        self.self_attn = WideAttention(args)
        self.mlp = EagleMLP(args)
        self.hidden_norm = nn.RMSNorm(args.hidden_size, eps=args.rms_norm_eps)
        self.input_layernorm = nn.RMSNorm(args.hidden_size, eps=args.rms_norm_eps)
        self.post_attention_layernorm = nn.RMSNorm(args.hidden_size, eps=args.rms_norm_eps)

    def __call__(self, embedded: mx.array, h: mx.array, positions: Any, mask: Any, cache: Any) -> mx.array:
        both = mx.concatenate([self.input_layernorm(embedded), self.hidden_norm(h)], axis=-1)
        h = h + self.self_attn(both, positions, mask, cache, 0)
        return h + self.mlp(self.post_attention_layernorm(h))


class Eagle3(nn.Module, TreeDrafter):
    """The EAGLE-3 draft network; as a drafter it runs through `EagleSession` (`open`)."""

    kind = "eagle3"
    label = "EAGLE-3"  # in messages
    stateful = True
    stage_prompt = True

    def __init__(self, config: dict[str, Any]):
        super().__init__()
        scaling = config.get("rope_scaling")
        if scaling and scaling.get("type", scaling.get("rope_type")) != "linear":
            raise ValueError(f"rope_scaling {scaling} (upstream runs none or linear)")
        self.config = config
        self.args = ModelArgs.from_dict(config | {"head_dim": None, "num_hidden_layers": 1})
        hidden, draft_vocab = self.args.hidden_size, config.get("draft_vocab_size", self.args.vocab_size)
        self.fc = nn.Linear(3 * config.get("target_hidden_size", hidden), hidden, bias=False)
        self.midlayer = MidLayer(self.args)
        self.norm = nn.RMSNorm(hidden, eps=self.args.rms_norm_eps)
        self.lm_head = nn.Linear(hidden, draft_vocab, bias=False)
        if draft_vocab != self.args.vocab_size:
            self.d2t = mx.zeros((draft_vocab,), mx.int64)
            self.t2d = mx.zeros((self.args.vocab_size,), mx.bool_)
        self._taps: tuple[int, ...] = ()  # set by `for_target`
        self.source: Path | None = None
        self._embedding: Any = None  # the target's token embedding (`for_target`)

    def __call__(self, tokens: mx.array, features: mx.array, cache: Any, positions: Any, mask: Any) -> mx.array:
        """tokens (1, T); features (1, T, 3H) from the target or (1, T, H) from this drafter
        (the pre-norm output it returned) -> its pre-norm outputs (1, T, H)."""
        h = self.fc(features) if features.shape[-1] != self.args.hidden_size else features
        return self.midlayer(self._embedding(tokens).astype(h.dtype), h, positions, mask, cache)

    @property
    def target_layers(self) -> tuple[int, ...]:
        return self._taps

    @property
    def layers(self) -> list[MidLayer]:
        """Its one cached layer (`EagleSession` sizes the KV cache by it)."""
        return [self.midlayer]

    def draft_logits(self, feature: mx.array, target: Any) -> mx.array:
        """Logits over the draft vocabulary for pre-norm outputs (..., H)."""
        return self.lm_head(self.norm(feature))

    def vocab_ids(self, head_ids: mx.array) -> mx.array:
        """Draft-vocabulary ids (...) -> target token ids (...) int32 (`d2t`)."""
        if "d2t" not in self:
            return head_ids.astype(mx.int32)
        return (head_ids + self.d2t[head_ids]).astype(mx.int32)

    def check_target_sizes(self, vocab_size: Any, hidden_size: Any, num_layers: Any, name: str) -> None:
        """Raise `DrafterLoadError` unless the LLM `name` has this drafter's vocabulary, the
        width its `fc` reads a third of, and the layers it reads features from."""
        width = self.fc.weight.shape[1] // 3
        if (self.args.vocab_size, width) != (vocab_size, hidden_size):
            raise DrafterLoadError(
                f"eagle3 drafter {self.source} was built for vocab {self.args.vocab_size} / hidden {width}, "
                f"but {name} has vocab {vocab_size} / hidden {hidden_size}"
            )
        if not isinstance(num_layers, int) or num_layers < 4:
            raise DrafterLoadError(f"{name} has {num_layers} layers; EAGLE-3 reads layers 2, L/2 and L-3")

    def for_target(self, model: Any, name: str) -> Eagle3:
        args = model.args
        self.check_target_sizes(args.vocab_size, args.hidden_size, args.num_hidden_layers, name)
        self._taps = target_layers(args.num_hidden_layers)
        self._embedding = model.embedding
        return self

    def open(self, model: Any, tokens: list[int], hidden: mx.array) -> EagleSession:
        return EagleSession(self, model, tokens, hidden)


def load(folder: Path, dtype: mx.Dtype) -> Eagle3:
    """An MLX EAGLE-3 folder: config.json + model.safetensors (upstream keys)."""
    return load_eagle(folder, dtype, Eagle3)


def is_upstream(folder: Path) -> bool:
    """An upstream EAGLE-3 folder: a config beside weights with a `midlayer`."""
    weights = upstream_weights(folder)
    return weights is not None and any(key.startswith("midlayer.") for key in checkpoint_keys(weights))


def convert(
    src: Path, out: Path, *, dtype: mx.Dtype, llm_config: dict[str, Any] | None = None, force: bool = False
) -> Path:
    """An upstream EAGLE-3 folder (config.json + pytorch_model.bin or model.safetensors) as an
    MLX folder at OUT, every key and shape checked, sizes checked against the LLM's config."""
    src, out = Path(src).expanduser(), Path(out).expanduser().absolute()
    config, weights, weights_file = read_upstream(src, out, force, "EAGLE-3")
    weights.pop("embed_tokens.weight", None)  # the target's own, when a checkpoint carries a copy
    eagle = build_eagle(config | {"model_type": MODEL_TYPE}, weights, weights_file, dtype, Eagle3)
    if llm_config is not None:
        eagle.source = src
        sizes = (llm_config.get(k) for k in ("vocab_size", "hidden_size", "num_hidden_layers"))
        eagle.check_target_sizes(*sizes, "the model")
    return save_staged(partial(save, eagle), out)
