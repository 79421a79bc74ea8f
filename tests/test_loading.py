"""Every loader path: HF folders (single, sharded, 4-bit), hub ids, aliases, and the errors."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import huggingface_hub
import mlx.core as mx
import mlx.nn as nn
import pytest

from redrafter_mlx.formats import loading
from redrafter_mlx.formats.loading import ModelLoadError, load

from .helpers import FLOAT32_RTOL, PROBE, random_model, relative_error, tiny_config


def logits_of(model) -> mx.array:
    return model.logits(model(PROBE, model.make_cache()))


def test_single_and_sharded_folders_load_the_same_weights(tmp_path, write_tiny_folder):
    single = load(str(write_tiny_folder(tmp_path / "single", seed=3)))
    sharded = load(str(write_tiny_folder(tmp_path / "sharded", shards=3, seed=3)))
    expected = logits_of(random_model(tiny_config(), seed=3))
    assert mx.abs(logits_of(single.model) - expected).max().item() == 0.0
    assert mx.abs(logits_of(sharded.model) - expected).max().item() == 0.0
    assert single.tokenizer.encode("hello world") == sharded.tokenizer.encode("hello world")


def test_float16_dtype_casts_weights(tmp_path, write_tiny_folder):
    loaded = load(str(write_tiny_folder(tmp_path / "m")), mx.float16)
    assert loaded.model.model.embed_tokens.weight.dtype == mx.float16
    assert logits_of(loaded.model).dtype == mx.float16


def test_mlx_lm_4bit_folder_loads_quantized_with_float_cache(tmp_path, write_tiny_folder):
    from mlx_lm import convert
    from mlx_lm import load as mlx_lm_load

    source = write_tiny_folder(tmp_path / "fp")
    quantized = tmp_path / "q4"
    convert(str(source), mlx_path=str(quantized), quantize=True, q_bits=4, q_group_size=32)
    loaded = load(str(quantized))
    assert isinstance(loaded.model.model.layers[0].self_attn.q_proj, nn.QuantizedLinear)
    reference, _ = mlx_lm_load(str(quantized))
    reference.set_dtype(mx.float32)
    expected = reference(PROBE)
    assert relative_error(logits_of(loaded.model), expected) <= FLOAT32_RTOL
    cache = loaded.model.make_cache()
    loaded.model(PROBE, cache)
    assert cache.keys[0].dtype == mx.float32


def _fake_hub(remote: Path, calls: list):
    def snapshot_download(repo_id, allow_patterns=None, **kwargs):
        calls.append((repo_id, tuple(allow_patterns or ())))
        local = remote.parent / "hf-cache" / repo_id.replace("/", "--")
        if not local.exists():
            shutil.copytree(remote, local)
        return str(local)

    return snapshot_download


def test_hub_id_is_downloaded_with_huggingface_hub(tmp_path, write_tiny_folder, monkeypatch):
    calls: list = []
    monkeypatch.setattr(huggingface_hub, "snapshot_download", _fake_hub(write_tiny_folder(tmp_path / "remote"), calls))
    loaded = load("someone/tiny-llama")
    assert calls[0][0] == "someone/tiny-llama"
    assert "*.safetensors" in calls[0][1]
    assert loaded.source.name == "someone--tiny-llama"


def test_vicuna_alias_resolves_to_lmsys_repo(tmp_path, write_tiny_folder, monkeypatch):
    calls: list = []
    monkeypatch.setattr(huggingface_hub, "snapshot_download", _fake_hub(write_tiny_folder(tmp_path / "remote"), calls))
    loaded = load("vicuna-7b")
    assert calls[0][0] == "lmsys/vicuna-7b-v1.3"
    assert loaded.is_vicuna


def test_offline_hub_gives_one_line_error(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(ModelLoadError) as err:
        loading.download("lmsys/vicuna-7b-v1.3")
    message = str(err.value)
    assert "\n" not in message and "lmsys/vicuna-7b-v1.3" in message and "Offline" in message


@pytest.mark.parametrize(
    "name, fragment",
    [
        ("no-such-alias", "not found"),
        ("./missing/folder", "not found"),
        ("missing.gguf", "not found"),
    ],
)
def test_unknown_names_give_clear_errors(name, fragment):
    with pytest.raises(ModelLoadError, match=fragment):
        load(name)


def test_folder_errors_are_clear(tmp_path, write_tiny_folder):
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ModelLoadError, match="no config.json"):
        load(str(empty))

    other = write_tiny_folder(tmp_path / "other")
    (other / "config.json").write_text(json.dumps(tiny_config(model_type="no_such_architecture")))
    with pytest.raises(ModelLoadError, match="not an architecture mlx-lm implements"):
        load(str(other))

    mismatched = write_tiny_folder(tmp_path / "mismatch")
    (mismatched / "config.json").write_text(json.dumps(tiny_config(intermediate_size=96)))
    with pytest.raises(ModelLoadError, match="do not match"):
        load(str(mismatched))

    no_weights = write_tiny_folder(tmp_path / "noweights")
    (no_weights / "model.safetensors").unlink()
    with pytest.raises(ModelLoadError, match="no model"):
        load(str(no_weights))

    not_model = tmp_path / "weights.bin"
    not_model.write_bytes(b"\0" * 16)
    with pytest.raises(ModelLoadError, match="expected a folder or a .gguf"):
        load(str(not_model))
