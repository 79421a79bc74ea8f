"""Acceptance replay: tokens/step computed from recorded answers equals real decoding's, and
training's evals use it."""

from __future__ import annotations

import numpy as np

from redrafter_mlx.drafting import TreeShape
from redrafter_mlx.drafting.ngrams import build_ngram_table
from redrafter_mlx.training import Evaluation, Optimisation, TrainConfig, train_drafter
from redrafter_mlx.training.distill import generate_with_hidden
from redrafter_mlx.training.evaluation import decode_eval
from redrafter_mlx.training.kinds.rnn import RNNRecipe
from redrafter_mlx.training.replay import acceptance_table, accepted_lengths, replay

from .helpers import llm_hidden_states, random_model, tiny_config


def test_accepted_lengths_is_the_longest_matching_prefix_of_any_beam():
    rng = np.random.default_rng(0)
    beams = rng.integers(0, 3, size=(200, 3, 5))  # 3 symbols: many partial matches
    targets = rng.integers(0, 3, size=(200, 4))
    lengths = rng.integers(0, 5, size=200)
    got = accepted_lengths(beams, targets, lengths)
    for b in range(200):
        best = 0
        for w in range(3):
            n = 0
            while n < lengths[b] and beams[b, w, 1 + n] == targets[b, n]:
                n += 1
            best = max(best, n)
        assert got[b] == best


def test_a_batch_whose_prefill_is_attended_in_blocks_answers_as_each_prompt_alone():
    """6 prompts of 70-80 tokens: the prefill's scores (6 x 4 heads x 80 x 80) are attended in
    blocks of rows, over one cache holding the batch; every row's answer and hidden states
    are what the prompt gets alone."""
    model = random_model(tiny_config(vocab_size=64), seed=3)
    rng = np.random.default_rng(4)
    jobs = [(f"p{i}", rng.integers(3, 64, size=int(rng.integers(70, 81))).tolist(), 0.0) for i in range(6)]
    together = {r.id: (r.response_ids, h) for r, h in generate_with_hidden(model, jobs, (), max_new_tokens=8)}
    for job in jobs:
        [(alone, hidden)] = generate_with_hidden(model, [job], (), max_new_tokens=8)
        assert together[job[0]][0] == alone.response_ids
        assert np.allclose(together[job[0]][1], hidden, atol=1e-4)


def test_replay_counts_what_decoding_counts(tmp_path):
    config = tiny_config(vocab_size=64)
    model = random_model(config, seed=1)
    rng = np.random.default_rng(2)
    jobs = [(f"p{i}", rng.integers(3, 64, size=int(rng.integers(3, 9))).tolist(), 0.0) for i in range(12)]
    answers = list(generate_with_hidden(model, jobs, eos_ids=(), max_new_tokens=40, batch_size=5))
    # A drafter trained briefly on these answers accepts some drafts but not all.
    records = [r for r, _ in answers]
    cfg = TrainConfig(
        RNNRecipe(predict=3, layers=1, exit_dim=64, tied=False, token_subset=None),
        Optimisation(lr=3e-3, warmup_steps=5, batch_positions=128, steps=12),
        Evaluation(eval_every=12, checkpoint_every=1000, eval_prompts=0, eval_max_tokens=30, tree=TreeShape(3, 4, 3)),
    )
    data = llm_hidden_states(model, records, 3)
    held = [(r.response_ids, h) for r, h in answers]
    result = train_drafter(model, config, data, data, tmp_path, cfg, heldout_answers=held)
    drafter = result.drafter

    prompts = [r.prompt_ids for r in records]
    decoded = decode_eval(model, drafter, prompts, beam_width=3, beam_length=4, max_tokens=30)
    replayed = replay(drafter, model.embedding, held, TreeShape(3, 4, 3), max_tokens=30, lookup=False)
    assert 1.3 < replayed.tokens_per_step < 3.3, (replayed, decoded)
    assert replayed.steps == decoded["steps"]
    assert replayed.tokens_per_step == decoded["tokens_per_step"]
    # Training scores its evals the same way (and picks its best drafter by it).
    assert result.history[-1]["replay_tokens_per_step"] == decoded["tokens_per_step"]

    # With the context lookup (copying from each prompt and answer), as decoding does it.
    looked_up = decode_eval(model, drafter, prompts, beam_width=3, beam_length=4, max_tokens=30, lookup=True)
    replayed = replay(drafter, model.embedding, held, TreeShape(3, 4, 3), max_tokens=30, prompts=prompts)
    assert replayed.tokens_per_step == looked_up["tokens_per_step"] != decoded["tokens_per_step"]

    # With the n-gram table as the lookup's fallback (here from these very answers).
    drafter.ngrams = build_ngram_table([r.response_ids for r in records], config["vocab_size"])
    with_table = decode_eval(model, drafter, prompts, beam_width=3, beam_length=4, max_tokens=30, lookup=True)
    replayed = replay(drafter, model.embedding, held, TreeShape(3, 4, 3), max_tokens=30, prompts=prompts)
    assert replayed.tokens_per_step == with_table["tokens_per_step"] != looked_up["tokens_per_step"]

    # Each position's acceptance, drafted all at once: walked step by step, the same count.
    tokens = steps = 0
    for (answer, hidden), prompt in zip(held, prompts):
        table = acceptance_table(drafter, model.embedding, (answer, hidden), TreeShape(3, 4, 3), prompt=prompt)
        assert len(table) == len(answer) - 1
        position = 0
        while position < min(len(answer), 30) - 1:
            tokens, steps, position = tokens + table[position] + 1, steps + 1, position + table[position] + 1
    assert (tokens, steps) == (replayed.tokens, replayed.steps)
