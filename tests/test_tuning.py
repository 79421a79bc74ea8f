"""The cost model: padding to the cheapest verify length, choosing the fastest tree for a
device's cost curve, explicit values winning, and calibrations stored per device."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from redrafter_mlx.drafting import TreeShape
from redrafter_mlx.tuning import (
    FALLBACK_SHAPE,
    Calibration,
    calibration_path,
    find_calibration,
    plan_drafting,
    read_calibration,
    resolve_shape,
    write_calibration,
)

from .helpers import SHAPE_GRID, cpu_like, gpu_like, synthetic_costs


@given(st.dictionaries(st.integers(1, 40), st.floats(1.0, 500.0), min_size=1), st.integers(1, 40))
def test_padded_length_is_the_cheapest_measured_length_that_fits(verify_ms, count):
    calibration = Calibration("cpu", "float32", verify_ms, 0.0)
    padded = calibration.padded_length(count)
    assert padded >= count
    fits = [p for p in verify_ms if p >= count]
    if fits:
        assert padded in verify_ms and all(verify_ms[padded] <= verify_ms[p] for p in fits)
    else:
        assert padded == count  # nothing measured that long: no padding


def test_a_cheaper_longer_verify_pads_past_the_tree():
    """On a CPU BLAS 16 tokens can cost less than 13 (measured: 116 vs 127 ms)."""
    calibration = Calibration("cpu", "float32", {1: 71.0, 4: 96.0, 12: 131.0, 13: 127.0, 16: 116.0}, 0.0)
    assert calibration.verify_lengths(13)[9:] == [16, 16, 16, 16, 16]
    assert calibration.verify_lengths(13)[1:5] == [1, 4, 4, 4]


def test_best_is_the_largest_expected_speed():
    for calibration in (cpu_like(), gpu_like()):
        best = calibration.best()
        speeds = {s: calibration.expected_tokens_per_s(s) for s in SHAPE_GRID}
        assert speeds[best] == max(speeds.values())


def test_a_gpu_like_cost_curve_chooses_large_trees_and_a_cpu_like_one_small_ones():
    cpu, gpu = cpu_like().best(), gpu_like().best()
    assert gpu.max_packed >= 16, gpu
    assert cpu.max_packed < gpu.max_packed, (cpu, gpu)
    # The same drafter, so the GPU's tree accepts more per step: it trades steps for size.
    assert synthetic_costs()[gpu].tokens_per_step > synthetic_costs()[cpu].tokens_per_step


def test_explicit_values_win_and_the_rest_come_from_the_calibration():
    calibration = gpu_like()
    assert resolve_shape(calibration) == calibration.best()
    at_width_3 = resolve_shape(calibration, beam_width=3)
    assert at_width_3.beam_width == 3 and at_width_3 == calibration.best(beam_width=3)
    assert resolve_shape(calibration, 2, 3, 5) == TreeShape(2, 3, 5)  # not in the grid: taken as given
    assert resolve_shape(None) == FALLBACK_SHAPE
    assert resolve_shape(None, beam_width=2) == TreeShape(2, FALLBACK_SHAPE.beam_length, FALLBACK_SHAPE.search_width)
    assert resolve_shape(None, beam_width=32).search_width == 32  # S is never below W


def test_tree_shape_rejects_an_empty_tree():
    with pytest.raises(ValueError, match="must be >= 1"):
        TreeShape(0, 5, 16)


def test_calibrations_round_trip_per_device_and_never_clobber_other_devices(tmp_path):
    path = tmp_path / "calibration.json"
    cpu, gpu = cpu_like(), gpu_like()
    write_calibration(path, cpu, {"model": "m"})
    write_calibration(path, gpu)
    assert read_calibration(path, "cpu", "float32").to_dict() == cpu.to_dict()
    assert read_calibration(path, "gpu", "float16").to_dict() == gpu.to_dict()
    assert read_calibration(path, "gpu", "float32") is None
    assert json.loads(path.read_text())["model"] == "m"
    path.write_text("{not json")
    assert read_calibration(path, "cpu", "float32") is None  # a broken file is no calibration


def test_the_users_calibration_is_keyed_by_the_drafters_weights(tmp_path, monkeypatch):
    monkeypatch.setenv("REDRAFTER_CACHE_DIR", str(tmp_path / "cache"))
    model, drafter = tmp_path / "model", tmp_path / "drafter"
    model.mkdir(), drafter.mkdir()
    (drafter / "model.safetensors").write_bytes(b"weights v1")
    first = calibration_path(model, drafter)
    assert first.is_relative_to(tmp_path / "cache")
    write_calibration(first, cpu_like())
    assert find_calibration(model, drafter, "cpu", "float32") is not None
    assert plan_drafting(model, drafter, "cpu", "float32").shape == cpu_like().best()
    (drafter / "model.safetensors").write_bytes(b"weights v2, retrained")
    assert calibration_path(model, drafter) != first
    assert find_calibration(model, drafter, "cpu", "float32") is None  # stale: not used
    shipped = gpu_like()
    write_calibration(drafter / "calibration.json", shipped)  # a calibration shipped in the folder
    plan = plan_drafting(model, drafter, "gpu", "float16", beam_length=4)
    assert plan.shape == shipped.best(beam_length=4)
    assert plan.verify_lengths == shipped.verify_lengths(plan.shape.max_packed)


def test_node_budgets_round_trip_and_are_chosen_like_any_shape(tmp_path):
    """A calibration stores budgeted shapes beside the others; auto (None) may choose one,
    0 rules budgets out, and an explicit budget wins."""
    calibration = cpu_like()
    budgeted = TreeShape(4, 5, 4, 6)
    unbudgeted_best = calibration.best()
    cost = calibration.shapes[TreeShape(4, 5, 4)]
    # As many tokens per step as the full W=4 L=5 tree, at a 6-token verify: the fastest.
    calibration.shapes[budgeted] = type(cost)(cost.tokens_per_step, cost.draft_ms, {6: 10})
    path = write_calibration(tmp_path / "calibration.json", calibration)
    stored = read_calibration(path, "cpu", "float32")
    assert stored.shapes == calibration.shapes and budgeted in stored.shapes
    assert stored.best() == budgeted
    assert resolve_shape(stored) == budgeted
    assert resolve_shape(stored, node_budget=0) == unbudgeted_best
    assert resolve_shape(stored, beam_width=2, node_budget=5).node_budget == 5
    assert resolve_shape(stored, beam_width=2).node_budget is None  # the best W=2 shape has none
