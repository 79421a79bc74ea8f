"""One entry point from a `--model` argument to a ready model and tokenizer.

Accepts an alias, a local Hugging Face folder (single or sharded safetensors, mlx-community
quantized folders) of any architecture mlx-lm implements with key/value caches, a Hugging
Face repo id (downloaded with huggingface_hub) or a Llama-architecture `.gguf` file. Weight
loading and quantized layers come from mlx-lm (`load_model`); plain Llama/Mistral folders load
into this project's compiled Llama forward (`models.llama`), every other architecture into
mlx-lm's own class behind `models.adapter.TreeModel`. GGUF decoding lives in `gguf.py`.
"""

from __future__ import annotations

import glob
import importlib.util
import json
from dataclasses import dataclass
from pathlib import Path

import mlx.core as mx
from mlx_lm.tokenizer_utils import TokenizerWrapper
from mlx_lm.utils import MODEL_REMAPPING, load_model, load_tokenizer

from ..errors import InputError
from ..models.adapter import TreeModel, UnsupportedModel
from ..models.llama import Model, ModelArgs
from ..models.llm import LLM
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
OWN_FORWARD_TYPES = {"llama", "mistral"}  # folders our compiled Llama runs (unless they slide windows)
# Drafters trained for a model and shipped inside the package.
SHIPPED_DRAFTERS = {EMBEDDED: Path(__file__).resolve().parents[1] / "assets" / "drafters" / EMBEDDED}
SHIPPED_DRAFTER_KEY = "redrafter_shipped_drafter"  # config.json field: which shipped drafter fits
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "tokenizer_config.json", "vocab.json")
_HUB_FILES = ["*.json", "*.safetensors", "tokenizer.model", "*.tiktoken", "*.txt", "*.jinja"]


class ModelLoadError(InputError):
    """A user-facing, one-line reason why a model could not be loaded."""


@dataclass
class LoadedModel:
    model: LLM
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


def _load_gguf(path: Path, dtype: mx.Dtype) -> tuple[LLM, TokenizerWrapper, dict]:
    try:
        read = gguf.read_gguf(path, dtype)
    except gguf.GGUFError as e:
        raise ModelLoadError(str(e)) from None
    model = Model(ModelArgs.from_dict(read.config))
    model.load_weights(list(read.weights.items()))
    tokenizer = TokenizerWrapper(read.tokenizer, eos_token_ids=eos_ids(read.config))
    return model, tokenizer, read.config


def _load_folder(path: Path, dtype: mx.Dtype, tokenizer: bool = True) -> tuple[LLM, TokenizerWrapper | None, dict]:
    config_file = path / "config.json"
    if not config_file.exists():
        raise ModelLoadError(f"{path}: no config.json (expected a Hugging Face model folder)")
    try:
        config = json.loads(config_file.read_text())
    except json.JSONDecodeError as e:
        raise ModelLoadError(f"{config_file}: invalid JSON ({e})") from None
    if not isinstance(config.get("model_type"), str):
        raise ModelLoadError(f"{config_file}: no model_type (expected a Hugging Face model config)")
    if not glob.glob(str(path / "model*.safetensors")):
        if glob.glob(str(path / "*.bin")):
            raise ModelLoadError(
                f"{path}: only PyTorch .bin weights; convert them to safetensors first "
                "(e.g. `python -m mlx_lm convert --hf-path <repo>` on a machine with torch)"
            )
        raise ModelLoadError(f"{path}: no model*.safetensors weights")
    model, config = _load_weights(path, config)
    model.set_dtype(dtype)
    if not tokenizer:
        return model, None, config
    return model, read_tokenizer(path, config), config


def read_tokenizer(path: Path, config: dict) -> TokenizerWrapper:
    """A model folder's tokenizer (mlx-lm's wrapper, EOS ids from `config`)."""
    try:
        return load_tokenizer(path, eos_token_ids=eos_ids(config))
    except (ValueError, OSError) as e:  # transformers' message when no tokenizer file is usable
        raise ModelLoadError(f"{path}: no usable tokenizer ({str(e).strip().splitlines()[0][:160]})") from None


def load_draft(name: str, dtype: mx.Dtype | None = None) -> LoadedModel:
    """A draft model: only token ids cross to the target, so its tokenizer is read only where
    its folder has one (to prove both number tokens alike), and None otherwise."""
    loaded = load(name, dtype, tokenizer=False)
    if loaded.tokenizer is None and any((loaded.source / f).is_file() for f in _TOKENIZER_FILES):
        loaded.tokenizer = read_tokenizer(loaded.source, loaded.config)
    return loaded


def is_llm_type(model_type: str | None) -> bool:
    """Whether `model_type` (a config.json field) names an architecture mlx-lm implements."""
    if not model_type or not model_type.isidentifier():
        return False
    return importlib.util.find_spec(f"mlx_lm.models.{MODEL_REMAPPING.get(model_type, model_type)}") is not None


def runs_own_forward(config: dict) -> bool:
    """Whether a folder's config is a plain Llama our compiled forward runs exactly as mlx-lm's
    class would: no sliding-window layers (mlx-lm's Llama has them; ours does not)."""
    layer_types = config.get("layer_types") or []
    return config.get("model_type") in OWN_FORWARD_TYPES and all(t == "full_attention" for t in layer_types)


def _load_weights(path: Path, config: dict) -> tuple[LLM, dict]:
    """The folder's weights in our Llama or in mlx-lm's class for its architecture, and the
    config as mlx-lm read it."""
    own = runs_own_forward(config)
    classes = {"get_model_classes": lambda config: (Model, ModelArgs)} if own else {}
    try:
        model, config = load_model(path, lazy=True, **classes)
    except ValueError as e:
        reason = str(e).splitlines()[0][:200]
        if reason.startswith("Model type"):  # mlx-lm has no module for it
            raise ModelLoadError(
                f"{path}: model_type {config['model_type']!r} is not an architecture mlx-lm implements"
            ) from None
        raise ModelLoadError(f"{path}: weights do not match config.json ({reason})") from None
    if own:
        return model, config
    try:
        return TreeModel(model), config
    except UnsupportedModel as e:
        raise ModelLoadError(f"{path}: {config['model_type']} cannot verify drafts: {e}") from None


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
