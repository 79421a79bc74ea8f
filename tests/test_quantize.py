"""`redrafter quantize`: folders that both redrafter and mlx-lm load, with equal logits."""

from __future__ import annotations

import mlx.core as mx
import mlx.nn as nn
from mlx_lm import load as mlx_lm_load

from redrafter_mlx.drafting.kinds.rnn import load as load_drafter
from redrafter_mlx.drafting.kinds.rnn import save as save_drafter
from redrafter_mlx.formats.loading import load

from .helpers import FLOAT32_RTOL, PROBE, invoke_cli, random_drafter, relative_error


def test_quantized_llm_folder_loads_in_redrafter_and_mlx_lm(tmp_path, write_tiny_folder):
    source = write_tiny_folder(tmp_path / "fp")
    result = invoke_cli("quantize", "-M", source, "--out", tmp_path / "q8", "--bits", "8", "--group-size", "32")
    assert result.exit_code == 0, result.output
    ours = load(str(tmp_path / "q8"))
    assert isinstance(ours.model.model.layers[0].mlp.up_proj, nn.QuantizedLinear)
    reference, _ = mlx_lm_load(str(tmp_path / "q8"))
    got = ours.model.logits(ours.model(PROBE, ours.model.make_cache()))
    assert relative_error(got, reference(PROBE)) <= FLOAT32_RTOL
    float_logits = load(str(source)).model
    float_logits = float_logits.logits(float_logits(PROBE, float_logits.make_cache()))
    assert mx.abs(got - float_logits).max().item() < 0.1 * mx.abs(float_logits).max().item()


def test_quantized_drafter_and_refusal_to_overwrite(tmp_path, write_tiny_folder):
    source = write_tiny_folder(tmp_path / "fp")
    drafter = save_drafter(random_drafter(49152, 64, tied=True), tmp_path / "drafter")
    out = tmp_path / "q-drafter"
    result = invoke_cli(
        "quantize", "-M", source, "-d", drafter, "--drafter-out", out, "--bits", "4", "--group-size", "32"
    )
    assert result.exit_code == 0, result.output
    assert load_drafter(out).config.quantization == {"group_size": 32, "bits": 4}
    again = invoke_cli("quantize", "-M", source, "-d", drafter, "--drafter-out", out)
    assert again.exit_code == 1 and "--force" in again.output
    assert invoke_cli("quantize", "-M", source, "--out", tmp_path / "x", "--bits", "3").exit_code == 1
    twice = invoke_cli("quantize", "-M", source, "-d", out, "--drafter-out", tmp_path / "q-twice")
    assert twice.exit_code == 1 and twice.output.strip() == "error: the drafter is already quantized"
    assert not (tmp_path / "q-twice").exists()
