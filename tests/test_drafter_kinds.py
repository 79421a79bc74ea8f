"""Every drafter kind through the one loop: at most one host read per step, as ReDrafter's
RNN drafter (tests/test_redrafter.py), stateful kinds included."""

from __future__ import annotations

import mlx.core as mx
import pytest

from redrafter_mlx.decoding.loop import generate_ar, generate_redrafter
from redrafter_mlx.drafting import TreeShape
from redrafter_mlx.drafting.kinds.draft_llm import DraftLLM
from redrafter_mlx.prompting import encode_prompt
from redrafter_mlx.tuning import DraftPlan

from .helpers import (
    PROMPTS,
    collect,
    count_host_reads,
    dflash_config,
    first_layers,
    random_dflash,
    random_eagle,
    random_medusa,
    random_model,
    random_speculator,
    scripted_plan,
    tiny_config,
)

KINDS = {
    "draft-llm": lambda model: DraftLLM(first_layers(model, 20)),
    "dflash": lambda model: random_dflash(dflash_config(576, 9, 3, 49152, (1, 14, 27), 0)),
    "eagle": lambda model: random_eagle(49152, 576, 9, 3),
    "medusa": lambda model: random_medusa(49152, 576, 4),
    "mlp": lambda model: random_speculator(576, 256, 49152, 4),
}


@pytest.mark.parametrize("switching", [False, True])
@pytest.mark.parametrize("kind", KINDS)
def test_at_most_one_host_read_per_step_for_every_kind(embedded, monkeypatch, kind, switching):
    """With one tree, or switching between trees and plain steps (a stateful drafter is then
    told the plain steps' tokens when drafting resumes): greedy AR's tokens either way."""
    drafter = KINDS[kind](embedded.model).for_target(embedded.model, "smollm2")
    ids = encode_prompt(embedded.tokenizer, PROMPTS[1])
    expected, _ = collect(generate_ar(embedded.model, ids, max_tokens=12))
    plan = scripted_plan(TreeShape(3, 4, 3), seed=2) if switching else DraftPlan(TreeShape(3, 4, 3))
    reads = count_host_reads(monkeypatch)
    tokens, stats = collect(generate_redrafter(embedded.model, drafter, ids, plan, max_tokens=12))
    assert stats.steps >= 4
    assert sum(reads.values()) <= stats.steps + 1, reads  # + 1: the first token after prefill
    assert tokens == expected


def test_auto_trees_are_cut_to_what_a_drafter_can_draft_and_explicit_ones_refused(embedded):
    from redrafter_mlx.api import Pipeline
    from redrafter_mlx.errors import InputError
    from redrafter_mlx.options import DecodingOptions

    two_heads = Pipeline(embedded, random_medusa(49152, 576, 2), mx.float32)
    assert two_heads.drafter.max_beam_length == 3
    found = two_heads.plan(DecodingOptions(beam_width=2))
    assert found.shape.beam_length == 3 and found.policy.longest.beam_length == 3
    assert two_heads.plan(DecodingOptions(beam_length=3)).shape.beam_length == 3
    with pytest.raises(InputError, match="drafts at most 2 tokens: beam length at most 3, got 4"):
        two_heads.plan(DecodingOptions(beam_length=4))


@pytest.mark.parametrize("kind", ["redrafter", "eagle", "medusa", "mlp-speculator", "draft-llm"])
def test_the_benchmarks_random_drafters_load_as_their_kind(tmp_path, kind):
    """`profiling.reference_drafter` writes each kind in its reference shape for a model; it
    loads as that kind, and so does the session it opens for a generation."""
    from redrafter_mlx.drafting.registry import load_drafter_folder
    from redrafter_mlx.profiling.reference_drafter import write

    config = tiny_config()
    drafter = load_drafter_folder(write(kind, config, tmp_path / kind), mx.float32)
    assert drafter.kind == kind
    model = random_model(config)
    session = drafter.for_target(model, "tiny").open(model, [1, 2, 3], mx.zeros((3, config["hidden_size"])))
    assert session.kind == kind  # a stateful kind's per-generation session reports its drafter's kind
