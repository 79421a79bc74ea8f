"""EAGLE (arXiv 2401.15077; EAGLE-2: 2406.16858): one decoder layer that drafts the LLM's features.

Upstream layout (SafeAILab/EAGLE `eagle/model/cnets1.py`, e.g. yuhuili/EAGLE-Vicuna-7B-v1.3):
a Llama config with one layer; keys `embed_tokens.weight` (a copy of the target's),
`fc.{weight,bias}` mapping concat(token embedding, feature) -> hidden, and
`layers.{i}.self_attn.{q,k,v,o}_proj.weight`, `layers.{i}.mlp.{gate,up,down}_proj.weight`,
`layers.{i}.post_attention_layernorm.weight`, plus `input_layernorm` for every layer but
the first; no final norm. The feature is the target's final-norm hidden state, and the
input at position t pairs token t + 1 with feature t; EAGLE's output at t is its guess of
feature t + 1, which the TARGET's lm_head turns into logits, and which is paired with the
drafted token for the next depth. Here the beams grow by beam search over those logits (the
EAGLE-2 tree ranks nodes by the same cumulative probability); the MLX folder keeps the
upstream keys with `model_type: eagle_drafter` in its config.

The token embedding is a frozen copy of the LLM's (upstream sets `requires_grad = False` in
the constructor; here `embed_tokens` is frozen the same way, so training moves `fc` and the
layers only). Config key `stage_prompt` (default true, upstream's behaviour): a session
first feeds EAGLE the pairs of the prompt (every prompt token after the first with the
feature before it). Drafters trained here (`training.eagle`) saw only the answers' pairs,
their sequences starting at the first answer token, and are saved with `stage_prompt:
false`: their session starts as their training sequences did, at that first pair. Either
way decoding is exact; the flag only changes the drafts.
"""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path
from typing import Any

import mlx.core as mx
import mlx.nn as nn
from mlx.utils import tree_flatten
from mlx_lm.models.llama import ModelArgs

from ...errors import DrafterLoadError
from ...formats.checkpoint import (
    CONFIG_FILE,
    WEIGHTS_FILE,
    cast_floats,
    check_target,
    check_weights,
    checkpoint_keys,
    read_checkpoint,
    read_weights,
    save_staged,
)
from ...formats.target_llm import check_llm_config
from ...models.cache import KVCache
from ...models.llama import MLP, Attention
from ...models.llm import LLM
from ...runtime import fastmath
from ..seam import StepFn, TreeDrafter
from ..tree_cache import DraftCache

MODEL_TYPE = "eagle_drafter"


class EagleMLP(MLP):
    """The Llama MLP with a differentiable SwiGLU (`fastmath.trainable_swiglu`): EAGLE trains."""

    def __call__(self, x: mx.array) -> mx.array:
        return self.down_proj(fastmath.trainable_swiglu(self.gate_proj(x), self.up_proj(x)))


class EagleLayer(nn.Module):
    """A Llama decoder layer; the first one has no input norm (its input is `fc`'s output)."""

    def __init__(self, args: ModelArgs, first: bool):
        super().__init__()
        self.self_attn = Attention(args)
        self.mlp = EagleMLP(args)
        if not first:
            self.input_layernorm = nn.RMSNorm(args.hidden_size, eps=args.rms_norm_eps)
        self.post_attention_layernorm = nn.RMSNorm(args.hidden_size, eps=args.rms_norm_eps)

    def __call__(self, x, positions, mask, cache, layer) -> mx.array:
        normed = self.input_layernorm(x) if "input_layernorm" in self else x
        h = x + self.self_attn(normed, positions, mask, cache, layer)
        return h + self.mlp(self.post_attention_layernorm(h))


class Eagle(nn.Module, TreeDrafter):
    """The EAGLE draft network; `open` gives the per-generation session with its KV cache."""

    kind = "eagle"
    label = "EAGLE"  # in messages
    stateful = True

    def __init__(self, config: dict[str, Any]):
        super().__init__()
        self.config = config
        self.args = ModelArgs.from_dict(config)
        hidden = self.args.hidden_size
        self.embed_tokens = nn.Embedding(self.args.vocab_size, hidden)
        self.fc = nn.Linear(2 * hidden, hidden, bias=config.get("bias", True))
        self.layers = [EagleLayer(self.args, i == 0) for i in range(self.args.num_hidden_layers)]
        self.embed_tokens.freeze()  # the LLM's embedding, never trained (upstream's requires_grad=False)
        self.stage_prompt = bool(config.get("stage_prompt", True))
        self.source: Path | None = None

    def __call__(
        self, tokens: mx.array, features: mx.array, cache: Any, positions: mx.array, mask: mx.array | str
    ) -> mx.array:
        """tokens (1, T), features (1, T, D): the target feature preceding each token -> (1, T, D)."""
        h = self.fc(mx.concatenate([self.embed_tokens(tokens).astype(features.dtype), features], axis=-1))
        for i, layer in enumerate(self.layers):
            h = layer(h, positions, mask, cache, i)
        return h

    def for_target(self, model: Any, name: str) -> Eagle:
        self.check_sizes(self.args.vocab_size, self.args.hidden_size, model, name)
        return self

    def draft_logits(self, feature: mx.array, target: Any) -> mx.array:
        """EAGLE's feature guesses are read by the target's own head."""
        return target.logits(feature)

    def open(self, model: Any, tokens: list[int], hidden: mx.array) -> EagleSession:
        return EagleSession(self, model, tokens, hidden)


class EagleSession(TreeDrafter):
    """EAGLE's (or EAGLE-3's) cache for one generation, filled with the pairs the prompt's
    features allow (none when the EAGLE's config says `stage_prompt: false`: its first pair
    is then the first answer token with the prompt's last feature, staged by the decoder)."""

    stateful = True

    def __init__(self, eagle: Any, target: LLM, tokens: list[int], hidden: mx.array):
        self.eagle, self.target = eagle, target
        self.kind, self.target_layers = eagle.kind, eagle.target_layers
        self.cache = DraftCache(KVCache(len(eagle.layers)))
        # feature i predicts the token after it; the last one waits for stage
        pairs = hidden.shape[0] - 1 if eagle.stage_prompt else 0
        if pairs > 0:
            follow = mx.array(tokens[len(tokens) - pairs :], mx.int32)[None]
            positions = mx.arange(pairs, dtype=mx.int32)[None]
            eagle(follow, hidden[None, :pairs], self.cache.cache, positions, "causal")
            self.cache.commit(pairs)
        self.last = mx.zeros((0,))

    def stage(self, tokens: mx.array, features: mx.array, count: mx.array) -> None:
        positions, mask = self.cache.stage_inputs(tokens.shape[0], count)
        out = self.eagle(tokens[None].astype(mx.int32), features[None], self.cache.cache, positions, mask)[0]
        self.last = out[self.cache.count - 1]

    def commit(self, count: int) -> None:
        self.cache.commit(count)

    def draft_steps(self, context: mx.array, embedding: Any) -> tuple[Any, StepFn]:
        """The state is each beam's (lineage of scratch slots, EAGLE's feature guess at its end)."""
        if context.shape[0] != 1:
            raise ValueError("EAGLE drafts for one sequence at a time")
        scratch = self.cache.tree()

        def step(state: tuple[mx.array, mx.array], tokens: mx.array, depth: int):
            lineage, feature = state
            if depth > 0:
                positions, mask, lineage = scratch.step_inputs(lineage, depth)
                feature = self.eagle(tokens.astype(mx.int32), feature, scratch, positions, mask)
            return (lineage, feature), self.eagle.draft_logits(feature, self.target)

        return (mx.zeros((1, 1, 0), mx.int32), self.last[None, None]), step

    def vocab_ids(self, head_ids: mx.array) -> mx.array:
        return self.eagle.vocab_ids(head_ids)


def load(folder: Path, dtype: mx.Dtype, network: type = Eagle) -> Any:
    """An MLX EAGLE folder (`network`: Eagle, or EAGLE-3's): config.json + model.safetensors
    (upstream keys)."""
    config = read_json(folder / CONFIG_FILE)
    weights_file = folder / WEIGHTS_FILE
    if not weights_file.is_file():
        raise DrafterLoadError(
            f"{folder}: no {WEIGHTS_FILE} (convert upstream {network.label} weights with `redrafter convert`)"
        )
    eagle = build_eagle(config, read_weights(folder), weights_file, dtype, network)
    eagle.source = folder
    return eagle


def build_eagle(
    config: dict[str, Any], weights: dict[str, mx.array], source: Path, dtype: mx.Dtype, network: type = Eagle
) -> Any:
    """A `network` (Eagle, or EAGLE-3's) of `config` holding `weights` after checking every
    key and shape."""
    try:
        eagle = network(config)
    except (TypeError, KeyError, ValueError, AttributeError) as e:
        raise DrafterLoadError(f"{source}: not an {network.label} config ({e})") from None
    check_weights(dict(tree_flatten(eagle.parameters())), weights, source)
    eagle.load_weights([(k, cast_floats(v, dtype)) for k, v in weights.items()])
    return eagle


def read_json(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text())
    except OSError:
        raise DrafterLoadError(f"{path.parent}: no readable {path.name}") from None
    except json.JSONDecodeError as e:
        raise DrafterLoadError(f"{path}: invalid JSON ({e})") from None


def save(eagle: Eagle, folder: Path) -> Path:
    """Write config.json and model.safetensors (upstream keys)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / CONFIG_FILE).write_text(json.dumps(eagle.config, indent=2) + "\n")
    mx.save_safetensors(str(folder / WEIGHTS_FILE), dict(tree_flatten(eagle.parameters())), metadata={"format": "mlx"})
    return folder


UPSTREAM_WEIGHTS = ("pytorch_model.bin", "model.safetensors")


def upstream_weights(folder: Path) -> Path | None:
    """The weights file of an upstream EAGLE folder (any generation): one of UPSTREAM_WEIGHTS
    beside a config.json; None when there is none."""
    weights = next((folder / n for n in UPSTREAM_WEIGHTS if (folder / n).is_file()), None)
    return weights if weights is not None and (folder / CONFIG_FILE).is_file() else None


def read_upstream(src: Path, out: Path, force: bool, what: str) -> tuple[dict[str, Any], dict[str, mx.array], Path]:
    """An upstream EAGLE checkpoint (a folder, or its weights file): its config, its weights and
    the weights file, once OUT is known to be writable (`check_target`)."""
    folder = src.parent if src.is_file() else src
    weights_file = src if src.is_file() else next((src / n for n in UPSTREAM_WEIGHTS if (src / n).is_file()), None)
    if weights_file is None:
        raise DrafterLoadError(f"{src}: no {what} weights (expected {' or '.join(UPSTREAM_WEIGHTS)})")
    check_target(out, force)
    return read_json(folder / CONFIG_FILE), read_checkpoint(weights_file), weights_file


def is_upstream(folder: Path) -> bool:
    """An upstream EAGLE-1/2 folder: a one-layer Llama config beside weights with an `fc`
    layer and `layers.*` (EAGLE-3's one is `midlayer.*`)."""
    weights = upstream_weights(folder)
    keys = checkpoint_keys(weights) if weights is not None else set()
    return "fc.weight" in keys and any(key.startswith("layers.") for key in keys)


def convert(
    src: Path, out: Path, *, dtype: mx.Dtype, llm_config: dict[str, Any] | None = None, force: bool = False
) -> Path:
    """An upstream EAGLE folder (config.json + pytorch_model.bin or model.safetensors) as an MLX
    EAGLE folder at OUT, every key and shape checked, sizes checked against the LLM's config."""
    src, out = Path(src).expanduser(), Path(out).expanduser().absolute()
    config, weights, weights_file = read_upstream(src, out, force, "EAGLE")
    config |= {"model_type": MODEL_TYPE, "bias": "fc.bias" in weights}
    eagle = build_eagle(config, weights, weights_file, dtype)
    if llm_config is not None:
        check_llm_config(eagle.args, llm_config)
    return save_staged(partial(save, eagle), out)
