"""What a training run is set to: the drafter's architecture, the objective, the optimisation
and the evals (saved with every checkpoint).

The defaults are the recipe of the shipped SmolLM2-135M drafter (its model card: tied head over
K = 16,384 tokens, exit width = the LLM's hidden size, 2 ResBlocks, T = 4, AdamW on 512
positions per step, lr 6e-4 after 50 warmup steps, cosine): the default model's default drafter
is what `redrafter train` with no options retrains.

`kind` picks the drafter trained: ReDrafter's RNN ("redrafter", the default), IBM's MLP
speculator ("mlp-speculator") or Medusa ("medusa"), all on the same data and loss (`loss.py`
unrolls any of them through the drafting seam), or EAGLE ("eagle"), stateful, on the same
data with its own objective (`eagle.py`: feature regression + the LLM head's cross-entropy
over whole answers, teacher-forced). Each kind reads only its own architecture fields; the
RNN's (exit_dim, num_draft_layers, rnn, head_tied, token_subset_size) are ignored by the
others, which score the full vocabulary and ship no n-gram table (`redrafter train` refuses
those flags with another kind).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from mlx_lm.models.llama import ModelArgs

from ..drafting.kinds.eagle import MODEL_TYPE as EAGLE_MODEL_TYPE
from ..drafting.kinds.medusa import MedusaConfig
from ..drafting.kinds.mlp_speculator import MLPSpeculatorConfig
from ..drafting.kinds.rnn import DrafterConfig
from ..drafting.registry import kind_named
from ..tuning import FALLBACK_SHAPE

# The kinds training builds (`TreeDrafter.kind`) -> the model_type of the folder it saves
KINDS = ("redrafter", "mlp-speculator", "medusa", "eagle")
MODEL_TYPES = {name: kind_named(name).model_types[0] for name in KINDS}


@dataclass
class TrainConfig:
    """Drafter architecture + optimisation settings."""

    kind: str = "redrafter"  # one of KINDS
    # architecture, kind "redrafter" (DrafterConfig fields)
    exit_dim: int | None = None  # None: the LLM's hidden size; <= 0: 2 * hidden (the reference's)
    num_draft_layers: int = 2
    rnn: bool = True
    head_tied: bool = True
    token_subset_size: int | None = 16384  # None: full vocabulary
    # kind "mlp-speculator" (MLPSpeculatorConfig; n_predict = predict)
    inner_dim: int | None = None  # None: the LLM's hidden size
    tie_weights: bool = False  # one embedding, head and norm shared by all stages (upstream's field)
    scale_input: bool = False  # the stages start from rms_norm(h) / sqrt(2) (upstream's field)
    # kind "medusa" (MedusaConfig; num_heads = predict)
    medusa_layers: int = 1  # ResBlocks per head
    # kind "eagle" (the LLM's own config with eagle_layers decoder layers, as upstream's EConfig;
    # `predict` unused: EAGLE is trained at depth 1 on the LLM's true features, `eagle.py`)
    eagle_layers: int = 1
    eagle_seq: int = 128  # tokens per training sequence: longer answers are cropped at random
    eagle_noise: float = 0.2  # width of the uniform noise on the input features: U(-0.1, 0.1)
    eagle_reg_weight: float = 1.0  # SmoothL1 on the next feature (upstream's v_w)
    eagle_cls_weight: float = 0.1  # cross-entropy of the LLM head on it (upstream's p_w)
    eagle_stage_prompt: bool = False  # the saved config's stage_prompt (`drafting.eagle`)
    # objective
    predict: int = 4  # T, tokens predicted per position (beam_length - 1 are used)
    soft_targets: float = 0.0  # weight of the CE against the LLM's distribution (0: Eq. 2 only)
    # optimisation
    lr: float = 6e-4
    min_lr_ratio: float = 0.1
    warmup_steps: int = 50
    weight_decay: float = 0.01
    grad_clip: float = 1.0
    batch_positions: int = 512  # positions per micro-batch
    grad_accum: int = 1
    steps: int | None = None  # optimizer steps; None: derived from epochs
    epochs: float = 4.0
    # evaluation / bookkeeping
    holdout_fraction: float = 0.03
    eval_every: int = 250
    checkpoint_every: int = 250
    log_every: int = 50  # progress lines ({"step", "loss", "seconds"}) passed to `log`
    eval_prompts: int = 4  # prompts decoded with generate_redrafter at each eval (0: none)
    eval_max_tokens: int = 64
    # the evals' tree: the one every command decodes with when a drafter has no calibration
    beam_width: int = FALLBACK_SHAPE.beam_width
    beam_length: int = FALLBACK_SHAPE.beam_length
    search_width: int = FALLBACK_SHAPE.search_width
    seed: int = 0
    save_dtype: str = "float16"  # dtype of the shipped weights (loaded back as float32)

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"kind must be one of {', '.join(KINDS)}, got {self.kind!r}")
        if self.kind == "mlp-speculator" and self.tie_weights and self.predict < 2:
            raise ValueError("tie_weights needs predict >= 2 (one stage has nothing to tie)")
        if self.kind == "eagle" and (self.eagle_layers < 1 or self.eagle_seq < 2):
            raise ValueError("eagle_layers must be >= 1 and eagle_seq >= 2")

    @property
    def head_subset(self) -> int | None:
        """The size of the head's token subset (None: the full vocabulary): the RNN's alone."""
        return self.token_subset_size if self.kind == "redrafter" else None

    @property
    def eagle_rows(self) -> int:
        """EAGLE's sequences per micro-batch: `batch_positions` tokens in sequences of `eagle_seq`."""
        return max(1, self.batch_positions // self.eagle_seq)

    def kind_config(
        self,
        llm_config: dict[str, Any],
    ) -> DrafterConfig | MLPSpeculatorConfig | MedusaConfig | dict[str, Any]:
        """The config.json of a fresh drafter of `kind` for the LLM whose config.json is `llm_config`
        (EAGLE's is a dict: the LLM's Llama fields with `eagle_layers` layers, as upstream's EConfig)."""
        hidden, vocab = llm_config["hidden_size"], llm_config["vocab_size"]
        if self.kind == "eagle":
            llama = {f.name for f in fields(ModelArgs)}
            return {k: v for k, v in llm_config.items() if k in llama} | {
                "model_type": EAGLE_MODEL_TYPE,
                "num_hidden_layers": self.eagle_layers,
                "bias": True,
                "stage_prompt": self.eagle_stage_prompt,
            }
        if self.kind == "mlp-speculator":
            return MLPSpeculatorConfig(
                emb_dim=hidden,
                inner_dim=self.inner_dim or hidden,
                n_predict=self.predict,
                vocab_size=vocab,
                tie_weights=self.tie_weights,
                scale_input=self.scale_input,
            )
        if self.kind == "medusa":
            return MedusaConfig(
                vocab_size=vocab, hidden_size=hidden, num_heads=self.predict, num_layers=self.medusa_layers
            )
        return self.drafter_config(llm_config)

    def drafter_config(self, llm_config: dict[str, Any]) -> DrafterConfig:
        """The architecture of a fresh RNN drafter for the LLM whose config.json is `llm_config`."""
        hidden = llm_config["hidden_size"]
        return DrafterConfig(
            vocab_size=llm_config["vocab_size"],
            hidden_size=hidden,
            num_draft_layers=self.num_draft_layers,
            exit_dim=hidden if self.exit_dim is None else self.exit_dim,
            rnn=self.rnn,
            head_tied=self.head_tied,
            token_subset_size=self.token_subset_size,
        )
