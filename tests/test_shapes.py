"""Bounded shapes: attention with more than one query meets a few shapes however long the
answer (GPU backends compile a graph per exact shape: MLX's CUDA backend aborts after
hundreds of them), and compiled functions do not trace again once an answer has warmed them."""

from __future__ import annotations

from collections import Counter

import mlx.core as mx
import pytest

from redrafter_mlx.decoding.loop import decode_steps, generate_ar
from redrafter_mlx.drafting import TreeShape, phase
from redrafter_mlx.drafting.kinds.draft_llm import DraftLLM
from redrafter_mlx.drafting.loading import load_drafter_for
from redrafter_mlx.models import llama
from redrafter_mlx.models.adapter import TreeModel
from redrafter_mlx.profiling.attention_shapes import PROMPT as STORY
from redrafter_mlx.profiling.attention_shapes import count_shapes
from redrafter_mlx.prompting import encode_prompt
from redrafter_mlx.runtime import fastmath
from redrafter_mlx.tuning.plan import DraftPlan

from .archs import arch_config, random_mlx_lm_model
from .helpers import FLOAT32_RTOL, TINY_VOCAB, collect, random_model, relative_error, tiny_config


def shapes_of_answers(model, drafter, prompt, shape) -> tuple[int, int, list[int]]:
    """Distinct attention shapes (the GPU's route forced) of a 40-token and of a 240-token
    answer, and the latter."""
    counts = count_shapes(model, drafter, prompt, [40, 240], DraftPlan(shape))
    (short, _), (long, tokens) = counts[40], counts[240]
    assert len(tokens) == 240
    return short, long, tokens


def test_a_longer_answer_adds_at_most_a_shape_per_packed_length(embedded):
    prompt = encode_prompt(embedded.tokenizer, STORY)
    short, long, tokens = shapes_of_answers(
        embedded.model, load_drafter_for(embedded, None), prompt, TreeShape(3, 5, 3)
    )
    assert long - short <= 3, (short, long)
    assert tokens == collect(generate_ar(embedded.model, prompt, max_tokens=240))[0]


def test_an_mlx_lm_architecture_drafted_by_a_draft_llm_meets_few_shapes(embedded):
    """A draft LLM drafts its trees with multi-query attention too (depth by depth)."""
    target = TreeModel(random_mlx_lm_model(arch_config("qwen3", max_position_embeddings=4096), seed=3))
    draft = DraftLLM(TreeModel(random_mlx_lm_model(arch_config("qwen3", num_hidden_layers=2), seed=5)))
    prompt = encode_prompt(embedded.tokenizer, STORY)
    short, long, tokens = shapes_of_answers(target, draft, prompt, TreeShape(2, 4, 2))
    assert long - short <= 3, (short, long)
    assert tokens == collect(generate_ar(target, prompt, max_tokens=240))[0]


@pytest.fixture
def traces(monkeypatch) -> Counter:
    """Calls of what runs only while `mx.compile` traces: the layers' compiled parts around
    attention, the stateless draft phase and the CPU exp kernel."""
    counts: Counter = Counter()

    def counted(name, fn):
        def wrapper(*args, **kwargs):
            counts[name] += 1
            return fn(*args, **kwargs)

        return wrapper

    monkeypatch.setattr(llama.Attention, "project", counted("layer before attention", llama.Attention.project))
    monkeypatch.setattr(llama.MLP, "__call__", counted("layer after attention", llama.MLP.__call__))
    monkeypatch.setattr(phase, "propose", counted("draft phase", phase.propose))
    monkeypatch.setattr(fastmath, "_exp_parts", counted("exp", fastmath._exp_parts))
    return counts


def test_no_compiled_function_traces_again_once_an_answer_warmed_them(embedded, traces):
    drafter, plan = load_drafter_for(embedded, None), DraftPlan(TreeShape(3, 5, 3))
    warm = encode_prompt(embedded.tokenizer, "Name three colours.")
    collect(decode_steps(embedded.model, warm, drafter, plan, max_tokens=64))
    assert traces["draft phase"], "the counters no longer see what traces"  # a new plan's phase traces
    steps = decode_steps(embedded.model, encode_prompt(embedded.tokenizer, STORY), drafter, plan, max_tokens=200)
    next(steps)  # the prompt runs (uncompiled: a prompt's length would trace the layers again)
    traces.clear()
    tokens = sum(len(step.tokens) for step in steps)
    assert tokens > 150 and not traces, traces


def test_a_new_block_shape_traces_each_layer_part_once_for_every_layer(traces):
    """A fresh process's first steps meet a few block shapes; each must trace the compiled
    parts around attention once, not once per layer, and compute what the uncompiled layers do."""
    model = random_model(tiny_config(num_hidden_layers=4, vocab_size=TINY_VOCAB), seed=3)
    tokens = mx.array([[1, 4, 2]])  # within the vocabulary: MLX does not check a gather's bounds
    plain = model(tokens, model.make_cache())  # a prompt: uncompiled layers (each counted)
    traces.clear()
    tree = model(tokens, model.make_cache(), mask=mx.tril(mx.ones((3, 3), dtype=mx.bool_)))  # compiled
    assert traces["layer before attention"] == traces["layer after attention"] == 1, traces
    assert relative_error(tree, plain) < FLOAT32_RTOL
    model((tokens + 1) % TINY_VOCAB, model.make_cache(), mask=mx.tril(mx.ones((3, 3), dtype=mx.bool_)))
    assert traces["layer before attention"] == 1  # the same shape: no trace
