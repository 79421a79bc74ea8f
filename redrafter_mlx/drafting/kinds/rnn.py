"""The ReDrafter drafter (arXiv 2403.09919): an RNN over draft tokens feeding an MLP head.

Parameter names are those of Apple's reference PyTorch checkpoints
(ml-recurrent-drafter, `recurrent_drafting/modeling_drafter.py`), so converting one is a
re-save: `input_proj.{weight,bias}` (only when exit_dim != 2*hidden_size),
`lm_head.{i}.linear.{weight,bias}` (ResBlocks), `lm_head.{num_draft_layers}.weight` (the
vocabulary head), `rnn_u.{weight,bias}` (multiplies the previous state) and `rnn_w.weight`
(multiplies the token embedding). Weights are (out, in) in both frameworks.

Two extensions target small LLMs, whose drafter cost is dominated by the vocabulary head:
- `head_tied`: a learned `head_proj` (exit_dim -> hidden) followed by the LLM's own embedding
  table, so the head costs V x hidden instead of V x exit_dim and has no V-row weight.
- `token_subset_size` (vocabulary trimming): the head scores only K tokens; `token_ids`
  (K,) int32, stored next to the weights, maps head index -> full vocabulary id.

Trimming and quantizing a drafter are in `rnn_heads.py`; converting a PyTorch checkpoint in
`rnn_convert.py`.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import mlx.core as mx
import mlx.nn as nn
import numpy as np
from mlx.utils import tree_flatten

from ...errors import DrafterLoadError
from ...formats.checkpoint import CONFIG_FILE, WEIGHTS_FILE, cast_floats, check_weights, read_weights
from ..ngrams import NgramTable, load_ngram_table
from ..seam import StepFn, TreeDrafter
from .llm_embedding import Embedding, HeadTable, embed_tokens, table_rows

MODEL_TYPE = "recurrent_drafting_drafter"
# Present in some reference checkpoints but used by no reference forward pass.
IGNORED_KEYS = frozenset({"emb_norm.weight"})


@dataclass(frozen=True)
class DrafterConfig:
    """The drafter's config.json (reference fields plus our head extensions)."""

    vocab_size: int
    hidden_size: int  # the LLM's hidden size
    num_draft_layers: int
    exit_dim: int = -1  # <= 0 means 2 * hidden_size, the reference default
    rnn: bool = False
    head_tied: bool = False
    token_subset_size: int | None = None
    quantization: dict[str, int] | None = None  # {"group_size": g, "bits": b}
    model_type: str = field(default=MODEL_TYPE)

    def __post_init__(self) -> None:
        if self.exit_dim <= 0:
            object.__setattr__(self, "exit_dim", 2 * self.hidden_size)
        for name in ("vocab_size", "hidden_size"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        if self.num_draft_layers < 0:
            raise ValueError(f"num_draft_layers must be >= 0, got {self.num_draft_layers}")
        subset = self.token_subset_size
        if subset is not None and not 0 < subset <= self.vocab_size:
            raise ValueError(f"token_subset_size must be in [1, vocab_size], got {subset}")

    @property
    def head_size(self) -> int:
        """Number of tokens the head scores (V, or K when trimmed)."""
        return self.token_subset_size or self.vocab_size

    @property
    def has_input_proj(self) -> bool:
        return self.exit_dim != 2 * self.hidden_size

    @classmethod
    def from_dict(cls, config: dict[str, Any]) -> DrafterConfig:
        """Build from a config.json dict. Fields we do not model are ignored: Hugging Face
        bookkeeping and the reference's unused emb_norm, rms_norm_eps, num_lookback_tokens."""
        model_type = config.get("model_type", MODEL_TYPE)
        if model_type != MODEL_TYPE:
            raise DrafterLoadError(f"model_type is {model_type!r}, expected {MODEL_TYPE!r}")
        missing = [k for k in ("vocab_size", "hidden_size", "num_draft_layers") if k not in config]
        if missing:
            raise DrafterLoadError(f"config lacks required field(s): {', '.join(missing)}")
        return cls(**{k: v for k, v in config.items() if k in cls.__dataclass_fields__})

    def to_dict(self) -> dict[str, Any]:
        """config.json content; unset extensions are omitted so reference tools can read it."""
        return {k: v for k, v in asdict(self).items() if v is not None}


class ResBlock(nn.Module):
    """x + silu(W x + b). The reference ResBlock has no custom init (its Drafter never
    calls post_init), so it gets torch.nn.Linear's: uniform +-1/sqrt(in) for weight and
    bias, the same distribution as nn.Linear's default here. (Not Medusa's zero init.)"""

    def __init__(self, dims: int):
        super().__init__()
        self.linear = nn.Linear(dims, dims, bias=True)

    def __call__(self, x: mx.array) -> mx.array:
        return x + nn.silu(self.linear(x))


class RecurrentDrafter(nn.Module, TreeDrafter):
    """The recurrent drafter. It never owns the LLM embedding E; callers pass it in.

    Head input is concat(h, s) (reference order; the paper writes [s, h]); s_0 = 0 and
    s_t = silu(rnn_w(E(tok_t)) + rnn_u(s_{t-1})) when rnn, else s_t = E(tok_t) + s_{t-1}.
    """

    kind = "redrafter"

    def __init__(self, config: DrafterConfig, token_ids: mx.array | None = None):
        super().__init__()
        self.config = config
        exit_dim, hidden = config.exit_dim, config.hidden_size
        if config.has_input_proj:
            self.input_proj = nn.Linear(2 * hidden, exit_dim, bias=True)
        blocks: list[nn.Module] = [ResBlock(exit_dim) for _ in range(config.num_draft_layers)]
        if config.head_tied:
            self.lm_head = blocks
            self.head_proj = nn.Linear(exit_dim, hidden, bias=False)
        else:
            self.lm_head = blocks + [nn.Linear(exit_dim, config.head_size, bias=False)]
        if config.rnn:
            self.rnn_u = nn.Linear(hidden, hidden, bias=True)
            self.rnn_w = nn.Linear(hidden, hidden, bias=False)
        if config.token_subset_size is not None:
            self._set_token_ids(token_ids, config.token_subset_size)
        elif token_ids is not None:
            raise ValueError("token_ids given but config.token_subset_size is None")
        # The LLM's set phrases, drafted where the context lookup finds nothing (`ngrams.py`);
        # not a parameter: it travels with the drafter's folder.
        self.ngrams: NgramTable | None = None
        self.source: Path | None = None  # the folder it was loaded from (keys its calibration)

    def _set_token_ids(self, token_ids: mx.array | None, size: int) -> None:
        ids = mx.arange(size, dtype=mx.int32) if token_ids is None else token_ids.astype(mx.int32)
        if ids.shape != (size,):
            raise ValueError(f"token_ids must have shape ({size},), got {tuple(ids.shape)}")
        self.token_ids = ids
        # Stored with the weights so the checkpoint is self-contained, but it is a lookup
        # table, not something an optimizer may move.
        self.freeze(keys="token_ids", recurse=False)

    @property
    def is_trimmed(self) -> bool:
        return self.config.token_subset_size is not None

    def rebuilt(self, config: DrafterConfig, weights: list[tuple[str, mx.array]]) -> RecurrentDrafter:
        """A drafter of `config` holding `weights` that keeps what travels with this one
        besides its parameters: the token subset (where `config` keeps its size; else
        `weights` bring the new one) and the n-gram table."""
        ids = self.get("token_ids")
        out = RecurrentDrafter(config, ids if ids is not None and ids.size == config.token_subset_size else None)
        out.ngrams, out.source = self.ngrams, self.source
        out.load_weights(weights)
        return out

    def init_state(self, batch_shape: tuple[int, ...] = (), dtype: mx.Dtype = mx.float32) -> mx.array:
        """s_0 = 0: (*batch_shape, hidden)."""
        return mx.zeros((*batch_shape, self.config.hidden_size), dtype=dtype)

    def update_state(self, state: mx.array, token_embeddings: mx.array) -> mx.array:
        """state (..., hidden), token_embeddings E(tok) (..., hidden) -> new state (..., hidden)."""
        if self.config.rnn:
            return nn.silu(self.rnn_w(token_embeddings) + self.rnn_u(state))
        return token_embeddings + state

    def features(self, h: mx.array, state: mx.array) -> mx.array:
        """h (..., hidden) LLM last hidden state, state (..., hidden) -> (..., exit_dim)."""
        x = mx.concatenate([h, state], axis=-1)
        if self.config.has_input_proj:
            x = self.input_proj(x)
        for block in self.lm_head[: self.config.num_draft_layers]:
            x = block(x)
        return x

    def head_table(self, embedding: Embedding | None) -> HeadTable | None:
        """What a tied head scores against (the LLM embedding rows of the head's tokens);
        None for an untied head. Build it once per beam search, not once per step."""
        if not self.config.head_tied:
            return None
        if embedding is None:
            raise ValueError("this drafter's head is tied to the LLM embedding: pass embedding")
        return table_rows(embedding, self.get("token_ids"))

    def head_logits(self, features: mx.array, table: HeadTable | None = None) -> mx.array:
        """features (..., exit_dim), table from `head_table` -> logits (..., head_size)."""
        if not self.config.head_tied:
            return self.lm_head[self.config.num_draft_layers](features)
        if table is None:
            raise ValueError("tied head: pass table=drafter.head_table(embedding)")
        x = self.head_proj(features)
        return x @ table.T if isinstance(table, mx.array) else table.as_linear(x)

    def logits(self, h: mx.array, state: mx.array, embedding: Embedding | None = None) -> mx.array:
        """h, state (..., hidden) -> raw head logits (..., head_size). `embedding` is needed
        only by a tied head."""
        return self.head_logits(self.features(h, state), self.head_table(embedding))

    def for_target(self, model: Any, name: str) -> RecurrentDrafter:
        """Check the LLM's vocabulary and hidden size; fold a tied head for speed."""
        self.check_sizes(self.config.vocab_size, self.config.hidden_size, model, name)
        return untie_head(self, model.embedding)

    def draft_steps(self, context: mx.array, embedding: Embedding) -> tuple[mx.array, StepFn]:
        """The recurrent drafter as a `drafting.seam` step: the state is the RNN's s_t."""
        table = self.head_table(embedding)

        def step(state: mx.array, tokens: mx.array, depth: int) -> tuple[mx.array, mx.array]:
            state = self.update_state(state, embed_tokens(embedding, tokens))
            features = self.features(mx.broadcast_to(context, state.shape), state)
            return state, self.head_logits(features, table)

        return self.init_state(context.shape[:2], dtype=context.dtype), step

    def vocab_ids(self, head_ids: mx.array) -> mx.array:
        """Head indices (...) -> full-vocabulary token ids (...) int32 (identity unless trimmed)."""
        if self.is_trimmed:
            return self.token_ids[head_ids]
        return head_ids.astype(mx.int32)


def untie_head(drafter: RecurrentDrafter, embedding: Embedding) -> RecurrentDrafter:
    """The same drafter with its tied head folded into an untied one, when it can be.

    A tied head scores head_proj(x) @ table.T with table = E[token_ids] (K, hidden); the
    untied equivalent has one weight table @ head_proj.weight (K, exit_dim). That saves the
    per-beam-search gather of K embedding rows and one matmul per step, so drafters are
    trained and stored tied (few parameters, a small file) and folded when loaded next to
    their LLM. A quantized head or embedding is returned as it is: the tied head runs as is.
    """
    if not drafter.config.head_tied or drafter.config.quantization is not None:
        return drafter
    table = drafter.head_table(embedding)
    if not isinstance(table, mx.array):
        return drafter
    config = replace(drafter.config, head_tied=False)
    proj = drafter.head_proj.weight
    weights = {k: v for k, v in tree_flatten(drafter.parameters()) if not k.startswith("head_proj")}
    folded = table.astype(mx.float32) @ proj.astype(mx.float32)
    weights[f"lm_head.{config.num_draft_layers}.weight"] = folded.astype(proj.dtype)
    out = drafter.rebuilt(config, list(weights.items()))
    mx.eval(out.parameters())
    return out


def save(drafter: RecurrentDrafter, out_dir: str | Path) -> Path:
    """Write config.json and model.safetensors (reference key names) to out_dir, and the
    n-gram table when the drafter has one."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / CONFIG_FILE).write_text(json.dumps(drafter.config.to_dict(), indent=2) + "\n")
    weights = dict(tree_flatten(drafter.parameters()))
    mx.save_safetensors(str(out / WEIGHTS_FILE), weights, metadata={"format": "mlx"})
    if drafter.ngrams is not None:
        drafter.ngrams.save(out)
    return out


def load(path: str | Path, dtype: mx.Dtype = mx.float32) -> RecurrentDrafter:
    """Load a drafter folder (config.json + model.safetensors, ours or a re-saved reference
    checkpoint); floating-point arrays are cast to `dtype`. Raises DrafterLoadError."""
    folder = Path(path)
    config = read_config(folder)
    weights = {k: v for k, v in read_weights(folder).items() if k not in IGNORED_KEYS}
    drafter = build_drafter(config, weights, folder / WEIGHTS_FILE, dtype)
    drafter.source = folder
    drafter.ngrams = read_ngrams(folder, config)
    return drafter


def read_ngrams(folder: Path, config: DrafterConfig) -> NgramTable | None:
    """The n-gram table a drafter folder ships, if any. Raises DrafterLoadError."""
    try:
        table = load_ngram_table(folder)
    except ValueError as err:
        raise DrafterLoadError(str(err)) from None
    if table is not None and table.vocab_size != config.vocab_size:
        raise DrafterLoadError(
            f"{folder}: the n-gram table is for vocab {table.vocab_size}, the drafter for {config.vocab_size}"
        )
    return table


def build_drafter(
    config: DrafterConfig, weights: dict[str, mx.array], source: Path, dtype: mx.Dtype
) -> RecurrentDrafter:
    """A RecurrentDrafter holding `weights` (floats cast to `dtype`) after checking every key and shape."""
    drafter = RecurrentDrafter(config)
    if config.quantization is not None:
        # Quantize exactly the layers the file holds quantized (mlx-lm's convention).
        nn.quantize(
            drafter,
            **config.quantization,
            class_predicate=lambda p, m: isinstance(m, nn.Linear) and f"{p}.scales" in weights,
        )
    check_weights(dict(tree_flatten(drafter.parameters())), weights, source)
    drafter.load_weights([(k, cast_floats(v, dtype)) for k, v in weights.items()])
    if drafter.is_trimmed:
        _check_token_ids(drafter.token_ids, config.vocab_size, source)
    return drafter


def read_config(folder: Path) -> DrafterConfig:
    """The DrafterConfig of a drafter folder's config.json. Raises DrafterLoadError."""
    config_file = folder / CONFIG_FILE
    if not folder.is_dir():
        raise DrafterLoadError(f"{folder}: not a drafter folder (expected {CONFIG_FILE} + {WEIGHTS_FILE})")
    if not config_file.is_file():
        raise DrafterLoadError(f"{folder}: no {CONFIG_FILE}")
    try:
        raw = json.loads(config_file.read_text())
        return DrafterConfig.from_dict(raw)
    except json.JSONDecodeError as e:
        raise DrafterLoadError(f"{config_file}: invalid JSON ({e})") from None
    except (TypeError, ValueError) as e:  # DrafterLoadError included: add the file name
        raise DrafterLoadError(f"{config_file}: {e}") from None


def _check_token_ids(token_ids: mx.array, vocab_size: int, source: Path) -> None:
    """A one-time host read at load time, so a bad table fails here, not mid-decoding."""
    ids = np.array(token_ids)
    if not np.issubdtype(ids.dtype, np.integer):
        raise DrafterLoadError(f"{source}: 'token_ids' must be integers, got {ids.dtype}")
    if ids.size and (ids.min() < 0 or ids.max() >= vocab_size):
        raise DrafterLoadError(
            f"{source}: 'token_ids' values must be in [0, {vocab_size}), got [{ids.min()}, {ids.max()}]"
        )
