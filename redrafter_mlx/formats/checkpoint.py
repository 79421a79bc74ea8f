"""Drafter checkpoint files, for every drafter kind: reading weights (safetensors, or PyTorch
.bin / .pt / .pth), checking them against the shapes a config implies, and writing an output
folder all at once.

safetensors are read by MLX itself; PyTorch files need PyTorch (an optional dependency) and
are loaded with `weights_only=True`, so a checkpoint cannot run code. An output folder is
written beside its final path and renamed into place (`save_staged`), so it is never
half-written, and an existing non-empty folder is only replaced when asked (`check_target`).
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import mlx.core as mx

from ..errors import DrafterLoadError, TargetExists

CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"  # the weights of every MLX drafter folder
TORCH_SUFFIXES = (".bin", ".pt", ".pth")
TORCH_HINT = "reading .bin/.pt needs PyTorch: pip install 'redrafter-mlx[torch]' (or convert to safetensors)"


def read_checkpoint(path: Path) -> dict[str, mx.array]:
    """All tensors of a .safetensors / .bin / .pt / .pth file, keys as stored. Raises
    DrafterLoadError for an unreadable file or an unknown suffix."""
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
            raise DrafterLoadError(f"{path}: unreadable safetensors ({first_line(e)})") from None
    try:
        import torch

        return set(_state_dict(torch.load(path, map_location="cpu", weights_only=True, mmap=True), path, torch.Tensor))
    except ImportError:
        raise DrafterLoadError(TORCH_HINT) from None
    except RuntimeError:  # a pre-zip torch file cannot be memory-mapped: read it
        return set(read_checkpoint(path))


def read_weights(folder: Path) -> dict[str, mx.array]:
    """The tensors of an MLX drafter folder's model.safetensors. Raises DrafterLoadError, with
    a hint when the folder holds PyTorch weights instead (an upstream checkpoint)."""
    weights_file = folder / WEIGHTS_FILE
    if not weights_file.is_file():
        hint = ""
        if list(folder.glob("*.bin")) or list(folder.glob("*.pt")):
            hint = " (found PyTorch weights: convert them with `redrafter convert`)"
        raise DrafterLoadError(f"{folder}: no {WEIGHTS_FILE}{hint}")
    try:
        return mx.load(str(weights_file))
    except (RuntimeError, ValueError) as e:
        raise DrafterLoadError(f"{weights_file}: unreadable safetensors ({e})") from None


def check_weights(expected: dict[str, mx.array], found: dict[str, mx.array], source: Path) -> None:
    """Raise DrafterLoadError unless `found` has exactly the keys and shapes of `expected` (a
    module's parameters built from config.json): one line per missing key, unexpected key
    and shape mismatch."""
    problems = [
        f"missing key {k!r} (config.json implies shape {tuple(expected[k].shape)})"
        for k in sorted(expected.keys() - found.keys())
    ]
    problems += [
        f"unexpected key {k!r} with shape {tuple(found[k].shape)}" for k in sorted(found.keys() - expected.keys())
    ]
    problems += [
        f"shape mismatch for {k!r}: file has {tuple(found[k].shape)}, config.json implies {tuple(expected[k].shape)}"
        for k in sorted(expected.keys() & found.keys())
        if found[k].shape != expected[k].shape
    ]
    if problems:
        raise DrafterLoadError(f"{source} does not match config.json: " + "; ".join(problems))


def cast_floats(x: mx.array, dtype: mx.Dtype) -> mx.array:
    """Floating arrays to dtype; integer arrays (packed 4-bit weights, token_ids) untouched."""
    return x.astype(dtype) if mx.issubdtype(x.dtype, mx.floating) else x


def check_target(out: Path, force: bool) -> None:
    """Only an absent or empty folder may be written without `force`; never a file. Raises
    TargetExists for a non-empty folder, FileExistsError for a file."""
    if out.exists() and not out.is_dir():
        raise FileExistsError(f"{out} exists and is not a directory")
    if out.is_dir() and any(out.iterdir()) and not force:
        raise TargetExists(out)


def save_staged(write: Callable[[Path], Any], out: Path) -> Path:
    """write(folder) into a sibling temp folder, then rename it over OUT, so OUT is never
    half-written; an old OUT is only deleted once the new one is in place. (mkdir, not
    mkdtemp: the folder becomes OUT, so it gets the umask's permissions, not 0700.)"""
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


def _replace(staging: Path, out: Path) -> None:
    """Move `staging` to `out`, restoring the old `out` if the move fails."""
    if not out.exists():
        os.rename(staging, out)
        return
    backup = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".old", dir=out.parent))
    os.rename(out, backup / out.name)
    try:
        os.rename(staging, out)
    except BaseException:
        os.rename(backup / out.name, out)
        backup.rmdir()
        raise
    shutil.rmtree(backup, ignore_errors=True)


def _read_safetensors(path: Path) -> dict[str, mx.array]:
    try:
        return mx.load(str(path), format="safetensors")
    except (RuntimeError, ValueError) as e:
        raise DrafterLoadError(f"{path}: unreadable safetensors ({first_line(e)})") from None


def _read_torch(path: Path) -> dict[str, mx.array]:
    """torch.load with weights_only=True: a checkpoint must not be able to run code."""
    try:
        import torch
    except ImportError:
        raise DrafterLoadError(TORCH_HINT) from None
    try:
        loaded = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # torch raises many types (UnpicklingError, RuntimeError, EOFError...)
        raise DrafterLoadError(f"{path}: unreadable PyTorch checkpoint ({first_line(e)})") from None
    state = _state_dict(loaded, path, torch.Tensor)
    # numpy has no bfloat16: widen it (exactly) to float32; the final cast picks the dtype.
    return {k: mx.array((v.float() if v.dtype == torch.bfloat16 else v).detach().numpy()) for k, v in state.items()}


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


def first_line(error: BaseException) -> str:
    """An error's message cut to one line for a one-line report (its type's name when empty)."""
    text = str(error).strip()
    return text.splitlines()[0][:200] if text else type(error).__name__
