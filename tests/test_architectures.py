"""Every architecture the verifier supports, as tiny random models built with mlx-lm's own
classes: a packed tree verifies like each branch run alone, greedy decoding with any drafter
gives mlx-lm's own `generate_step` output, and sampling keeps the model's distribution."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import mlx.core as mx
import numpy as np
import pytest
from mlx.utils import tree_flatten
from mlx_lm import load as mlx_lm_load
from mlx_lm.generate import generate_step
from mlx_lm.sample_utils import make_sampler
from mlx_lm.utils import load_model, quantize_model

from redrafter_mlx.api import Pipeline, generate
from redrafter_mlx.decoding.batch import BatchDecoder, Request
from redrafter_mlx.decoding.loop import generate_redrafter
from redrafter_mlx.drafting import TreeShape
from redrafter_mlx.drafting.kinds.draft_llm import DraftLLM
from redrafter_mlx.formats.loading import ModelLoadError, load
from redrafter_mlx.models.adapter import TreeModel
from redrafter_mlx.options import DecodingOptions
from redrafter_mlx.prompting import encode_prompt
from redrafter_mlx.serve.app import serve_pipeline
from redrafter_mlx.tuning import DraftPlan

from .archs import ARCHITECTURES, OWN_FORWARD, arch_config, random_mlx_lm_model, write_arch_folder
from .helpers import (
    FLOAT32_RTOL,
    TINY_PROMPT,
    TINY_VOCAB,
    TREE_TOKENS,
    ancestors,
    assert_one_line_error,
    chi_square_p_value,
    collect,
    exact_sequence_probabilities,
    invoke_cli,
    random_drafter,
    relative_error,
    run_batch,
    run_redrafter,
    sample_counts,
    write_word_tokenizer,
)

PROMPT = "Explain in one sentence why the sky is blue."
MAMBA = {  # a recurrent model: its state cannot be rolled back
    "model_type": "mamba",
    "vocab_size": 49152,
    "hidden_size": 32,
    "intermediate_size": 64,
    "state_size": 8,
    "num_hidden_layers": 2,
    "conv_kernel": 4,
    "use_bias": False,
    "use_conv_bias": True,
    "time_step_rank": 4,
    "tie_word_embeddings": True,
}
ANSWER_TOKENS = 20


@pytest.fixture(scope="module")
def folders(tmp_path_factory, embedded_folder) -> dict[str, Path]:
    """name -> a folder of that architecture (seed 0) and name + "-other" -> seed 1."""
    root = tmp_path_factory.mktemp("archs")
    found = {}
    for name in ARCHITECTURES:
        found[name] = write_arch_folder(root / name, arch_config(name), embedded_folder)
        found[f"{name}-other"] = write_arch_folder(root / f"{name}-other", arch_config(name), embedded_folder, seed=1)
    return found


def mlx_lm_greedy(folder: Path, prompt: list[int], n: int = ANSWER_TOKENS) -> list[int]:
    """mlx-lm's own greedy decoding of `folder` (its own loader, model and cache)."""
    model, _ = mlx_lm_load(str(folder))
    steps = generate_step(mx.array(prompt), model, max_tokens=n, sampler=make_sampler(temp=0.0))
    return [int(token) for token, _ in steps]


def tree_vs_branches(folder: Path) -> float:
    """The `relative_error` of our packed verify of a 3-branch tree after a prefix longer than
    every window against mlx-lm's own forward of each branch alone."""
    ours = load(str(folder)).model
    reference, _ = load_model(folder)
    prefix = list(range(100, 112))
    cache = ours.make_cache()
    ours(mx.array([prefix]), cache)
    cache.commit(len(prefix))
    n, size = len(prefix), len(TREE_TOKENS)
    mask = np.zeros((size, n + size), dtype=bool)
    mask[:, :n] = True
    for i in range(size):
        mask[i, [n + a for a in ancestors(i)]] = True
    depth = [len(ancestors(i)) - 1 for i in range(size)]
    hidden = ours(mx.array([TREE_TOKENS]), cache, mx.array([[n + d for d in depth]]), mx.array(mask)[None, None])
    packed = ours.logits(hidden)[0]
    paths = [ancestors(leaf) for leaf in (2, 3, 5)]
    expected = [reference(mx.array([prefix + [TREE_TOKENS[i] for i in path]]))[0, n:] for path in paths]
    return relative_error(mx.concatenate([packed[mx.array(path)] for path in paths]), mx.concatenate(expected))


@pytest.mark.parametrize("name", ARCHITECTURES)
def test_tree_verify_equals_mlx_lm_along_every_branch(folders, name):
    assert isinstance(load(str(folders[name])).model, TreeModel) == (name not in OWN_FORWARD)
    assert tree_vs_branches(folders[name]) < FLOAT32_RTOL


@pytest.mark.parametrize("name", ARCHITECTURES)
def test_greedy_decoding_equals_mlx_lm_generate(folders, name):
    """With a random RNN drafter (little accepted), the same model as a draft LLM (everything
    accepted) and another of its architecture (some accepted): mlx-lm's tokens every time."""
    loaded = load(str(folders[name]))
    prompt = encode_prompt(loaded.tokenizer, PROMPT)
    expected = mlx_lm_greedy(folders[name], prompt)
    drafters = {
        "rnn": random_drafter(loaded.model.args.vocab_size, loaded.model.args.hidden_size),
        "itself": DraftLLM(load(str(folders[name]), tokenizer=False).model),
        "other": DraftLLM(load(str(folders[f"{name}-other"]), tokenizer=False).model),
    }
    for label, drafter in drafters.items():
        for shape in (TreeShape(3, 4, 3), TreeShape(4, 4, 4, node_budget=6)):
            plan = DraftPlan(shape, lookup=False)
            tokens, stats = collect(generate_redrafter(loaded.model, drafter, prompt, plan, max_tokens=ANSWER_TOKENS))
            assert tokens == expected, (label, shape)
            if label == "itself" and shape.node_budget is None:  # every drafted token accepted
                assert max(stats.accepted_per_step) == shape.beam_length


def test_a_4_bit_folder_verifies_and_decodes_like_mlx_lm(folders, tmp_path):
    config = arch_config("qwen3")
    model, quantized_config = quantize_model(random_mlx_lm_model(config), config, group_size=64, bits=4)
    folder = tmp_path / "qwen3-4bit"
    folder.mkdir()
    mx.save_safetensors(str(folder / "model.safetensors"), dict(tree_flatten(model.parameters())))
    (folder / "config.json").write_text(json.dumps(quantized_config))
    for file in folders["qwen3"].iterdir():
        if file.name.startswith("tokenizer") or file.suffix == ".jinja":
            (folder / file.name).write_bytes(file.read_bytes())
    loaded = load(str(folder))
    assert loaded.model.layers[0].self_attn.q_proj.bits == 4
    assert tree_vs_branches(folder) < FLOAT32_RTOL
    prompt = encode_prompt(loaded.tokenizer, PROMPT)
    drafter = DraftLLM(load(str(folders["qwen3"]), tokenizer=False).model)  # a float draft for a 4-bit target
    tokens, _ = collect(generate_redrafter(loaded.model, drafter, prompt, DraftPlan(TreeShape(3, 4, 3)), max_tokens=16))
    assert tokens == mlx_lm_greedy(folder, prompt, 16)


def test_recurrent_architectures_are_refused_in_one_line(tmp_path, embedded_folder):
    folder = write_arch_folder(tmp_path / "mamba", MAMBA, embedded_folder)
    with pytest.raises(ModelLoadError, match="recurrent state .*cannot be rolled back"):
        load(str(folder))
    before = {f.name: f.read_bytes() for f in folder.iterdir()}
    assert_one_line_error(invoke_cli("generate", "-M", folder, "-p", "hi"), fragment="cannot verify drafts")
    assert {f.name: f.read_bytes() for f in folder.iterdir()} == before


@pytest.mark.slow
@pytest.mark.parametrize("name", ["qwen3", "gemma3_text"])
def test_sampling_keeps_the_distribution(name):
    """Rejection sampling through the adapter (gemma3's 2-token window slides inside the
    answer) gives the model's exact sequence distribution."""
    config = arch_config(name, vocab_size=TINY_VOCAB, hidden_size=32, intermediate_size=64, head_dim=8)
    config |= {"sliding_window": 2} if name == "gemma3_text" else {}
    model = TreeModel(random_mlx_lm_model(config, seed=11))
    temperature, n = 1.0, 1500
    probs = exact_sequence_probabilities(temperature, TINY_PROMPT, model)
    mx.random.seed(4321)
    counts, accepted = sample_counts(
        lambda: generate_redrafter(
            model,
            DraftLLM(model),
            TINY_PROMPT,
            DraftPlan(TreeShape(2, 3, 2), lookup=False),
            max_tokens=3,
            sampler=make_sampler(temp=temperature),
        ),
        n,
    )
    assert accepted > n // 4
    assert chi_square_p_value(counts, probs, n) > 1e-3
    assert chi_square_p_value(counts, exact_sequence_probabilities(temperature * 2, TINY_PROMPT, model), n) < 1e-6


@pytest.mark.parametrize("name", ["llama-sliding", "gemma2", "gemma3_text", "qwen3_moe"])
def test_batched_rows_decode_what_mlx_lm_gives_each_alone(folders, name):
    """`serve`'s batch (rows of different lengths in one forward, joining at different steps)
    through the adapter: every row is mlx-lm's own greedy answer."""
    loaded = load(str(folders[name]))
    prompts = [encode_prompt(loaded.tokenizer, text) for text in (PROMPT, "Say hello.", "List three rivers.")]
    decoder = BatchDecoder(loaded.model, random_drafter(loaded.model.args.vocab_size, 64), TreeShape(3, 4, 3))
    requests = [Request(ids, DecodingOptions(max_tokens=12 + 4 * i)) for i, ids in enumerate(prompts)]
    answers = run_batch(decoder, requests, join_every=2)
    for handle, ids in enumerate(prompts):
        assert answers[handle][0] == mlx_lm_greedy(folders[name], ids, 12 + 4 * handle)


def test_draft_models_of_any_architecture_from_the_cli(folders, tmp_path):
    """--draft-model and --drafter take a folder of any supported architecture (here a Gemma 3
    draft for a Qwen3 target: one tokenizer) and give the plain answer; a tokenizer of the same
    size that numbers tokens otherwise is one line, however equal the vocabulary sizes."""
    base = ["generate", "-M", folders["qwen3"], "-p", PROMPT, "-m", "12", "--json"]
    plain = json.loads(invoke_cli(*base, "--mode", "ar").stdout)["text"]
    for how in ("--draft-model", "--drafter"):
        result = invoke_cli(*base, how, folders["gemma3_text"], "-w", "2", "-l", "3")
        assert result.exit_code == 0, result.output
        assert json.loads(result.stdout)["text"] == plain
    renumbered = tmp_path / "renumbered"
    shutil.copytree(folders["qwen3-other"], renumbered)
    for file in renumbered.glob("tokenizer*"):
        file.unlink()
    write_word_tokenizer(renumbered, 49152)
    assert_one_line_error(invoke_cli(*base, "--draft-model", renumbered), 1, "has another tokenizer than")


@pytest.mark.slow
def test_a_drafter_distilled_for_qwen3_runs_every_command(folders, tmp_path, monkeypatch):
    """End to end on a Qwen3 target: `train` distils and trains an RNN drafter, which then
    drafts in `generate` and `chat` (the plain answers), `bench`, `tune` and `sweep`."""
    monkeypatch.setenv("REDRAFTER_CACHE_DIR", str(tmp_path / "cache"))
    model = folders["qwen3"]
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"id": f"p{i}", "prompt": f"Say {i} things"}) + "\n" for i in range(4)))
    drafter = tmp_path / "drafter"
    trained = invoke_cli(
        *("train", "-M", model, "--prompts", prompts, "--out", drafter, "--max-new-tokens", "8", "--steps", "4"),
        *("--eval-prompts", "0", "--token-subset", "128", "--exit-dim", "64", "--layers", "1"),
        *("--batch-positions", "8", "--predict", "2"),
    )
    assert trained.exit_code == 0, trained.output
    assert json.loads((drafter / "config.json").read_text())["hidden_size"] == 64

    base = ["generate", "-M", model, "-p", PROMPT, "-m", "10", "--json"]
    plain = json.loads(invoke_cli(*base, "--mode", "ar").stdout)
    drafted = json.loads(invoke_cli(*base, "-d", drafter, "-w", "2", "-l", "3").stdout)
    assert drafted["tokens"] == plain["tokens"] and drafted["verified_tokens"]
    chat_args = ("chat", "-M", str(model), "-m", "6")
    chat_plain = run_redrafter(*chat_args, "--mode", "ar", stdin="Hi\nMore\n")
    chat_drafted = run_redrafter(*chat_args, "-d", str(drafter), "-w", "2", "-l", "3", stdin="Hi\nMore\n")
    assert chat_plain.returncode == chat_drafted.returncode == 0, chat_drafted.stderr
    assert chat_drafted.stdout == chat_plain.stdout

    bench = invoke_cli("bench", "-M", model, "-d", drafter, "-n", "1", "-m", "8", "--json", "--skip-mlx-lm")
    assert bench.exit_code == 0, bench.output
    tune = invoke_cli(
        *("tune", "-M", model, "-d", drafter, "--beam-widths", "1,2", "--beam-lengths", "2,3"),
        *("--search-widths", "2", "--node-budgets", "3", "-n", "1", "-m", "8"),
    )
    assert tune.exit_code == 0, tune.output
    assert list((tmp_path / "cache").rglob("*.json"))
    sweep = invoke_cli(
        *("sweep", "-M", model, "-d", drafter, "--prompts-file", prompts, "-m", "6"),
        *("--beam-widths", "1,2", "--beam-lengths", "2", "--out", tmp_path / "sweep"),
    )
    assert sweep.exit_code == 0, sweep.output
    assert (tmp_path / "sweep" / "sweep.csv").read_text().count("\n") == 3  # header and two cells


def test_serve_answers_like_generate_on_a_sliding_window_model(folders):
    """`redrafter serve`'s app (OpenAI chat completions, batched engine) on Gemma 3."""
    from fastapi.testclient import TestClient

    pipeline = Pipeline(load(str(folders["gemma3_text"])), random_drafter(49152, 64), mx.float32)
    shape = TreeShape(3, 4, 3)
    options = DecodingOptions(max_tokens=12, beam_width=3, beam_length=4, search_width=3)
    expected = generate(pipeline, PROMPT, options)
    request = {"model": "gemma3", "messages": [{"role": "user", "content": PROMPT}], "max_tokens": 12, "temperature": 0}
    with TestClient(serve_pipeline(pipeline, model_id="gemma3", shape=shape)) as client:
        reply = client.post("/v1/chat/completions", json=request)
    assert reply.status_code == 200, reply.text
    assert reply.json()["choices"][0]["message"]["content"] == expected


def test_info_names_what_verifies_the_model(folders, tmp_path, embedded_folder):
    adapter = invoke_cli("info", "-M", folders["gemma3"]).stdout
    assert "gemma3_text, 4 layers" in adapter and "verified by mlx-lm's gemma3 class" in adapter
    assert "draft LLMs yes" in adapter and "hidden-state drafters yes" in adapter
    assert "verified by the compiled Llama forward" in invoke_cli("info", "-M", folders["mistral"]).stdout
    mamba = write_arch_folder(tmp_path / "mamba", MAMBA, embedded_folder)
    assert "cannot load" in invoke_cli("info", "-M", mamba).stdout
