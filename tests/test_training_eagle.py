"""Training EAGLE (`training/eagle.py`) on the other kinds' data and loop: the loss against an
independent restatement (upstream's forward in torch, SmoothL1 + cross-entropy in numpy, the
pairing from the raw records), learning, the saved folder (loaded as `Eagle`, exact in
decoding, accepting drafts), resume, and `redrafter train --kind eagle`. Tiny random Llamas,
as in test_training.py and test_training_kinds.py."""

from __future__ import annotations

import json

import mlx.core as mx
import numpy as np
import pytest
from mlx.utils import tree_flatten
from scipy.special import logsumexp

from redrafter_mlx.drafting.kinds.eagle import Eagle
from redrafter_mlx.drafting.registry import load_drafter_folder
from redrafter_mlx.errors import InputError
from redrafter_mlx.training import train_drafter
from redrafter_mlx.training.distill_file import DistillRecord
from redrafter_mlx.training.kinds.eagle import eagle_loss, eagle_outputs, record_spans, sequence_batch, training_batch
from redrafter_mlx.training.start import make_drafter

from .helpers import (
    TRAINING_VOCAB,
    assert_refused,
    assert_resume_matches,
    greedy_records,
    greedy_tokens_per_step,
    llm_hidden_states,
    pattern_records,
    randomised,
    torch_eagle,
    train_cli,
    train_config,
    training_llm,
)

torch = pytest.importorskip("torch")


def eagle_cfg(**kw):
    return train_config(**({"kind": "eagle", "seq": 24, "batch_positions": 96, "lr": 3e-3} | kw))


def perturbed(eagle: Eagle, scale: float = 0.05) -> Eagle:
    """Every trainable weight moved off its init (norms off 1, fc's bias off 0), the outputs
    still near the features (both SmoothL1 branches are hit)."""
    mx.random.seed(5)
    moved = [(k, v + scale * mx.random.normal(v.shape)) for k, v in tree_flatten(eagle.trainable_parameters())]
    eagle.load_weights(moved, strict=False)
    return eagle


def reference_loss(
    eagle: Eagle,
    model,
    records: list[DistillRecord],
    shift: int = 0,
    soft: float = 0.0,
    reg_weight: float = 1.0,
    cls_weight: float = 0.1,
) -> float:
    """The objective restated from the raw records: the LLM's final-norm states h of prompt +
    answer by a plain forward; per answer y_0..y_{R-1} (p prompt tokens) the pairs (y_{j+shift},
    h_{p-1+j}) read by upstream's EAGLE forward in torch; targets h_{p+j} and y_{j+1+shift}
    (softmax(head(h_{p+j})) with `soft`); SmoothL1 (beta 1, mean over the feature) and
    cross-entropy, each averaged over all positions with a target. shift=1 is the off-by-one
    pairing (feature t with token t+2)."""
    state = {k: torch.tensor(np.array(v)) for k, v in tree_flatten(eagle.parameters())}
    head = np.array(model.lm_head.weight, np.float64)
    regs, ces = [], []
    for r in records:
        p, n = len(r.prompt_ids), len(r.response_ids)
        h = np.array(model(mx.array([r.prompt_ids + r.response_ids]))[0], np.float64)[p - 1 :]  # h_{p-1}..
        pairs = n - shift
        out = torch_eagle(state, eagle.config, r.response_ids[shift:], h[:pairs].astype(np.float32))
        for j in range(pairs - 1):
            diff = np.abs(out[j] - h[j + 1])
            regs.append(np.where(diff < 1, 0.5 * diff**2, diff - 0.5).mean())
            logits = out[j].astype(np.float64) @ head.T
            logp = logits - logsumexp(logits)
            teacher = h[j + 1] @ head.T
            probs = np.exp(teacher - logsumexp(teacher))
            ces.append((1 - soft) * -logp[r.response_ids[j + 1 + shift]] + soft * -(probs * logp).sum())
    return reg_weight * np.mean(regs) + cls_weight * np.mean(ces)


@pytest.mark.parametrize(
    "lengths, soft, weights",
    [
        ((3, 1), 0.0, (1.0, 0.1)),  # 2 positions with a target; the second answer all padding
        ((3, 2), 0.0, (0.5, 2.0)),
        ((3, 2), 1.0, (1.0, 0.1)),  # upstream's soft target: the LLM's distribution at the next feature
    ],
)
def test_loss_is_smooth_l1_plus_cross_entropy_on_the_next_pair(lengths, soft, weights):
    """The batch of two answers (right-padded, the last pair of each without a target) gives
    the restated objective; the off-by-one pairing (feature t with token t+2) does not."""
    model, config = training_llm()
    eagle = perturbed(make_drafter(eagle_cfg().recipe, config, None, model=model))
    rng = np.random.default_rng(3)
    records = [
        DistillRecord(
            f"r{i}",
            [int(x) for x in rng.integers(0, TRAINING_VOCAB, 4)],
            [int(x) for x in rng.permutation(TRAINING_VOCAB)[:n]],
            0.0,
            "length",
        )
        for i, n in enumerate(lengths)
    ]
    data = llm_hidden_states(model, records, 1)
    spans = np.array([[0, lengths[0]], [lengths[0], sum(lengths)]])
    assert record_spans(data[1]).tolist() == [s for s in spans.tolist() if s[1] - s[0] >= 2]
    batch = sequence_batch(data, spans)
    assert batch[2].shape[0] == sum(lengths) - 2
    diff = np.abs(np.array(eagle_outputs(eagle, *batch[:3]) - batch[3]))
    assert (diff < 1).mean() > 0.2 and (diff >= 1).mean() > 0.05  # SmoothL1's two branches
    loss, (reg, cls) = eagle_loss(eagle, model, *batch, *weights, soft=soft)
    with_targets = [r for r in records if len(r.response_ids) >= 2]
    expected = reference_loss(eagle, model, with_targets, 0, soft, *weights)
    np.testing.assert_allclose(loss.item(), expected, rtol=2e-5)
    np.testing.assert_allclose(loss.item(), weights[0] * reg.item() + weights[1] * cls.item(), rtol=1e-6)
    off_by_one = reference_loss(eagle, model, with_targets, 1, soft, *weights)
    assert abs(off_by_one - expected) > 1e-2 * expected, (off_by_one, expected)


def test_batches_crop_long_answers_and_noise_the_inputs_only():
    """Answers longer than eagle_seq are cut at a random start (the crop's last pair keeps its
    target when the answer goes on); the input features get U(-w/2, w/2), the targets none;
    the same micro-batch number gives the same batch (resume)."""
    model, config = training_llm()
    data = llm_hidden_states(model, pattern_records(6, length=20), 1)
    spans = record_spans(data[1])
    cfg = eagle_cfg(seq=8, noise=0.5)
    tokens, features, index, target_features, target_tokens = training_batch(data, spans, 8, 0.5, cfg.seed, 3)
    assert tokens.shape == (6, 8) and index.shape[0] >= 6 * 7
    flat = np.array(features).reshape(-1, features.shape[-1])
    starts = [int(np.flatnonzero((data[1][s:e, 0] == np.array(tokens)[b, 0]))[0]) + s for b, (s, e) in enumerate(spans)]
    clean = np.concatenate([data[0][s : s + 8] for s in starts])
    noise = flat - clean
    assert np.abs(noise).max() <= 0.25 and np.abs(noise).max() > 0.2 and abs(noise.mean()) < 0.02
    rows = np.array([s + j for s in starts for j in range(8)])[np.array(index)]
    np.testing.assert_array_equal(np.array(target_features), data[0][rows + 1])  # targets: no noise
    np.testing.assert_array_equal(np.array(target_tokens), data[1][rows, 1])
    again = training_batch(data, spans, 8, 0.5, cfg.seed, 3)
    for a, b in zip(again, (tokens, features, index, target_features, target_tokens)):
        np.testing.assert_array_equal(np.array(a), np.array(b))
    assert not np.array_equal(np.array(training_batch(data, spans, 8, 0.5, cfg.seed, 4)[1]), np.array(features))


def test_eagle_learns_and_its_folder_loads_exact_and_accepting(tmp_path):
    """40 steps on the tiny LLM's own greedy answers cut the loss to a fraction of step 0's;
    the folder loads as an `Eagle` (embedding = the LLM's, frozen; `stage_prompt: false`),
    greedy decoding with it gives the LLM's own answers, and it accepts more drafts per step
    on those answers' prompts than the untrained EAGLE."""
    model, config = training_llm()
    train_recs, held_recs = greedy_records(model, 40, seed=0), greedy_records(model, 8, seed=1)
    train, held = llm_hidden_states(model, train_recs, 1), llm_hidden_states(model, held_recs, 1)
    cfg = eagle_cfg(steps=40, eval_every=40, save_dtype="float16")
    out = tmp_path / "eagle"
    result = train_drafter(model, config, train, held, tmp_path / "work", cfg, out_dir=out)
    losses = json.loads((tmp_path / "work" / "checkpoint" / "train_state.json").read_text())["losses"]
    assert np.mean(losses[-5:]) < 0.5 * np.mean(losses[:5]), losses
    assert result.best["top1"][0] > 0.5, result.best

    loaded = load_drafter_folder(out, mx.float32)
    assert type(loaded) is Eagle and loaded.kind == "eagle" and loaded.config == cfg.recipe.drafter_config(config)
    assert loaded.config["num_hidden_layers"] == 1 and loaded.stage_prompt is False
    np.testing.assert_allclose(
        np.array(loaded.embed_tokens.weight), np.array(model.embedding.weight), rtol=1e-3, atol=1e-3
    )  # stored float16
    assert "embed_tokens.weight" not in dict(tree_flatten(loaded.trainable_parameters()))
    batch = sequence_batch(held, record_spans(held[1])[:4])
    np.testing.assert_allclose(
        eagle_loss(loaded, model, *batch)[0].item(), eagle_loss(result.drafter, model, *batch)[0].item(), rtol=1e-2
    )  # stored float16

    untrained = greedy_tokens_per_step(
        model, make_drafter(cfg.recipe, config, None, seed=3, model=model), train_recs[:10]
    )
    trained = greedy_tokens_per_step(model, loaded, train_recs[:10])
    assert trained > 2.0 and trained > untrained + 0.8, (trained, untrained)
    loaded.stage_prompt = True  # upstream's inference: still exact
    assert greedy_tokens_per_step(model, loaded, train_recs[:10]) > 1.0


def test_session_without_the_prompt_starts_as_training_sequences_do(tmp_path):
    """`stage_prompt: false`: the first draft comes from EAGLE reading the single pair
    (first answer token, last prompt feature) at position 0, the first position of a training
    sequence; with it true, the prompt's pairs come first (upstream)."""
    model, config = training_llm()
    eagle = randomised(make_drafter(eagle_cfg().recipe, config, None, model=model))
    prompt, first = [5, 9, 11, 3], 17
    hidden = model(mx.array([prompt]))[0]
    alone = eagle(mx.array([[first]]), hidden[None, -1:], None, 0, "causal")[0, -1]
    paired = eagle(mx.array([prompt[1:] + [first]]), hidden[None], None, 0, "causal")[0, -1]
    for stage, want in ((False, alone), (True, paired)):
        eagle.stage_prompt = stage
        session = eagle.open(model, prompt, hidden)
        session.stage(mx.array([first], mx.int32), hidden[-1:], mx.array(1))
        # float32 logits of up to ~30: the same sums in another order differ by about 1e-6 of each
        np.testing.assert_allclose(np.array(session.last), np.array(want), rtol=1e-5, atol=1e-5)
    assert np.abs(np.array(alone) - np.array(paired)).max() > 0.1  # the two starts differ: the check can fail


def test_eagle_resumes_from_its_checkpoint_exactly(tmp_path, monkeypatch):
    """Interrupted after its step-4 checkpoint and resumed, a run ends with the weights of an
    uninterrupted one (same crops, same noise); the checkpoint holds an EAGLE folder; another
    kind cannot resume it."""
    model, config = training_llm()
    data = llm_hidden_states(model, pattern_records(20, length=30), 1)
    cfg = eagle_cfg(steps=8, checkpoint_every=4, seq=16, batch_positions=64)
    folder = assert_resume_matches(monkeypatch, model, config, data, tmp_path, cfg)
    assert type(load_drafter_folder(folder, mx.float32)) is Eagle
    with pytest.raises(InputError, match="holds a eagle drafter; the run trains kind medusa"):
        train_drafter(model, config, data, data, tmp_path / "b", train_config(kind="medusa", steps=10), resume=True)


def test_cli_trains_an_eagle_and_refuses_other_kinds_flags(tmp_path, write_tiny_folder):
    """`redrafter train --kind eagle`: its flags reach the config, other kinds' architecture
    flags (and --predict) are one usage line, its flags with another kind too; --resume takes
    the checkpoint's kind."""
    run = train_cli(tmp_path, write_tiny_folder(tmp_path / "model"))
    assert_refused(
        run,
        tmp_path,
        [
            (["--kind", "eagle", "--token-subset", "128"], "--token-subset is for --kind redrafter"),
            (["--kind", "eagle", "--layers", "2"], "--layers is for --kind redrafter, medusa or dflash, not eagle"),
            (
                ["--kind", "eagle", "--predict", "2"],
                "--predict is for --kind redrafter, medusa or mlp-speculator, not eagle",
            ),
            (["--kind", "medusa", "--eagle-seq", "8"], "--eagle-seq is for --kind eagle, not medusa"),
            (["--eagle-noise", "0.1"], "--eagle-noise is for --kind eagle, not redrafter"),
        ],
    )

    first = run(
        "eagle",
        "--kind",
        "eagle",
        "--eagle-layers",
        "2",
        "--eagle-seq",
        "8",
        "--eagle-noise",
        "0.1",
        "--eagle-cls-weight",
        "0.5",
        "--steps",
        "2",
        "--eval-every",
        "2",
    )
    assert first.exit_code == 0, first.output
    eagle = load_drafter_folder(tmp_path / "eagle", mx.float32)
    assert type(eagle) is Eagle and eagle.config["num_hidden_layers"] == 2 and not eagle.stage_prompt
    assert not (tmp_path / "eagle" / "ngrams.safetensors").exists()
    state = json.loads((tmp_path / "eagle" / "training" / "checkpoint" / "train_state.json").read_text())
    saved = state["config"]
    assert (saved["recipe"]["seq"], saved["recipe"]["noise"], saved["recipe"]["cls_weight"]) == (8, 0.1, 0.5)
    resumed = run("eagle", "--steps", "4", "--eval-every", "2", "--eagle-seq", "8", "--resume")  # the checkpoint's kind
    assert resumed.exit_code == 0, resumed.output
    state = json.loads((tmp_path / "eagle" / "training" / "checkpoint" / "train_state.json").read_text())
    assert state["step"] == 4 and state["config"]["kind"] == "eagle"
