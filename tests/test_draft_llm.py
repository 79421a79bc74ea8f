"""A draft LLM through the tree verifier: its tree-masked beam search against plain forwards,
greedy identity, exact sampling, and the CLI's --draft-model / --drafter paths."""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest
from mlx_lm.sample_utils import make_sampler

from redrafter_mlx.decoding.loop import generate_ar, generate_redrafter
from redrafter_mlx.drafting import TreeShape
from redrafter_mlx.drafting.beam_search import beam_search, top_k_log_probs
from redrafter_mlx.drafting.kinds.draft_llm import DraftLLM
from redrafter_mlx.drafting.registry import load_drafter_folder
from redrafter_mlx.errors import InputError
from redrafter_mlx.models.llama import Model
from redrafter_mlx.prompting import encode_prompt
from redrafter_mlx.tuning import DraftPlan

from .helpers import (
    PROMPTS,
    SEQ_LEN,
    TINY,
    TINY_PROMPT,
    TINY_VOCAB,
    assert_one_line_error,
    chi_square_p_value,
    collect,
    exact_sequence_probabilities,
    first_layers,
    random_model,
    run_redrafter,
    sample_counts,
    tiny_config,
)


def plain_log_probs(model: Model, tokens: list[int], top_k: int) -> np.ndarray:
    """Top-k-warped log-probs (V,) of the token after `tokens`, from one causal forward."""
    logits = model.logits(model(mx.array([tokens]), model.make_cache())[0, -1])
    values, ids = top_k_log_probs(logits, top_k)
    out = np.full(logits.shape[-1], -np.inf, dtype=np.float32)
    out[np.array(ids)] = np.array(values)
    return out


@pytest.mark.parametrize("width, length, search", [(1, 4, None), (3, 4, None), (2, 3, 5)])
def test_beam_scores_equal_plain_forwards_after_a_partly_kept_block(width, length, search):
    """Stage a 4-token block of which 2 are kept, then draft: every beam's score must be the
    sum of its tokens' log-probs computed by plain forwards over the text it continues."""
    draft = random_model(tiny_config(vocab_size=50, hidden_size=32, intermediate_size=64), seed=3)
    text, block, kept = [5, 9, 2, 7, 1, 33], [4, 8, 11, 13], 2
    session = DraftLLM(draft).open(None, text, mx.zeros((1, 32)))
    session.commit(0)
    session.stage(mx.array(block, mx.int32), mx.zeros((4, 32)), mx.array(kept))
    beams, scores = beam_search(
        session, None, mx.zeros((32,)), mx.array(block[kept - 1]), width, length, draft_top_k=6, search_width=search
    )
    history = text + block[:kept]
    for beam, score in zip(np.array(beams).tolist(), np.array(scores).tolist()):
        assert beam[0] == block[kept - 1]
        want = sum(plain_log_probs(draft, history + beam[1 : d + 1], 6)[beam[d + 1]] for d in range(length - 1))
        assert score == pytest.approx(want, abs=1e-4)


def test_drafting_with_the_model_itself_accepts_every_token(embedded):
    """W = 1 with the target as its own draft: every step must accept the whole beam, which
    holds only if the draft cache follows the accepted text step after step."""
    ids = encode_prompt(embedded.tokenizer, PROMPTS[0])
    expected, _ = collect(generate_ar(embedded.model, ids, max_tokens=24))
    tokens, stats = collect(
        generate_redrafter(
            embedded.model, DraftLLM(embedded.model), ids, DraftPlan(TreeShape(1, 4, 1), lookup=False), max_tokens=24
        )
    )
    assert tokens == expected
    assert stats.accepted_per_step == [4] * (len(stats.accepted_per_step))


@pytest.mark.parametrize("width, length, lookup", [(1, 5, False), (3, 4, True), (4, 3, False)])
def test_greedy_draft_llm_matches_autoregressive(embedded, embedded_runs, width, length, lookup):
    draft = DraftLLM(first_layers(embedded.model, 20)).for_target(embedded.model, "smollm2")
    accepted = []
    for ids, expected, reason in embedded_runs:
        tokens, stats = collect(
            generate_redrafter(
                embedded.model,
                draft,
                ids,
                DraftPlan(TreeShape(width, length, width), lookup=lookup),
                max_tokens=20,
                eos_ids=embedded.tokenizer.eos_token_ids,
            )
        )
        assert tokens == expected and stats.finish_reason == reason
        accepted += stats.accepted_per_step
    assert max(accepted) > 1  # the cut model's drafts are accepted


def test_a_draft_model_of_another_vocabulary_is_refused(embedded):
    other = random_model(tiny_config(vocab_size=1000))
    with pytest.raises(InputError, match="vocab 1000, but smollm2 has vocab 49152"):
        DraftLLM(other, "tiny").for_target(embedded.model, "smollm2")


@pytest.mark.slow
@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_sampled_draft_llm_has_the_llm_distribution(temperature):
    probs = exact_sequence_probabilities(temperature)
    draft = DraftLLM(TINY)  # drafting with the model itself: most drafts are accepted
    n = 1500
    mx.random.seed(4321)
    counts, accepted_drafts = sample_counts(
        lambda: generate_redrafter(
            TINY,
            draft,
            TINY_PROMPT,
            DraftPlan(TreeShape(2, 3, 2), lookup=False),
            max_tokens=SEQ_LEN,
            sampler=make_sampler(temp=temperature),
        ),
        n,
    )
    assert sum(counts.values()) == n and TINY_VOCAB == 5
    assert accepted_drafts > n // 4
    assert chi_square_p_value(counts, probs, n) > 1e-3
    assert chi_square_p_value(counts, exact_sequence_probabilities(temperature * 2), n) < 1e-6


def test_cli_drafts_with_a_draft_model_folder(tmp_path, write_tiny_folder):
    """--draft-model and --drafter <model folder> both draft with the small LLM, and give the
    plain decoder's answer; a vocabulary mismatch is one line."""
    target = write_tiny_folder(tmp_path / "target")
    small = write_tiny_folder(tmp_path / "small", tiny_config(hidden_size=32, intermediate_size=64), seed=1)
    assert isinstance(load_drafter_folder(small, mx.float32), DraftLLM)
    base = ["generate", "-M", str(target), "-p", "Hello there", "-m", "12", "--json"]
    plain = run_redrafter(*base, "--mode", "ar")
    assert plain.returncode == 0, plain.stderr
    for how in (["--draft-model", str(small)], ["--drafter", str(small)]):
        result = run_redrafter(*base, *how, "-w", "2", "-l", "3")
        assert result.returncode == 0, result.stderr
        assert result.stdout.split('"text"')[1].split('",')[0] == plain.stdout.split('"text"')[1].split('",')[0]
    other = write_tiny_folder(tmp_path / "other", tiny_config(vocab_size=1000))
    assert_one_line_error(run_redrafter(*base, "--draft-model", str(other)), 1, "must share the target's tokenizer")
    assert_one_line_error(run_redrafter(*base, "--draft-model", str(small), "--drafter", str(small)), 2, "not both")


def test_the_api_loads_a_draft_model(tmp_path, write_tiny_folder):
    from redrafter_mlx import generate, load

    target = write_tiny_folder(tmp_path / "target")
    small = write_tiny_folder(tmp_path / "small", tiny_config(hidden_size=32, intermediate_size=64), seed=1)
    pipeline = load(str(target), draft_model=str(small), dtype="float32")
    assert pipeline.drafter.kind == "draft-llm"
    plain = generate(load(str(target), drafter=False, dtype="float32"), "Hello there", max_tokens=10)
    assert generate(pipeline, "Hello there", max_tokens=10, beam_width=2, beam_length=3) == plain
    with pytest.raises(InputError, match="not both"):
        load(str(target), drafter=str(small), draft_model=str(small))
