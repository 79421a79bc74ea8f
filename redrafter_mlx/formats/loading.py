"""One entry point from a `--model` argument to a ready model and tokenizer.

Accepts an alias, a local Hugging Face folder (single or sharded safetensors, mlx-community
quantized folders), a Hugging Face repo id (downloaded with huggingface_hub) or a
Llama-architecture `.gguf` file. Weight loading and quantized layers come from mlx-lm
(`load_model` with our model class); GGUF decoding lives in `gguf.py`.
"""

from __future__ import annotations

import glob
import json
from dataclasses import dataclass
from pathlib import Path

import mlx.core as mx
from mlx_lm.tokenizer_utils import TokenizerWrapper
from mlx_lm.utils import load_model, load_tokenizer

from ..errors import InputError
from ..models.llama import Model, ModelArgs
from ..runtime.device import default_dtype
from . import gguf

EMBEDDED = "smollm2-135m"
DEFAULT_MODEL = EMBEDDED
ALIASES = {
    "vicuna-7b": "lmsys/vicuna-7b-v1.3",
    "vicuna-13b": "lmsys/vicuna-13b-v1.3",
    "vicuna-33b": "lmsys/vicuna-33b-v1.3",
    "vicuna-68m": "double7/vicuna-68m",  # a 2-layer Llama with Vicuna's tokenizer: a draft model
    EMBEDDED: EMBEDDED,
}
SUPPORTED_TYPES = {"llama", "mistral"}
# Drafters trained for a model and shipped inside the package.
SHIPPED_DRAFTERS = {EMBEDDED: Path(__file__).resolve().parents[1] / "assets" / "drafters" / EMBEDDED}
SHIPPED_DRAFTER_KEY = "redrafter_shipped_drafter"  # config.json field: which shipped drafter fits
_HUB_FILES = ["*.json", "*.safetensors", "tokenizer.model", "*.tiktoken", "*.txt", "*.jinja"]


class ModelLoadError(InputError):
    """A user-facing, one-line reason why a model could not be loaded."""


@dataclass
class LoadedModel:
    model: Model
    tokenizer: TokenizerWrapper | None  # None only for a draft model loaded without one
    config: dict
    name: str  # what the user asked for: alias, path or repo id
    source: Path  # the local folder or file the weights came from

    @property
    def is_vicuna(self) -> bool:
        return "vicuna" in self.name.lower() or "vicuna" in str(self.config.get("_name_or_path", "")).lower()


def resolve(name: str) -> Path:
    """Local path for an alias, path or hub id (downloading when needed)."""
    target = ALIASES.get(name.lower(), name)
    if target == EMBEDDED:
        try:
            return gguf.embedded_model_path()
        except gguf.GGUFError as e:
            raise ModelLoadError(str(e)) from None
    path = Path(target).expanduser()
    if path.exists():
        return path
    if target.count("/") == 1 and not target.startswith((".", "/", "~")) and not target.endswith(".gguf"):
        return download(target)
    known = ", ".join(sorted(ALIASES))
    raise ModelLoadError(
        f"model {name!r} not found: not a local folder or .gguf file, not a hub id (owner/name), "
        f"and not an alias ({known})"
    )


def download(repo_id: str, patterns: list[str] = _HUB_FILES) -> Path:
    """Fetch a repo's config, tokenizer and weights with huggingface_hub (cache-aware)."""
    from huggingface_hub import snapshot_download

    try:
        path = Path(snapshot_download(repo_id, allow_patterns=patterns))
        if not glob.glob(str(path / "*.safetensors")):
            path = Path(snapshot_download(repo_id, allow_patterns=patterns + ["*.bin"]))
        return path
    except Exception as e:  # the hub raises many types; all mean "not available here"
        reason = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ModelLoadError(
            f"cannot get {repo_id!r} from the Hugging Face Hub ({type(e).__name__}: {reason[:120]}). "
            f"Offline? Download it where you have network (`huggingface-cli download {repo_id}`), "
            "then pass --model <folder> or reuse the same HF_HOME cache."
        ) from None


def load(name: str = DEFAULT_MODEL, dtype: mx.Dtype | None = None, tokenizer: bool = True) -> LoadedModel:
    """Load model + tokenizer (None without `tokenizer`: a draft model needs only the target's);
    float weights are cast to `dtype` (default: per device)."""
    dtype = dtype or default_dtype()
    path = resolve(name)
    if path.is_file():
        if path.suffix != ".gguf":
            raise ModelLoadError(f"{path}: expected a folder or a .gguf file")
        model, words, config = _load_gguf(path, dtype)
    else:
        model, words, config = _load_folder(path, dtype, tokenizer)
    return LoadedModel(model, words, config, name, path)


def _load_gguf(path: Path, dtype: mx.Dtype) -> tuple[Model, TokenizerWrapper, dict]:
    try:
        read = gguf.read_gguf(path, dtype)
    except gguf.GGUFError as e:
        raise ModelLoadError(str(e)) from None
    model = Model(ModelArgs.from_dict(read.config))
    model.load_weights(list(read.weights.items()))
    tokenizer = TokenizerWrapper(read.tokenizer, eos_token_ids=eos_ids(read.config))
    return model, tokenizer, read.config


def _load_folder(path: Path, dtype: mx.Dtype, tokenizer: bool = True) -> tuple[Model, TokenizerWrapper | None, dict]:
    config_file = path / "config.json"
    if not config_file.exists():
        raise ModelLoadError(f"{path}: no config.json (expected a Hugging Face model folder)")
    try:
        config = json.loads(config_file.read_text())
    except json.JSONDecodeError as e:
        raise ModelLoadError(f"{config_file}: invalid JSON ({e})") from None
    if config.get("model_type") not in SUPPORTED_TYPES:
        raise ModelLoadError(f"{path}: model_type {config.get('model_type')!r} is not a Llama-architecture model")
    if not glob.glob(str(path / "model*.safetensors")):
        if glob.glob(str(path / "*.bin")):
            raise ModelLoadError(
                f"{path}: only PyTorch .bin weights; convert them to safetensors first "
                "(e.g. `python -m mlx_lm convert --hf-path <repo>` on a machine with torch)"
            )
        raise ModelLoadError(f"{path}: no model*.safetensors weights")
    try:
        model, config = load_model(path, lazy=True, get_model_classes=lambda config: (Model, ModelArgs))
    except ValueError as e:
        raise ModelLoadError(f"{path}: weights do not match config.json ({str(e).splitlines()[0][:200]})") from None
    model.set_dtype(dtype)
    if not tokenizer:
        return model, None, config
    try:
        words = load_tokenizer(path, eos_token_ids=eos_ids(config))
    except (ValueError, OSError) as e:  # transformers' message when no tokenizer file is usable
        raise ModelLoadError(f"{path}: no usable tokenizer ({str(e).strip().splitlines()[0][:160]})") from None
    return model, words, config


def eos_ids(config: dict) -> list[int]:
    """The end-of-sequence token ids of an LLM config (`eos_token_id`: none, one or a list)."""
    eos = config.get("eos_token_id")
    return [] if eos is None else list(eos) if isinstance(eos, list) else [eos]


def shipped_drafter_name(loaded: LoadedModel) -> str | None:
    """Which drafter this package ships for `loaded`, if any: recognised by its weights file,
    or by the mark `redrafter export` leaves in the config of the same weights."""
    for model_name, folder in SHIPPED_DRAFTERS.items():
        same = loaded.config.get(SHIPPED_DRAFTER_KEY) == model_name or loaded.source == resolve(model_name)
        if same and (folder / "config.json").exists():
            return model_name
    return None


def shipped_drafter(loaded: LoadedModel) -> Path | None:
    """The folder of the drafter this package ships for `loaded`, if any."""
    name = shipped_drafter_name(loaded)
    return SHIPPED_DRAFTERS[name] if name else None
