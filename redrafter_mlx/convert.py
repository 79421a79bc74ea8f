"""Convert a PyTorch-trained ReDrafter drafter into an MLX drafter folder.

Sources: a folder (or one file in it) holding config.json plus one of model.safetensors,
pytorch_model.bin or model.pt. Key names are those of Apple's reference checkpoints
(see drafter.py), or the variants TensorRT-LLM's `examples/redrafter/convert_checkpoint.py`
accepts: `input_projs.*` / `lm_heads.*` for `input_proj.*` / `lm_head.*`, and `0.{i}.*` for
`lm_head.{i}.*` (the head saved as element 0 of a container). A `0.` prefix on any other
key (a whole drafter saved inside a container) is stripped.

safetensors are read by MLX itself; .bin / .pt need PyTorch (an optional dependency).
A full-vocabulary head can be trimmed to the K tokens the target LLM emits most
(`token_ranking.py`): drafting then reads K head rows per step instead of V.
The output is written beside OUT and renamed into place, so OUT is never half-written.
"""

from __future__ import annotations

import json
import secrets
import shutil
from dataclasses import replace
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import mlx.core as mx
import numpy as np
from mlx.utils import tree_flatten

from .drafter import (
    _IGNORED_KEYS,
    Drafter,
    DrafterConfig,
    DrafterLoadError,
    _read_config,
    build_drafter,
    quantize_drafter,
    save_drafter,
    trim_head,
)
from .errors import InputError
from .export import _check_target, _replace
from .gguf import read_gguf
from .loading import ModelLoadError, _eos_ids, resolve
from .token_ranking import DEFAULT_CORPUS, top_tokens

WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin", "model.pt")
TORCH_SUFFIXES = (".bin", ".pt", ".pth")
TORCH_HINT = (
    "reading .bin/.pt needs PyTorch: pip install 'redrafter-mlx[torch]' (or convert to safetensors)"
)
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
    force: bool = False,
) -> Path:
    """Validate SRC against its config.json (and the target LLM's config when given), cast
    to `dtype`, trim the head to `head_token_ids` (K,) when given (`head_tokens_for`),
    optionally quantize to `bits`, and write an MLX drafter folder at OUT.
    Raises InputError (DrafterLoadError...) or FileExistsError with one-line messages."""
    src, out = Path(src).expanduser(), Path(out).expanduser().absolute()
    _check_quantization(bits, group_size)
    folder, weights_file = locate_checkpoint(src)
    if folder.resolve().is_relative_to(out.resolve()):
        raise InputError(f"{out} holds the source checkpoint; write to another folder")
    _check_target(out, force)
    config = _read_config(folder)
    if config.quantization is not None:
        raise DrafterLoadError(f"{folder}: already a quantized MLX drafter, nothing to convert")
    if llm_config is not None:
        check_llm_config(config, llm_config)
    weights = canonical_weights(read_checkpoint(weights_file), weights_file)
    drafter = build_drafter(config, weights, weights_file, dtype)
    if head_token_ids is not None:
        try:
            drafter = trim_head(drafter, head_token_ids)
        except ValueError as e:
            raise DrafterLoadError(f"{folder}: {e}") from None
    if bits is not None:
        quantize_drafter(drafter, bits=bits, group_size=group_size)
    return save_staged(partial(save_drafter, drafter), out)


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


def read_checkpoint(path: Path) -> dict[str, mx.array]:
    """All tensors of a .safetensors / .bin / .pt file, keys as stored."""
    if path.suffix == ".safetensors":
        return _read_safetensors(path)
    if path.suffix in TORCH_SUFFIXES:
        return _read_torch(path)
    raise DrafterLoadError(f"{path}: unknown weights format (expected .safetensors, .bin or .pt)")


def checkpoint_keys(path: Path) -> set[str]:
    """The tensor names of a .safetensors / .bin / .pt file without reading its tensors (the
    safetensors header; a memory-mapped torch load), for telling formats apart."""
    if path.suffix == ".safetensors":
        try:
            with path.open("rb") as f:
                size = int.from_bytes(f.read(8), "little")
                if size > path.stat().st_size - 8:
                    raise ValueError(f"header of {size} bytes in a file of {path.stat().st_size}")
                header = json.loads(f.read(size))
            return set(header) - {"__metadata__"}
        except (OSError, ValueError, TypeError) as e:  # TypeError: a header that is not an object
            raise DrafterLoadError(f"{path}: unreadable safetensors ({_first_line(e)})") from None
    try:
        import torch

        return set(_state_dict(torch.load(path, map_location="cpu", weights_only=True, mmap=True), path, torch.Tensor))
    except ImportError:
        raise DrafterLoadError(TORCH_HINT) from None
    except RuntimeError:  # a pre-zip torch file cannot be memory-mapped: read it
        return set(read_checkpoint(path))


def _read_safetensors(path: Path) -> dict[str, mx.array]:
    try:
        return mx.load(str(path), format="safetensors")
    except (RuntimeError, ValueError) as e:
        raise DrafterLoadError(f"{path}: unreadable safetensors ({_first_line(e)})") from None


def _read_torch(path: Path) -> dict[str, mx.array]:
    """torch.load with weights_only=True: a checkpoint must not be able to run code."""
    try:
        import torch
    except ImportError:
        raise DrafterLoadError(TORCH_HINT) from None
    try:
        loaded = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # torch raises many types (UnpicklingError, RuntimeError, EOFError...)
        raise DrafterLoadError(f"{path}: unreadable PyTorch checkpoint ({_first_line(e)})") from None
    state = _state_dict(loaded, path, torch.Tensor)
    # numpy has no bfloat16: widen it (exactly) to float32; the final cast picks the dtype.
    return {
        k: mx.array((v.float() if v.dtype == torch.bfloat16 else v).detach().numpy())
        for k, v in state.items()
    }


def _state_dict(loaded: Any, path: Path, tensor_type: type) -> dict[str, Any]:
    """A bare state dict, or the one under "state_dict" / "model" of a training checkpoint."""
    if isinstance(loaded, dict):
        wrapped = [loaded[k] for k in ("state_dict", "model") if isinstance(loaded.get(k), dict)]
        loaded = wrapped[0] if wrapped else loaded
    if not isinstance(loaded, dict):
        raise DrafterLoadError(f"{path}: expected a state dict, found a {type(loaded).__name__}")
    bad = [k for k, v in loaded.items() if not isinstance(v, tensor_type)]
    if bad:
        raise DrafterLoadError(f"{path}: state dict entry {bad[0]!r} is not a tensor")
    return loaded


def canonical_key(key: str) -> str:
    """Reference name for a reference or TensorRT-LLM-style key."""
    if key.startswith("0."):
        rest = key[2:]
        key = f"lm_head.{rest}" if rest[:1].isdigit() else rest
    for old, new in _RENAMED_PREFIXES:
        if key.startswith(old):
            return new + key[len(old):]
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
        if name not in _IGNORED_KEYS:
            renamed[name] = value
    return renamed


def check_llm_config(config: Any, llm_config: dict[str, Any]) -> None:
    """The drafter reads the LLM's hidden states and drafts its token ids: the `vocab_size` and
    `hidden_size` of a drafter's config (any kind's) must be the LLM's."""
    for name in ("vocab_size", "hidden_size"):
        ours, theirs = getattr(config, name), llm_config.get(name)
        if theirs is None:
            raise DrafterLoadError(f"the model's config has no {name} to check the drafter against")
        if ours != theirs:
            raise DrafterLoadError(f"drafter {name} is {ours} but the model's is {theirs}")


def _llm_path(name: str) -> Path:
    """A folder or .gguf file for an LLM alias, path or hub id (fetched whole by `resolve`)."""
    path = resolve(name)
    if path.is_file() and path.suffix != ".gguf":
        raise ModelLoadError(f"{path}: expected a folder or a .gguf file")
    return path


def read_llm_config(name: str) -> dict[str, Any]:
    """The target LLM's config alone: a folder's config.json or a .gguf file's metadata
    (no weights are loaded into memory)."""
    path = _llm_path(name)
    if path.is_file():
        return read_gguf(path).config
    config_file = path / "config.json"
    if not config_file.is_file():
        raise ModelLoadError(f"{path}: no config.json")
    try:
        return json.loads(config_file.read_text())
    except json.JSONDecodeError as e:
        raise ModelLoadError(f"{config_file}: invalid JSON ({e})") from None


def read_llm_tokenizer(name: str) -> Any:
    """The target LLM's Hugging Face tokenizer alone: a folder's tokenizer files or a .gguf
    file's metadata."""
    path = _llm_path(name)
    if path.is_file():
        return read_gguf(path).tokenizer
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(str(path))
    except Exception as e:  # transformers raises many types (OSError, ValueError, config validation...)
        raise ModelLoadError(f"{path}: no usable tokenizer ({_first_line(e)})") from None


def head_tokens_for(
    name: str, llm_config: dict[str, Any], k: int, corpus: str | Path = DEFAULT_CORPUS
) -> np.ndarray:
    """The K token ids of LLM `name` (config `llm_config`) a trimmed head keeps, ranked by
    frequency in `corpus` tokenized with the LLM's tokenizer: (K,) int32, best first."""
    vocab_size = llm_config.get("vocab_size")
    if not isinstance(vocab_size, int):
        raise ModelLoadError("the model's config has no vocab_size to rank its tokens in")
    return top_tokens(read_llm_tokenizer(name), vocab_size, k, corpus, _eos_ids(llm_config))


def parameter_count(config: DrafterConfig) -> int:
    """Logical (unquantized) parameter count from shapes alone: MLX initialisation is lazy,
    so building an unquantized Drafter to count costs no memory or compute."""
    plain = Drafter(replace(config, quantization=None))
    return sum(v.size for _, v in tree_flatten(plain.trainable_parameters()))


def save_staged(write: Callable[[Path], Any], out: Path) -> Path:
    """write(folder) into a sibling temp folder, then rename it over OUT, so OUT is never
    half-written. (mkdir, not mkdtemp: the folder becomes OUT, so it gets the umask's
    permissions, not 0700.)"""
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = out.parent / f".{out.name}.{secrets.token_hex(6)}.tmp"
    staging.mkdir()
    try:
        write(staging)
        _replace(staging, out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return out


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0][:200] if text else type(error).__name__
