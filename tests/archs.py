"""Tiny random models of every architecture the verifier supports, built with mlx-lm's own
classes and saved as Hugging Face folders with the embedded model's (real) tokenizer."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import mlx.core as mx
import mlx.nn as nn
from mlx.utils import tree_flatten, tree_map
from mlx_lm.utils import _get_classes

from .helpers import TOKENIZER_FILES

BASE = {
    "hidden_size": 64,
    "num_hidden_layers": 4,
    "intermediate_size": 128,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "rms_norm_eps": 1e-6,
    "vocab_size": 49152,
    "rope_theta": 10000.0,
    "max_position_embeddings": 2048,
    "tie_word_embeddings": False,
    "eos_token_id": 2,
}
GEMMA = {"query_pre_attn_scalar": 16}
# name -> config overrides. Windows are a few tokens wide, so every test prompt slides past them.
ARCHITECTURES = {
    "llama": {"model_type": "llama"},
    "llama3-rope": {
        "model_type": "llama",
        "rope_scaling": {
            "rope_type": "llama3",
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 16,
        },
    },
    "llama-sliding": {
        "model_type": "llama",
        "layer_types": ["sliding_attention", "full_attention"] * 2,
        "sliding_window": 6,
    },
    "mistral": {"model_type": "mistral"},
    "qwen2": {"model_type": "qwen2"},
    "qwen3": {"model_type": "qwen3"},
    "qwen3_moe": {
        "model_type": "qwen3_moe",
        "num_experts": 4,
        "num_experts_per_tok": 2,
        "decoder_sparse_step": 1,
        "mlp_only_layers": [],
        "moe_intermediate_size": 32,
        "norm_topk_prob": True,
    },
    "gemma2": {"model_type": "gemma2", "attn_logit_softcapping": 50.0, "final_logit_softcapping": 30.0, **GEMMA},
    "gemma3_text": {"model_type": "gemma3_text", "sliding_window": 6, "sliding_window_pattern": 2, **GEMMA},
    "gemma3": {  # the multimodal folders (Gemma 3 4B and up): the text model is `language_model`
        "model_type": "gemma3",
        "text_config": BASE | {"model_type": "gemma3_text", "sliding_window": 6, "sliding_window_pattern": 2, **GEMMA},
    },
    "phi3": {"model_type": "phi3"},
    "olmo2": {"model_type": "olmo2"},
    "granite": {
        "model_type": "granite",
        "logits_scaling": 4.0,
        "attention_multiplier": 0.25,
        "embedding_multiplier": 2.0,
        "residual_multiplier": 0.5,
        "attention_bias": False,
        "mlp_bias": False,
    },
}
OWN_FORWARD = {"llama", "llama3-rope", "mistral"}  # run by models.llama; the rest by the adapter


def arch_config(name: str, **overrides) -> dict:
    return BASE | ARCHITECTURES[name] | overrides


def random_mlx_lm_model(config: dict, seed: int = 0) -> nn.Module:
    """mlx-lm's own class for `config`, its matrices drawn N(0, 0.2^2) so logits are far from
    ties (mlx-lm's default init makes near-uniform ones)."""
    mx.random.seed(seed)
    model_class, args_class = _get_classes(config)
    model = model_class(args_class.from_dict(config))
    model.update(tree_map(lambda a: mx.random.normal(a.shape) * 0.2 if a.ndim > 1 else a, model.parameters()))
    mx.eval(model.parameters())
    return model


def write_arch_folder(folder: Path, config: dict, tokenizer_from: Path, seed: int = 0) -> Path:
    """A model folder as mlx-community ships them: config.json, model.safetensors, tokenizer."""
    folder.mkdir(parents=True, exist_ok=True)
    model = random_mlx_lm_model(config, seed)
    mx.save_safetensors(str(folder / "model.safetensors"), dict(tree_flatten(model.parameters())))
    (folder / "config.json").write_text(json.dumps(config))
    for name in TOKENIZER_FILES:
        if (tokenizer_from / name).exists():
            shutil.copy(tokenizer_from / name, folder / name)
    return folder
