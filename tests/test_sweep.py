"""`redrafter sweep`: a CSV row per grid cell, readable heatmaps, and resuming."""

from __future__ import annotations

import csv
import json

import matplotlib.image as mpimg
import pytest

from redrafter_mlx.drafting.kinds.rnn import save as save_drafter

from .helpers import assert_one_line_error, invoke_cli, random_drafter


@pytest.fixture
def sweep_args(tmp_path, write_tiny_folder):
    """`redrafter sweep`'s arguments but --out: a tiny model, a random drafter, one prompt."""
    model = write_tiny_folder(tmp_path / "model")
    drafter = save_drafter(random_drafter(49152, 64, tied=True), tmp_path / "drafter")
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text(json.dumps({"prompt": "Tell me a story."}) + "\n")
    return ["sweep", "-M", model, "-d", drafter, "--prompts-file", prompts, "-m", "6"]


def rows(path):
    with path.open() as f:
        return list(csv.DictReader(f))


def test_sweep_writes_grid_csv_and_heatmaps_and_resumes(tmp_path, sweep_args):
    out = tmp_path / "sweep"
    common = [*sweep_args, "--out", out]
    result = invoke_cli(*common, "--beam-widths", "1,2", "--beam-lengths", "2,3")
    assert result.exit_code == 0, result.output
    first = rows(out / "sweep.csv")
    assert {(int(r["beam_width"]), int(r["beam_length"])) for r in first} == {(1, 2), (1, 3), (2, 2), (2, 3)}
    assert all(float(r["tokens_per_s"]) > 0 and 0 < float(r["compression"]) <= 1 for r in first)
    for name in ("speedup.png", "tokens_per_s.png", "tokens_per_step.png"):
        image = mpimg.imread(out / name)
        assert image.ndim == 3 and image.shape[0] > 200 and image.shape[1] > 300
    resumed = invoke_cli(*common, "--beam-widths", "1,2,3", "--beam-lengths", "2,3")
    assert resumed.exit_code == 0, resumed.output
    second = rows(out / "sweep.csv")
    assert second[:4] == first  # finished cells were kept, not re-measured
    assert {(int(r["beam_width"]), int(r["beam_length"])) for r in second[4:]} == {(3, 2), (3, 3)}
    assert invoke_cli(*common, "--beam-widths", "0,1").exit_code == 2


def test_a_budgeted_sweep_verifies_at_most_its_budget_in_every_cell(tmp_path, sweep_args):
    out = tmp_path / "sweep-n3"
    result = invoke_cli(*sweep_args, "--out", out, "--beam-widths", "2,3", "--beam-lengths", "3", "-N", "3")
    assert result.exit_code == 0, result.output
    cells = rows(out / "sweep.csv")
    # compression = verified tokens / (W * L): at most 3 of the W * 3 tokens are verified
    assert {int(r["beam_width"]): float(r["compression"]) <= 3 / (3 * int(r["beam_width"])) for r in cells} == {
        2: True,
        3: True,
    }


def test_a_folder_of_other_settings_is_refused_before_anything_is_measured(tmp_path, sweep_args):
    """Resumed cells are kept, so a sweep resumed with another node budget (or search width,
    model, prompts...) would mix numbers: one line, and the folder is left as it was."""
    out = tmp_path / "sweep"
    common = [*sweep_args, "--out", out]
    assert invoke_cli(*common, "--beam-widths", "2", "--beam-lengths", "3").exit_code == 0
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    refused = invoke_cli(*common, "--beam-widths", "2,3", "--beam-lengths", "3", "-N", "3")
    assert_one_line_error(refused, 1, "node_budget None -> 3")
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert invoke_cli(*common, "--beam-widths", "2,3", "--beam-lengths", "3").exit_code == 0  # same settings resume
