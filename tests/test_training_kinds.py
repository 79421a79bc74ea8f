"""Training the other stateless drafter kinds (IBM's MLP speculator, Medusa) on the RNN's data,
loss and loop: the loss through the drafting seam against one computed by hand in numpy from
upstream's formulas, learning, the saved folder (loaded by its kind, drafting in decoding),
resume, and `redrafter train --kind`. Tiny random Llamas, as in test_training.py."""

from __future__ import annotations

import json
import math

import mlx.core as mx
import numpy as np
import pytest
from mlx.utils import tree_flatten
from scipy.special import erf, logsumexp

from redrafter_mlx.drafting.kinds.medusa import Medusa
from redrafter_mlx.drafting.kinds.mlp_speculator import MLPSpeculator
from redrafter_mlx.drafting.registry import load_drafter_folder
from redrafter_mlx.errors import InputError
from redrafter_mlx.training import train_drafter
from redrafter_mlx.training.dataset import later_states
from redrafter_mlx.training.distill_file import read_distill_file
from redrafter_mlx.training.loss import (
    drafter_loss,
    head_index_map,
    loss_and_grad,
    unrolled_logits,
)
from redrafter_mlx.training.start import make_drafter

from .helpers import (
    assert_refused,
    assert_resume_matches,
    greedy_records,
    greedy_tokens_per_step,
    llm_hidden_states,
    pattern_records,
    randomised,
    train_cli,
    train_config,
    training_llm,
)

CLASSES = {"mlp-speculator": MLPSpeculator, "medusa": Medusa}
LR = {"mlp-speculator": 3e-3, "medusa": 1e-2}  # Medusa's heads only see h_t: a faster rate in 40 steps


def reference_logits(drafter, hidden: np.ndarray, tokens: np.ndarray, predict: int) -> list[np.ndarray]:
    """Depth j's logits (M, V), j = 1..predict, in numpy from the weights: the MLP
    speculator's stage j - 1 reads token column j - 1 (fms-extras' forward); Medusa's head
    j - 1 reads h_t alone (FasterDecoding's)."""
    w = {k: np.array(v, np.float64) for k, v in tree_flatten(drafter.parameters())}
    h = hidden.astype(np.float64)
    out = []
    if isinstance(drafter, Medusa):
        for j in range(predict):
            x = h
            for i in range(drafter.config.num_layers):
                z = x @ w[f"heads.{j}.{i}.linear.weight"].T + w[f"heads.{j}.{i}.linear.bias"]
                x = x + z / (1 + np.exp(-z))
            out.append(x @ w[f"heads.{j}.{drafter.config.num_layers}.weight"].T)
        return out
    c = drafter.config
    state_weight = 0.5 ** (0.5 / c.n_predict)
    emb_weight = math.sqrt((1 - state_weight**2) * c.inner_dim / 2)
    state = h
    if c.scale_input:
        state = h / np.sqrt((h**2).mean(-1, keepdims=True) + 1e-6) / math.sqrt(2)
    for j in range(predict):
        stage = 0 if c.tie_weights else j
        proj = min(j, 1) if c.tie_weights else j
        z = state @ w[f"proj.{proj}.weight"].T + w[f"emb.{stage}.weight"][tokens[:, j]] * emb_weight / state_weight
        z = z / np.sqrt((z**2).mean(-1, keepdims=True) + 1e-6) * w[f"ln.{stage}.weight"] + w[f"ln.{stage}.bias"]
        state = 0.5 * z * (1 + erf(z / math.sqrt(2)))
        out.append(state @ w[f"head.{stage}.weight"].T)
    return out


def positions(model, predict: int) -> tuple[np.ndarray, np.ndarray]:
    """A few records' training positions: token windows whose columns all differ (a depth
    reading or scoring the wrong column changes the loss) and end in -1 past each answer."""
    recs = pattern_records(3, length=6, seed=4)
    hidden, windows = llm_hidden_states(model, recs, predict)
    assert (windows[:, -1] == -1).any() and (windows[:, 1:] >= 0).any()
    return hidden, windows


@pytest.mark.parametrize(
    "kind, extra, predict",
    [
        ("mlp-speculator", {}, 1),
        ("mlp-speculator", {}, 3),
        ("mlp-speculator", {"tie_weights": True, "scale_input": True, "inner_dim": 48}, 3),
        ("medusa", {}, 1),
        ("medusa", {"layers": 2}, 3),
    ],
)
def test_loss_is_each_depths_cross_entropy_on_the_next_token(kind, extra, predict):
    """Depth j (1-based) reads window column j - 1 and is scored on column j: the loss is
    the sum over depths of the mean CE of the valid (>= 0) targets, the drafter's logits
    recomputed by hand."""
    model, config = training_llm()
    drafter = randomised(make_drafter(train_config(kind=kind, predict=predict, **extra).recipe, config, None))
    hidden, windows = positions(model, predict)
    loss, counts = drafter_loss(
        drafter, model.embedding, mx.array(hidden), mx.array(windows), head_index_map(drafter), predict
    )
    logits = reference_logits(drafter, hidden, np.maximum(windows, 0), predict)
    expected = 0.0
    for j, lg in enumerate(logits):
        target = windows[:, j + 1]
        valid = target >= 0
        ce = logsumexp(lg, axis=-1) - lg[np.arange(len(lg)), np.maximum(target, 0)]
        expected += ce[valid].mean()
        assert counts[j].item() == valid.sum()
    np.testing.assert_allclose(loss.item(), expected, rtol=1e-4)


@pytest.mark.parametrize("kind", CLASSES)
def test_soft_targets_are_the_llms_whole_distribution(kind):
    """Soft weight 1: per depth j, the mean over present targets of -sum_k p_LLM(k | y_{<=t+j})
    log q_j(k), over the full vocabulary (these kinds' heads score all of it), p from the
    LLM's own logits of the later states."""
    model, config = training_llm()
    predict = 2
    drafter = randomised(make_drafter(train_config(kind=kind, predict=predict).recipe, config, None))
    hidden, windows = positions(model, predict)
    later = later_states(hidden, np.arange(len(hidden)), predict)
    loss, _ = loss_and_grad(model, drafter, predict, soft=1.0)(
        drafter, mx.array(hidden), mx.array(windows), mx.array(later)
    )
    expected = 0.0
    for j, lg in enumerate(reference_logits(drafter, hidden, np.maximum(windows, 0), predict)):
        llm = np.array(model.logits(mx.array(later[:, j])), np.float64)
        p = np.exp(llm - logsumexp(llm, axis=-1, keepdims=True))
        ce = -(p * (lg - logsumexp(lg, axis=-1, keepdims=True))).sum(-1)
        expected += ce[windows[:, j + 1] >= 0].mean()
    np.testing.assert_allclose(loss.item(), expected, rtol=1e-4)


@pytest.mark.parametrize("kind", CLASSES)
def test_kind_learns_and_its_folder_loads_and_drafts(tmp_path, kind):
    """Trained 40 steps on the LLM's own greedy answers, the loss falls to a fraction of step
    0's; the folder written loads by its config's model_type and, in greedy decoding of
    held-out prompts, gives the LLM's output while accepting drafts (an untrained drafter's
    are rejected)."""
    model, config = training_llm()
    train_recs, held_recs = greedy_records(model, 40, seed=0), greedy_records(model, 8, seed=1)
    train, held = llm_hidden_states(model, train_recs, 3), llm_hidden_states(model, held_recs, 3)
    cfg = train_config(kind=kind, steps=40, lr=LR[kind], eval_every=40, save_dtype="float16")
    out = tmp_path / "drafter"
    result = train_drafter(model, config, train, held, tmp_path / "work", cfg, out_dir=out)
    losses = json.loads((tmp_path / "work" / "checkpoint" / "train_state.json").read_text())["losses"]
    assert np.mean(losses[-5:]) < 0.35 * np.mean(losses[:5]), losses

    loaded = load_drafter_folder(out, mx.float32)
    assert type(loaded) is CLASSES[kind] and loaded.kind == kind
    assert loaded.config == cfg.recipe.drafter_config(config)
    h, w = mx.array(held[0][:8]), mx.array(held[1][:8])
    for got, want in zip(
        unrolled_logits(loaded, model.embedding, h, w, 3), unrolled_logits(result.drafter, model.embedding, h, w, 3)
    ):
        np.testing.assert_allclose(np.array(got), np.array(want), atol=5e-2)  # stored as float16

    untrained = greedy_tokens_per_step(model, make_drafter(cfg.recipe, config, None, seed=3, model=model), held_recs)
    trained = greedy_tokens_per_step(model, loaded, held_recs)
    assert trained > 1.4 and trained > untrained + 0.3, (trained, untrained)


@pytest.mark.parametrize("kind", CLASSES)
def test_kind_resumes_from_its_checkpoint_exactly(tmp_path, monkeypatch, kind):
    """Interrupted after its step-4 checkpoint and resumed, a run ends with the weights of an
    uninterrupted one; the checkpoint holds the kind's folder."""
    model, config = training_llm()
    data = llm_hidden_states(model, pattern_records(20), 3)
    cfg = train_config(kind=kind, steps=8, batch_positions=64, checkpoint_every=4)
    folder = assert_resume_matches(monkeypatch, model, config, data, tmp_path, cfg)
    assert type(load_drafter_folder(folder, mx.float32)) is CLASSES[kind]
    other = "medusa" if kind == "mlp-speculator" else "mlp-speculator"
    with pytest.raises(InputError, match=f"holds a {kind} drafter; the run trains kind {other}"):
        train_drafter(model, config, data, data, tmp_path / "b", train_config(kind=other, steps=10), resume=True)


def test_init_from_needs_the_same_kind_and_enough_depths(tmp_path):
    """Fine-tuning starts at the folder's weights; a folder of another kind, or with fewer
    stages than the run's depths, is refused in one line."""
    model, config = training_llm()
    data = llm_hidden_states(model, pattern_records(12), 2)
    first = tmp_path / "first"
    train_drafter(
        model,
        config,
        data,
        data,
        tmp_path / "a",
        train_config(kind="mlp-speculator", predict=2, steps=2),
        out_dir=first,
    )
    again = train_drafter(
        model,
        config,
        data,
        data,
        tmp_path / "b",
        train_config(kind="mlp-speculator", predict=2, steps=2, lr=0.0, inner_dim=16),
        init_from=first,
    )
    before = dict(tree_flatten(load_drafter_folder(first, mx.float32).parameters()))
    for k, v in tree_flatten(again.drafter.parameters()):
        np.testing.assert_array_equal(np.array(v), np.array(before[k]), err_msg=k)
    with pytest.raises(InputError, match="holds a mlp-speculator drafter; the run trains kind medusa"):
        train_drafter(
            model, config, data, data, tmp_path / "c", train_config(kind="medusa", predict=2), init_from=first
        )
    with pytest.raises(InputError, match="drafts at most 2 tokens, but the run predicts 3"):
        train_drafter(
            model,
            config,
            *[llm_hidden_states(model, pattern_records(12), 3)] * 2,
            tmp_path / "d",
            train_config(kind="mlp-speculator", predict=3),
            init_from=first,
        )


def test_cli_trains_each_kind_and_refuses_other_kinds_flags(tmp_path, write_tiny_folder):
    """`redrafter train --kind`: the kind's size flags reach its config.json, another kind's
    architecture flag is one usage line before anything is written, --resume and
    --init-from take the kind of the drafter they continue."""
    run = train_cli(tmp_path, write_tiny_folder(tmp_path / "model"), "--predict", "2")
    assert_refused(
        run,
        tmp_path,
        [
            (["--kind", "medusa", "--token-subset", "128"], "--token-subset is for --kind redrafter, not medusa"),
            (["--kind", "mlp-speculator", "--tied"], "--tied/--untied is for --kind redrafter, not mlp-speculator"),
            (
                ["--kind", "mlp-speculator", "--layers", "2"],
                "--layers is for --kind redrafter, medusa or dflash, not mlp-speculator",
            ),
            (["--inner-dim", "32"], "--inner-dim is for --kind mlp-speculator, not redrafter"),
            (["--kind", "draft-llm"], "--kind: choose one of redrafter, medusa, mlp-speculator, dflash, eagle"),
            (["--kind", "mlp-speculator", "--tie-weights", "--predict", "1"], "tie_weights needs predict >= 2"),
        ],
    )

    mlp = run(
        "mlp",
        "--kind",
        "mlp-speculator",
        "--inner-dim",
        "32",
        "--tie-weights",
        "--scale-input",
        "--steps",
        "2",
        "--eval-every",
        "2",
    )
    assert mlp.exit_code == 0, mlp.output
    config = load_drafter_folder(tmp_path / "mlp", mx.float32).config
    assert (config.inner_dim, config.n_predict, config.tie_weights, config.scale_input) == (32, 2, True, True)
    assert not (tmp_path / "mlp" / "ngrams.safetensors").exists()
    resumed = run("mlp", "--steps", "4", "--eval-every", "2", "--resume")  # no --kind: the checkpoint's
    assert resumed.exit_code == 0, resumed.output
    state = json.loads((tmp_path / "mlp" / "training" / "checkpoint" / "train_state.json").read_text())
    assert state["step"] == 4 and state["config"]["kind"] == "mlp-speculator"
    clash = run("clash", "--kind", "medusa", "--init-from", str(tmp_path / "mlp"), "--steps", "1")
    assert clash.exit_code == 2 and "--init-from" in clash.output and "holds a mlp-speculator drafter" in clash.output
    tuned = run("tuned", "--init-from", str(tmp_path / "mlp"), "--steps", "1")
    assert tuned.exit_code == 0, tuned.output
    assert load_drafter_folder(tmp_path / "tuned", mx.float32).config == config

    medusa = run("medusa", "--kind", "medusa", "--layers", "2", "--steps", "1")
    assert medusa.exit_code == 0, medusa.output
    config = load_drafter_folder(tmp_path / "medusa", mx.float32).config
    assert (config.num_heads, config.num_layers) == (2, 2)
    assert len(read_distill_file(tmp_path / "distill.jsonl")) == 12  # --skip-distill: the data file is as it was
