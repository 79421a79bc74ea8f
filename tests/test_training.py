"""Drafter training: distillation file handling, Eq. 2 alignment with beam search, learning,
the learning-rate schedule, resume, and the CLI's defaults. Tiny random Llamas with a tiny
vocabulary, so everything runs in seconds."""

from __future__ import annotations

import gzip
import json
import math

import mlx.core as mx
import numpy as np
import pytest
from mlx import nn
from mlx.utils import tree_flatten

from redrafter_mlx.drafting.beam_search import beam_search
from redrafter_mlx.drafting.kinds.rnn import load as load_drafter
from redrafter_mlx.training import Optimisation, checkpoint, prefill_hidden, train_drafter
from redrafter_mlx.training.dataset import later_states, select_token_subset, windows
from redrafter_mlx.training.distill import Answering, HiddenStore, distill
from redrafter_mlx.training.distill_file import DistillRecord, read_distill_file
from redrafter_mlx.training.distill_workers import distill_in_workers
from redrafter_mlx.training.kinds.unrolled import accuracy
from redrafter_mlx.training.loop import TrainingDiverged
from redrafter_mlx.training.loss import drafter_loss, head_index_map, teacher_head, unrolled_logits
from redrafter_mlx.training.schedule import learning_rate_schedule
from redrafter_mlx.training.start import make_drafter

from .helpers import (
    TRAINING_VOCAB,
    assert_resume_matches,
    llm_hidden_states,
    pattern_records,
    random_model,
    tiny_config,
    train_config,
    training_llm,
)


def test_windows_match_inference_semantics():
    r = DistillRecord("a", [10, 11, 12], [20, 21, 22, 23], 0.0, "stop")
    positions, win = windows(r, predict=2)
    # t = 2 (last prompt token) produced y_3 = 20, the first guaranteed token.
    assert positions.tolist() == [2, 3, 4, 5]
    assert win.tolist() == [[20, 21, 22], [21, 22, 23], [22, 23, -1], [23, -1, -1]]


def test_token_subset_most_frequent_first():
    recs = [DistillRecord("a", [1], [5, 5, 5, 7, 7, 3], 0.0, "stop")]
    assert select_token_subset(recs, 3, TRAINING_VOCAB).tolist() == [5, 7, 3]
    assert select_token_subset(recs, 5, TRAINING_VOCAB).tolist() == [5, 7, 3, 0, 1]


def test_loss_falls_and_accuracy_beats_random(tmp_path):
    model, config = training_llm()
    train_recs, held_recs = pattern_records(40, seed=0), pattern_records(8, seed=1)
    train = llm_hidden_states(model, train_recs, 3)
    held = llm_hidden_states(model, held_recs, 3)
    cfg = train_config()
    baseline = accuracy(make_drafter(cfg.recipe, config, None, seed=7), model.embedding, *held, 3)
    result = train_drafter(model, config, train, held, tmp_path, cfg)
    losses = json.loads((tmp_path / "checkpoint" / "train_state.json").read_text())["losses"]
    assert np.mean(losses[-10:]) < 0.3 * np.mean(losses[:5])
    trained = result.history[-1]
    for j in range(3):
        assert trained["top1"][j] > baseline["top1"][j] + 0.5, (trained, baseline)
        assert trained["top1"][j] > 0.6


def test_memorised_sequence_is_beam_searched_from_the_right_state(tmp_path):
    """Training targets = inference semantics: after memorising one sequence, beam search
    from h_t and the guaranteed token y_{t+1} drafts exactly y_{t+2..t+T+1}."""
    model, config = training_llm(seed=3)
    rng = np.random.default_rng(5)
    seq = rng.permutation(TRAINING_VOCAB)[:28].tolist()
    rec = DistillRecord("m", seq[:4], seq[4:], 0.0, "length")
    data = llm_hidden_states(model, [rec], 4)
    cfg = train_config(predict=4, steps=250, lr=1e-2, batch_positions=len(data[0]), layers=2)
    result = train_drafter(model, config, data, data, tmp_path, cfg)
    drafter = result.drafter
    hidden = model(mx.array([seq]))[0]
    for t in (3, 8, 15):  # t = 3: last prompt token
        beams, _ = beam_search(drafter, model.embedding, hidden[t], mx.array(seq[t + 1]), 2, 5)
        assert beams[0].tolist() == seq[t + 1 : t + 6]


def test_trimmed_tied_drafter_trains_and_round_trips(tmp_path):
    model, config = training_llm()
    recs = pattern_records(30)
    data = llm_hidden_states(model, recs, 2)
    ids = select_token_subset(recs, 48, TRAINING_VOCAB)
    cfg = train_config(predict=2, tied=True, token_subset=48, steps=40, save_dtype="float16")
    out = tmp_path / "drafter"
    result = train_drafter(model, config, data, data, tmp_path, cfg, token_ids=ids, out_dir=out)
    loaded = load_drafter(out)
    assert loaded.config.head_tied and loaded.config.token_subset_size == 48
    assert np.array_equal(np.array(loaded.token_ids), ids)
    assert loaded.head_proj.weight.dtype == mx.float32  # stored float16, loaded float32
    h = mx.array(data[0][:4])
    s = loaded.init_state((4,))
    np.testing.assert_allclose(
        np.array(loaded.logits(h, s, model.embedding)),
        np.array(result.drafter.logits(h, s, model.embedding)),
        atol=2e-2,
    )


def test_resume_continues_exactly(tmp_path, monkeypatch):
    """Interrupted right after its step-4 checkpoint and resumed, a run ends with the same
    weights as an uninterrupted one (same data stream, optimizer state and schedule)."""
    model, config = training_llm()
    data = llm_hidden_states(model, pattern_records(20), 3)
    cfg = train_config(steps=8, batch_positions=64, checkpoint_every=4)
    assert_resume_matches(monkeypatch, model, config, data, tmp_path, cfg)


def test_a_spiking_loss_is_flagged_once_and_a_non_finite_one_stops_the_run(tmp_path):
    """Too high a learning rate: at 0.3 the loss jumps at the second step and the run goes on
    (a run may recover), warned once; at 1e6 it is NaN at once, and the run stops in one line,
    with the step-1 checkpoint (finite) kept."""
    model, config = training_llm()
    data = llm_hidden_states(model, pattern_records(20), 3)
    logged = []
    cfg = train_config(steps=6, batch_positions=64, checkpoint_every=1, lr=0.3, warmup_steps=0)
    train_drafter(model, config, data, data, tmp_path / "spike", cfg, log=logged.append)
    warnings = [entry["warning"] for entry in logged if "warning" in entry]
    assert len(warnings) == 1 and "jumped at step 2" in warnings[0] and "(peak 0.3)" in warnings[0], logged

    cfg = train_config(steps=6, batch_positions=64, checkpoint_every=1, lr=1e6, warmup_steps=0)
    with pytest.raises(TrainingDiverged, match=r"diverged at step 2: loss nan; .*\(peak 1e\+06\)") as stop:
        train_drafter(model, config, data, data, tmp_path / "nan", cfg)
    assert "\n" not in str(stop.value)
    drafter, state, _ = checkpoint.load(tmp_path / "nan" / "checkpoint")
    assert state["step"] == 1 and len(state["losses"]) == 1
    assert all(mx.isfinite(w).all().item() for _, w in tree_flatten(drafter.parameters()))


@pytest.mark.parametrize("total, warmup", [(1000, 50), (40, 50), (3, 50), (200, 0)])
def test_learning_rate_warms_up_linearly_then_falls_by_cosine_to_the_floor(total, warmup):
    """From lr/100 up to lr over the warmup (at most a fifth of the run), then a cosine from
    lr down to lr * min_lr_ratio, which the last optimizer step (step total - 1) reaches."""
    lr, floor = 6e-4, 6e-5
    schedule = learning_rate_schedule(Optimisation(lr=lr, min_lr_ratio=0.1, warmup_steps=warmup), total)
    got = np.array([schedule(mx.array(step)).item() for step in range(total)])
    ramp = min(warmup, total // 5)
    expected = [lr * (0.01 + 0.99 * step / ramp) for step in range(ramp + 1)] if ramp else []
    falling = total - len(expected)  # lr at the first of these steps, the floor at the last
    expected += [floor + (lr - floor) * (1 + math.cos(math.pi * k / max(falling - 1, 1))) / 2 for k in range(falling)]
    np.testing.assert_allclose(got, expected, rtol=1e-5)
    assert got[0] == pytest.approx(lr / 100 if ramp else lr) and got[-1] == pytest.approx(floor)
    assert got.max() == pytest.approx(lr)


def test_cli_defaults_train_the_shipped_drafters_architecture(embedded):
    """`redrafter train` with no options builds a drafter whose config.json is the shipped
    drafter's, field by field, but for the head: trained over 16,384 tokens and then trimmed to
    its best 4,096 (`convert --head-tokens 4096`, its model card)."""
    import typer

    from redrafter_mlx.cli.main import load_commands
    from redrafter_mlx.cli.train_setup import train_config
    from redrafter_mlx.formats.checkpoint import CONFIG_FILE
    from redrafter_mlx.formats.loading import DEFAULT_MODEL, SHIPPED_DRAFTERS

    command = typer.main.get_command(load_commands()).commands["train"]
    context = command.make_context("train", ["--out", "unused"])
    built = train_config(context, "redrafter").recipe.drafter_config(embedded.config).to_dict()
    shipped = json.loads((SHIPPED_DRAFTERS[DEFAULT_MODEL] / CONFIG_FILE).read_text())
    assert sorted(built) == sorted(shipped)
    assert (built.pop("token_subset_size"), shipped.pop("token_subset_size")) == (16384, 4096)
    for name, value in shipped.items():
        assert built[name] == value, name


def test_cli_train_without_training_prompts_asks_for_a_prompts_file(tmp_path, monkeypatch):
    """From an installed wheel (no checkout data/ folder) `redrafter train` needs --prompts,
    and says so in one line before it loads or writes anything."""
    from typer.testing import CliRunner

    from redrafter_mlx.cli.main import load_commands
    from redrafter_mlx.formats import prompt_sets as data

    monkeypatch.setattr(data, "CHECKOUT_DATA", tmp_path / "no-checkout")
    out = tmp_path / "drafter"
    result = CliRunner().invoke(load_commands(), ["train", "-M", str(tmp_path / "no-model"), "--out", str(out)])
    assert result.exit_code == 2, result.output
    assert len(result.output.strip().splitlines()) == 1
    assert "git checkout" in result.output and "--prompts FILE.jsonl" in result.output
    assert not out.exists()


def test_resume_compares_best_only_on_the_same_heldout_set(tmp_path):
    """The drafter kept as best must have beaten scores measured on the same held-out set:
    resuming on other held-out data starts the best-so-far record over."""
    model, config = training_llm()
    data = llm_hidden_states(model, pattern_records(20), 3)
    other = llm_hidden_states(model, pattern_records(8, seed=1), 3)
    for name, heldout, kept in [("same", data, True), ("other", other, False)]:
        work = tmp_path / name
        train_drafter(model, config, data, data, work, train_config(steps=2, batch_positions=64, eval_every=2))
        state_file = work / "checkpoint" / "train_state.json"
        state = json.loads(state_file.read_text())
        state["best"] = {"step": 0, "top1": [2.0]}  # unbeatable: accuracy is at most 1
        state_file.write_text(json.dumps(state))
        cfg = train_config(steps=4, batch_positions=64, eval_every=2)
        train_drafter(model, config, data, heldout, work, cfg, resume=True, out_dir=tmp_path / f"{name}-out")
        best = json.loads(state_file.read_text())["best"]
        assert (best["step"] == 0) is kept, (name, best)
        assert (tmp_path / f"{name}-out").exists() is not kept


class CharTokenizer:
    """No chat template: encode_prompt falls back to `encode`."""

    has_chat_template = False
    eos_token_ids = frozenset({2})
    eos_token_id = 2

    def encode(self, text: str) -> list[int]:
        return [3 + ord(c) % (TRAINING_VOCAB - 3) for c in text]


def test_distill_resumes_without_duplicates(tmp_path):
    model, _ = training_llm()
    prompts = [{"id": f"p{i}", "prompt": f"prompt number {i} " * (1 + i % 3)} for i in range(7)]
    out = tmp_path / "distill.jsonl"
    answering = Answering(max_new_tokens=12, batch_size=4)
    first = distill(
        model, CharTokenizer(), prompts, out, answering, max_prompts_this_run=3, hidden_dir=tmp_path / "hidden"
    )
    assert first.prompts_done == 3
    with out.open("a") as f:
        f.write('{"id": "p6", "prompt_ids": [1, 2')  # a write torn by a kill
    second = distill(model, CharTokenizer(), prompts, out, answering, hidden_dir=tmp_path / "hidden")
    assert second.prompts_skipped == 3 and second.prompts_done == 4
    records = read_distill_file(out)
    assert sorted(r.id for r in records) == [f"p{i}" for i in range(7)]
    assert all(0 < len(r.response_ids) <= 12 for r in records)
    assert {r.temp for r in records} == {0.0, 0.7}  # half greedy, half sampled
    third = distill(model, CharTokenizer(), prompts, out, Answering(max_new_tokens=12))
    assert third.prompts_done == 0 and len(read_distill_file(out)) == 7
    # A compressed copy reads the same and is never appended to (that would corrupt it).
    packed = tmp_path / "distill.jsonl.gz"
    packed.write_bytes(gzip.compress(out.read_bytes()))
    before = packed.read_bytes()
    assert read_distill_file(packed) == records
    with pytest.raises(ValueError, match="read-only"):
        distill(model, CharTokenizer(), prompts + [{"id": "new", "prompt": "more"}], packed)
    with pytest.raises(ValueError, match="read-only"):
        distill_in_workers(str(tmp_path), None, prompts, packed, workers=2)
    assert packed.read_bytes() == before
    # Greedy answers are the model's own argmax continuations.
    # The states saved while generating are those a fresh causal forward gives.
    store = HiddenStore(tmp_path / "hidden")
    saved = store.load([r.id for r in records])
    assert set(saved) == {r.id for r in records}
    fresh = prefill_hidden(model, records)
    for r, h in zip(records, fresh):
        np.testing.assert_allclose(saved[r.id], h, atol=1e-4)
    # (prompts of different lengths, batched in length order: every row as if it ran alone)
    for greedy in (r for r in records if r.temp == 0.0):
        ids = greedy.prompt_ids + greedy.response_ids
        logits = model.logits(model(mx.array([ids])))[0]
        expected = mx.argmax(logits, axis=-1).tolist()[len(greedy.prompt_ids) - 1 : len(ids) - 1]
        assert greedy.response_ids == expected


def test_hidden_store_two_writers(tmp_path):
    """Distillation and a training run may extend the same store concurrently."""
    a, b = HiddenStore(tmp_path), HiddenStore(tmp_path)
    a.add(["x"], [np.ones((2, 3), np.float32)])
    b.add(["y"], [np.zeros((1, 3), np.float32)])
    a.add(["x"], [np.full((2, 3), 5.0, np.float32)])  # a later copy wins
    got = HiddenStore(tmp_path).load(["x", "y"])
    assert got["x"].tolist() == [[5.0] * 3] * 2 and got["y"].shape == (1, 3)


@pytest.mark.slow
def test_distill_workers_agree_with_one_process_and_resume(tmp_path, write_tiny_folder):
    """Two worker processes give the answers one process gives; a killed run's part file is
    merged and its prompts are skipped; every new answer's hidden states are stored."""
    from redrafter_mlx.formats.loading import load
    from redrafter_mlx.training.distill_workers import WorkerFailed, distill_in_workers, part_files

    folder = write_tiny_folder(tmp_path / "model")
    loaded = load(str(folder), mx.float32)
    prompts = [{"prompt": f"Tell me about number {i} " * (1 + i % 3)} for i in range(7)]  # ids by position
    answering = Answering(max_new_tokens=8, batch_size=4, sampled_fraction=0.0)
    one = tmp_path / "one.jsonl"
    distill(loaded.model, loaded.tokenizer, prompts, one, answering)
    expected = {r.id: r.response_ids for r in read_distill_file(one)}

    out = tmp_path / "two.jsonl"
    leftover = next(line for line in one.read_text().splitlines() if '"prompt-3"' in line)
    (tmp_path / "two.jsonl.part1").write_text(leftover + '\n{"id": "prompt-5", "prompt_ids": [1')
    stats = distill_in_workers(
        str(folder), "float32", prompts, out, answering, workers=2, hidden_dir=tmp_path / "hidden"
    )
    assert part_files(out) == []
    assert stats.prompts_skipped == 1 and stats.prompts_done == 6
    assert stats.tokens == sum(len(v) for k, v in expected.items() if k != "prompt-3")
    assert {r.id: r.response_ids for r in read_distill_file(out)} == expected
    stored = HiddenStore(tmp_path / "hidden").load(list(expected))
    assert set(stored) == set(expected) - {"prompt-3"}
    again = distill_in_workers(str(folder), "float32", prompts, out, answering, workers=2)
    assert again.prompts_done == 0 and len(out.read_text().splitlines()) == 7
    with pytest.raises(WorkerFailed, match="worker 0 failed: .*no-such-model"):
        distill_in_workers(
            str(tmp_path / "no-such-model"), "float32", [{"prompt": "x"}], tmp_path / "x.jsonl", answering, workers=2
        )


def test_cli_train_distils_trains_and_guards_out(tmp_path, write_tiny_folder):
    from typer.testing import CliRunner

    from redrafter_mlx.cli.main import load_commands
    from redrafter_mlx.formats.loading import load
    from redrafter_mlx.prompting import encode_prompt

    model = write_tiny_folder(tmp_path / "model")
    prompts = tmp_path / "prompts.jsonl"
    rows = [{"id": f"p{i}", "prompt": f"Say {i} things"} for i in range(4)]
    rows.append({"id": "p4", "turns": ["Say 4 things", "Now say fewer"]})  # the follow-up is distilled alone
    prompts.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "drafter"
    args = [
        "train",
        "-M",
        str(model),
        "--prompts",
        str(prompts),
        "--out",
        str(out),
        "--max-new-tokens",
        "6",
        "--steps",
        "4",
        "--eval-every",
        "2",
        "--eval-prompts",
        "1",
        "--token-subset",
        "128",
        "--exit-dim",
        "64",
        "--layers",
        "1",
        "--batch-positions",
        "8",
        "--predict",
        "2",
    ]
    app = load_commands()
    result = CliRunner().invoke(
        app, args + ["--distill-workers", "2", "--warmup-steps", "1", "--soft-targets", "0.5", "--eval-max-tokens", "5"]
    )
    assert result.exit_code == 0, result.output
    assert "distillation: 6 new answers" in result.output
    run_config = json.loads((out / "training" / "run.json").read_text())["config"]
    assert run_config["optimisation"]["warmup_steps"] == 1 and run_config["recipe"]["soft_targets"] == 0.5
    assert run_config["evaluation"]["eval_max_tokens"] == 5
    answers = {r.id: r for r in read_distill_file(out / "training" / "distill.jsonl")}
    assert (out / "config.json").exists() and sorted(answers) == ["p0", "p1", "p2", "p3", "p4", "p4/2"]
    tokenizer = load(str(model)).tokenizer
    assert answers["p4"].prompt_ids == encode_prompt(tokenizer, "Say 4 things")
    assert answers["p4/2"].prompt_ids == encode_prompt(tokenizer, "Now say fewer")
    loaded = load_drafter(out)
    assert loaded.config.token_subset_size == 128 and loaded.config.num_draft_layers == 1
    again = CliRunner().invoke(app, args)
    assert again.exit_code == 2 and "--resume" in again.output
    resumed = CliRunner().invoke(
        app,
        args[:-8]
        + [
            "--steps",
            "6",
            "--eval-every",
            "2",
            "--eval-prompts",
            "0",
            "--token-subset",
            "128",
            "--exit-dim",
            "64",
            "--layers",
            "1",
            "--batch-positions",
            "8",
            "--predict",
            "2",
            "--resume",
        ],
    )
    assert resumed.exit_code == 0, resumed.output
    state = json.loads((out / "training" / "checkpoint" / "train_state.json").read_text())
    assert state["step"] == 6
    tuned = tmp_path / "tuned"
    packed = tmp_path / "distill.jsonl.gz"  # the shipped drafter's data is kept compressed
    packed.write_bytes(gzip.compress((out / "training" / "distill.jsonl").read_bytes()))
    tune = [
        "train",
        "-M",
        str(model),
        "--out",
        str(tuned),
        "--skip-distill",
        "--steps",
        "2",
        "--eval-prompts",
        "0",
        "--distill-data",
        str(packed),
        "--predict",
        "2",
        "--batch-positions",
        "8",
    ]
    missing = CliRunner().invoke(app, tune + ["--init-from", str(tmp_path / "nowhere")])
    assert missing.exit_code == 2 and "nowhere: not a drafter folder" in missing.output and not tuned.exists()
    extend = CliRunner().invoke(app, [a for a in tune if a != "--skip-distill"])
    assert extend.exit_code == 2 and "read-only" in extend.output and "--skip-distill" in extend.output
    assert len(extend.output.strip().splitlines()) == 1
    assert not tuned.exists()
    assert CliRunner().invoke(app, tune + ["--init-from", str(out)]).exit_code == 0
    assert load_drafter(tuned).config == loaded.config  # not the defaults' exit 576 and 2 layers


def test_distill_sampler_is_greedy_on_temperature_zero_rows():
    from redrafter_mlx.training.distill import _sample

    logits = mx.random.normal((4, 50)) * 3
    argmax = mx.argmax(logits, axis=-1).tolist()
    assert _sample(logits, [0.0] * 4).tolist() == argmax
    mixed = _sample(logits, [0.0, 5.0, 0.0, 5.0]).tolist()
    assert [mixed[0], mixed[2]] == [argmax[0], argmax[2]]
    draws = {tuple(_sample(logits, [0.0, 5.0, 0.0, 5.0]).tolist()[1::2]) for _ in range(20)}
    assert len(draws) > 1  # the sampled rows really sample


@pytest.mark.parametrize("tied", [True, False])
def test_soft_loss_is_cross_entropy_against_the_llm_at_the_right_positions(tied):
    """With soft weight 1 the loss is, per depth j, the mean over positions t of
    -sum_k p_LLM(k | y_{<=t+j}) log q_j(k), p restricted to the head's tokens; here p comes
    from an independent full-sequence forward and `model.logits`, q from the drafter."""
    config = tiny_config(vocab_size=TRAINING_VOCAB, tie_word_embeddings=tied)
    model = random_model(config, seed=4)
    recs = pattern_records(3, length=10, seed=2)
    predict = 3
    hidden, win = llm_hidden_states(model, recs, predict)
    ids = select_token_subset(recs, 40, TRAINING_VOCAB)
    drafter = make_drafter(train_config(token_subset=40, predict=predict).recipe, config, ids, seed=1)
    drafter.lm_head[1].weight = mx.random.normal(drafter.lm_head[1].weight.shape)  # non-uniform q
    rows = np.arange(len(hidden))
    teacher = (mx.array(later_states(hidden, rows, predict)), teacher_head(model, config["hidden_size"], ids))
    loss, _ = drafter_loss(
        drafter,
        model.embedding,
        mx.array(hidden),
        mx.array(win),
        head_index_map(drafter),
        predict,
        soft=1.0,
        teacher=teacher,
    )

    q_logits = [
        np.array(lg) for lg in unrolled_logits(drafter, model.embedding, mx.array(hidden), mx.array(win), predict)
    ]
    per_depth = [[] for _ in range(predict)]
    row = 0
    for r in recs:
        seq = r.prompt_ids + r.response_ids
        llm = np.array(model.logits(model(mx.array([seq]))[0]))[:, ids]  # (len(seq), K)
        for t in range(len(r.prompt_ids) - 1, len(seq) - 1):
            for j in range(predict):  # depth j + 1 predicts y_{t+j+2}, made from h_{t+j+1}
                if t + j + 2 < len(seq):
                    p = np.exp(llm[t + j + 1] - llm[t + j + 1].max())
                    p /= p.sum()
                    lq = q_logits[j][row] - np.log(np.exp(q_logits[j][row]).sum())
                    per_depth[j].append(-(p * lq).sum())
            row += 1
    expected = sum(np.mean(d) for d in per_depth)
    np.testing.assert_allclose(float(loss), expected, rtol=1e-4)


def test_soft_targets_teach_the_llm_distribution(tmp_path):
    """On text the LLM did not write, hard labels teach the text and soft targets teach
    the LLM: only the soft-trained drafter ends up close to p_LLM (held-out KL)."""
    model, config = training_llm(seed=5)
    train, held = (
        llm_hidden_states(model, pattern_records(40), 3),
        llm_hidden_states(model, pattern_records(8, seed=1), 3),
    )
    rows = teacher_head(model, config["hidden_size"], None)

    def kl_to_llm(drafter) -> float:
        h, w = (mx.array(a) for a in held)
        later = mx.array(later_states(held[0], np.arange(len(held[0])), 3))
        present = np.array(w[:, 1:] >= 0)
        total = []
        for j, lg in enumerate(unrolled_logits(drafter, model.embedding, h, w, 3)):
            log_p = nn.log_softmax(later[:, j] @ rows.T, axis=-1)
            kl = (mx.exp(log_p) * (log_p - nn.log_softmax(lg, axis=-1))).sum(-1)
            total.append(np.array(kl)[present[:, j]].mean())
        return float(np.mean(total))

    start = kl_to_llm(make_drafter(train_config().recipe, config, None))
    soft = kl_to_llm(train_drafter(model, config, train, held, tmp_path / "s", train_config(soft_targets=1.0)).drafter)
    hard = kl_to_llm(train_drafter(model, config, train, held, tmp_path / "h", train_config()).drafter)
    assert soft < 0.3 * start, (soft, start)
    assert soft < 0.3 * hard, (soft, hard)


def test_init_from_starts_at_a_drafter_and_checks_it_fits(tmp_path):
    """A run started from a drafter folder begins at its weights, architecture and token
    subset (with lr 0 it ends there), whatever the config and data subset say."""
    model, config = training_llm()
    recs = pattern_records(20)
    data = llm_hidden_states(model, recs, 2)
    first = train_drafter(
        model,
        config,
        data,
        data,
        tmp_path / "a",
        train_config(predict=2, steps=20, token_subset=48),
        token_ids=select_token_subset(recs, 48, TRAINING_VOCAB),
        out_dir=tmp_path / "first",
    )
    again = train_drafter(
        model,
        config,
        data,
        data,
        tmp_path / "b",
        train_config(predict=2, steps=3, lr=0.0, exit_dim=32),
        init_from=tmp_path / "first",
    )
    assert again.drafter.config == load_drafter(tmp_path / "first").config
    before = dict(tree_flatten(load_drafter(tmp_path / "first").parameters()))
    for k, v in tree_flatten(again.drafter.parameters()):
        np.testing.assert_array_equal(np.array(v), np.array(before[k]), err_msg=k)
    assert first.best is not None and again.history[-1]["top1"] == pytest.approx(
        accuracy(load_drafter(tmp_path / "first"), model.embedding, *data, 2)["top1"]
    )
    other = tiny_config(vocab_size=TRAINING_VOCAB, hidden_size=32)
    with pytest.raises(ValueError, match="hidden size 64 .* the LLM has 32"):
        train_drafter(
            random_model(other),
            other,
            data,
            data,
            tmp_path / "c",
            train_config(predict=2, steps=1),
            init_from=tmp_path / "first",
        )
