"""DFlash: a checkpoint in z-lab's exact layout converts (and a bad one is refused in one line,
writing nothing), its block logits equal upstream's forward restated in NumPy, the taps are
the outputs of the layers it names, and decoding with it is plain decoding's: greedy on our
Llama and on Qwen3 behind the adapter, sampled with the LLM's distribution, in one host read
per step."""

from __future__ import annotations

import json
from pathlib import Path

import mlx.core as mx
import numpy as np
import pytest
from mlx_lm.sample_utils import make_sampler
from mlx_lm.utils import load_model

from redrafter_mlx.decoding.loop import generate_ar, generate_redrafter
from redrafter_mlx.drafting import TreeShape
from redrafter_mlx.drafting.loading import load_drafter_for
from redrafter_mlx.drafting.registry import detect_format
from redrafter_mlx.formats.loading import load
from redrafter_mlx.prompting import encode_prompt
from redrafter_mlx.tuning import DraftPlan

from .archs import arch_config, write_arch_folder
from .helpers import (
    FLOAT32_RTOL,
    PROMPTS,
    SEQ_LEN,
    TINY,
    TINY_PROMPT,
    TINY_VOCAB,
    assert_one_line_error,
    chi_square_p_value,
    collect,
    count_host_reads,
    dflash_config,
    exact_sequence_probabilities,
    invoke_cli,
    random_dflash,
    relative_error,
    sample_counts,
    tiny_config,
    write_random_llama,
)

LAYERS = 8  # the targets' layers; DFlash reads the outputs of layers 1 and 5
LAYER_IDS = (1, 5)
MASK_ID = 49000
CONFIG = dflash_config(64, 4, 2, 49152, LAYER_IDS, MASK_ID, block_size=6, layers=2)


def upstream_state(seed: int = 0) -> dict[str, np.ndarray]:
    """Random DFlash weights under z-lab's names and shapes (no biases, no embedding, no head)."""
    rng = np.random.default_rng(seed)
    h, inter, dim = CONFIG["hidden_size"], CONFIG["intermediate_size"], CONFIG["head_dim"]
    q, kv = CONFIG["num_attention_heads"] * dim, CONFIG["num_key_value_heads"] * dim

    def rand(*shape: int) -> np.ndarray:
        return (rng.normal(size=shape) * 0.2).astype(np.float32)

    state = {"fc.weight": rand(h, len(LAYER_IDS) * h), "hidden_norm.weight": 1 + rand(h), "norm.weight": 1 + rand(h)}
    for i in range(CONFIG["num_hidden_layers"]):
        p = f"layers.{i}."
        state |= {
            p + "self_attn.q_proj.weight": rand(q, h),
            p + "self_attn.k_proj.weight": rand(kv, h),
            p + "self_attn.v_proj.weight": rand(kv, h),
            p + "self_attn.o_proj.weight": rand(h, q),
            p + "self_attn.q_norm.weight": 1 + rand(dim),
            p + "self_attn.k_norm.weight": 1 + rand(dim),
            p + "mlp.gate_proj.weight": rand(inter, h),
            p + "mlp.up_proj.weight": rand(inter, h),
            p + "mlp.down_proj.weight": rand(h, inter),
            p + "input_layernorm.weight": 1 + rand(h),
            p + "post_attention_layernorm.weight": 1 + rand(h),
        }
    return state


def write_upstream(folder: Path, state: dict[str, np.ndarray], config: dict = CONFIG) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    mx.save_safetensors(str(folder / "model.safetensors"), {k: mx.array(v) for k, v in state.items()})
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def numpy_block_hidden(state: dict, block: np.ndarray, context: np.ndarray, start: int) -> np.ndarray:
    """Upstream's forward (z-lab `Qwen3DFlashAttention`, `DFlashDraftModel.forward`) restated:
    the context rows hidden_norm(fc(features)) at positions start.., the block (its embedding)
    after them; each layer's keys/values are [context; block] (k_norm, then rotate-half RoPE),
    queries the block's (q_norm, RoPE), no mask; final norm. Returns (b, H)."""
    heads, kv_heads, dim, eps = (
        CONFIG[k] for k in ("num_attention_heads", "num_key_value_heads", "head_dim", "rms_norm_eps")
    )

    def norm(x, w):
        return w * x / np.sqrt((x**2).mean(-1, keepdims=True) + eps)

    def rope(x, positions):  # x (T, heads, dim)
        inv = 1.0 / 10000.0 ** (np.arange(0, dim, 2) / dim)
        angles = positions[:, None] * inv[None]
        cos, sin = np.concatenate([np.cos(angles)] * 2, -1)[:, None], np.concatenate([np.sin(angles)] * 2, -1)[:, None]
        half = dim // 2
        return x * cos + np.concatenate([-x[..., half:], x[..., :half]], -1) * sin

    ctx = norm(context @ state["fc.weight"].T, state["hidden_norm.weight"])
    n, b = ctx.shape[0], block.shape[0]
    positions = np.arange(start, start + n + b, dtype=np.float64)
    h = block
    for i in range(CONFIG["num_hidden_layers"]):
        p = f"layers.{i}."
        x = norm(h, state[p + "input_layernorm.weight"])
        q = norm(
            (x @ state[p + "self_attn.q_proj.weight"].T).reshape(b, heads, dim), state[p + "self_attn.q_norm.weight"]
        )
        both = np.concatenate([ctx, x])
        k = norm(
            (both @ state[p + "self_attn.k_proj.weight"].T).reshape(n + b, kv_heads, dim),
            state[p + "self_attn.k_norm.weight"],
        )
        v = (both @ state[p + "self_attn.v_proj.weight"].T).reshape(n + b, kv_heads, dim)
        q, k = rope(q, positions[n:]), rope(k, positions)
        k, v = np.repeat(k, heads // kv_heads, 1), np.repeat(v, heads // kv_heads, 1)
        scores = np.einsum("qhd,khd->hqk", q, k) / np.sqrt(dim)
        weights = np.exp(scores - scores.max(-1, keepdims=True))
        weights /= weights.sum(-1, keepdims=True)
        attended = np.einsum("hqk,khd->qhd", weights, v).reshape(b, heads * dim)
        h = h + attended @ state[p + "self_attn.o_proj.weight"].T
        m = norm(h, state[p + "post_attention_layernorm.weight"])
        gate = m @ state[p + "mlp.gate_proj.weight"].T
        h = (
            h
            + (gate / (1 + np.exp(-gate)) * (m @ state[p + "mlp.up_proj.weight"].T))
            @ state[p + "mlp.down_proj.weight"].T
        )
    return norm(h, state["norm.weight"])


@pytest.fixture(scope="module")
def setup(tmp_path_factory, embedded_folder):
    """Two 8-layer targets (our Llama; Qwen3 through the adapter) and one converted DFlash."""
    root = tmp_path_factory.mktemp("dflash")
    llama = write_random_llama(root / "llama", tiny_config(num_hidden_layers=LAYERS), embedded_folder)
    qwen3 = write_arch_folder(root / "qwen3", arch_config("qwen3", num_hidden_layers=LAYERS), embedded_folder)
    state = upstream_state()
    upstream = write_upstream(root / "upstream", state)
    converted = root / "converted"
    result = invoke_cli("convert", upstream, converted, "-M", llama)
    assert result.exit_code == 0, result.output
    return {"llama": llama, "qwen3": qwen3, "state": state, "upstream": upstream, "converted": converted}


def test_conversion_detects_the_z_lab_layout_and_keeps_its_keys(setup):
    assert detect_format(setup["upstream"]) == "dflash"
    weights = mx.load(str(setup["converted"] / "model.safetensors"))
    assert set(weights) == set(setup["state"])
    config = json.loads((setup["converted"] / "config.json").read_text())
    assert config["model_type"] == "dflash_drafter" and config["dflash_config"]["mask_token_id"] == MASK_ID


@pytest.mark.parametrize("target", ["llama", "qwen3"])
def test_taps_are_the_outputs_of_the_layers_dflash_names(setup, target):
    """The features the loop hands DFlash equal what leaves mlx-lm's own decoder layers 1 and 5."""
    loaded = load(str(setup[target]))
    dflash = load_drafter_for(loaded, str(setup["converted"]))
    assert dflash.target_layers == (2, 6)
    tokens = mx.array([[5, 900, 31, 7000, 12, 44]])
    rows = loaded.model(tokens, loaded.model.make_cache(), taps=dflash.target_layers)
    reference, _ = load_model(setup[target])
    h, leaving = reference.model.embed_tokens(tokens), []
    for layer in reference.model.layers:
        h = layer(h, "causal", None)
        leaving.append(h)
    expected = mx.concatenate([leaving[i] for i in LAYER_IDS], axis=-1)
    assert relative_error(rows[..., 64:], expected) < FLOAT32_RTOL


def test_block_logits_match_upstream_restated_in_numpy(setup):
    """Through a session as the decoder drives it: the prompt's features, then a staged step
    whose padding rows (past its lazy count) must not be seen, then another step."""
    loaded = load(str(setup["llama"]))
    rng = np.random.default_rng(1)
    features = rng.normal(size=(12, len(LAYER_IDS) * 64)).astype(np.float32)
    embedding = np.array(loaded.model.embedding.weight)
    dflash = load_drafter_for(loaded, str(setup["converted"]))
    prompt = list(range(10, 17))  # 7 tokens; the features of the last 5 positions
    session = dflash.open(loaded.model, prompt, mx.array(features[:5]))
    seen = 4  # the last of them (which predicted the first answer token) comes with the first stage
    for step, (staged, count) in enumerate([(3, 1), (4, 3)]):
        junk = rng.normal(size=(staged - count, features.shape[1])).astype(np.float32) * 50
        session.stage(
            mx.zeros((staged,), mx.int32),
            mx.array(np.concatenate([features[seen : seen + count], junk])),
            mx.array(count),
        )
        seen += count
        token = 321 + step
        got = loaded.model.logits(session.block_hidden(mx.array([[token]]), loaded.model.embedding)[:, 1:])
        block = embedding[[token] + [MASK_ID] * (CONFIG["block_size"] - 1)]
        hidden = numpy_block_hidden(setup["state"], block, features[:seen], start=len(prompt) - 5)
        expected = loaded.model.logits(mx.array(hidden[1:]))[None]
        assert got.shape == (1, CONFIG["block_size"] - 1, 49152)
        assert mx.abs(got - expected).max().item() < 1e-3
        session.commit(count)


@pytest.mark.parametrize("target", ["llama", "qwen3"])
def test_greedy_decoding_with_dflash_is_plain_decoding_in_one_read_per_step(setup, target, monkeypatch):
    loaded = load(str(setup[target]))
    dflash = load_drafter_for(loaded, str(setup["converted"]))
    for text in PROMPTS:
        ids = encode_prompt(loaded.tokenizer, text)
        expected, _ = collect(generate_ar(loaded.model, ids, max_tokens=16))
        for shape in (TreeShape(3, 4, 3), TreeShape(2, 6, 4, node_budget=7)):
            reads = count_host_reads(monkeypatch)
            tokens, stats = collect(
                generate_redrafter(loaded.model, dflash, ids, DraftPlan(shape, lookup=False), max_tokens=16)
            )
            assert tokens == expected, shape
            assert sum(stats.verified_tokens) > len(stats.verified_tokens)  # trees were verified
            assert sum(reads.values()) <= stats.steps + 1, reads
            monkeypatch.undo()


def test_trees_deeper_than_the_block_are_refused(setup):
    from redrafter_mlx.api import Pipeline
    from redrafter_mlx.errors import InputError
    from redrafter_mlx.options import DecodingOptions

    loaded = load(str(setup["llama"]))
    pipeline = Pipeline(loaded, load_drafter_for(loaded, str(setup["converted"])), mx.float32)
    with pytest.raises(InputError, match="beam length at most 6, got 7"):
        pipeline.plan(DecodingOptions(beam_length=7))


@pytest.mark.slow
def test_sampled_dflash_has_the_llm_distribution():
    config = dflash_config(32, 4, 2, TINY_VOCAB, (0,), TINY_VOCAB - 1, block_size=4)
    dflash = random_dflash(config, seed=3).for_target(TINY, "tiny")
    n, temperature = 1500, 1.0
    mx.random.seed(98)
    counts, accepted_drafts = sample_counts(
        lambda: generate_redrafter(
            TINY,
            dflash,
            TINY_PROMPT,
            DraftPlan(TreeShape(2, 3, 2), lookup=False),
            max_tokens=SEQ_LEN,
            sampler=make_sampler(temp=temperature),
        ),
        n,
    )
    assert accepted_drafts > n // 4
    assert chi_square_p_value(counts, exact_sequence_probabilities(temperature), n) > 1e-3
    assert chi_square_p_value(counts, exact_sequence_probabilities(temperature * 2), n) < 1e-6


def test_bad_checkpoints_are_one_line_and_write_nothing(setup, tmp_path):
    state = upstream_state()
    no_taps = CONFIG | {"dflash_config": {"mask_token_id": MASK_ID}}
    cases = {
        "no-taps": (state, no_taps, "dflash_config needs target_layer_ids and mask_token_id"),
        "mask-outside": (
            state,
            CONFIG | {"dflash_config": {"target_layer_ids": [1, 5], "mask_token_id": 60000}},
            "mask_token_id 60000 is outside",
        ),
        "last-layer": (
            state,
            CONFIG | {"dflash_config": {"target_layer_ids": [1, 7], "mask_token_id": MASK_ID}},
            "the taps must be below the last",
        ),
        "narrow-fc": (state | {"fc.weight": np.zeros((64, 64), np.float32)}, CONFIG, "shape mismatch for 'fc.weight'"),
    }
    for name, (bad_state, config, message) in cases.items():
        out = tmp_path / f"{name}-out"
        source = write_upstream(tmp_path / name, bad_state, config)
        assert_one_line_error(invoke_cli("convert", source, out, "-M", setup["llama"]), 1, message)
        assert not out.exists()


def test_an_unconverted_checkpoint_is_named_in_one_line(setup):
    result = invoke_cli("generate", "-M", setup["llama"], "-d", setup["upstream"], "-p", "hi", "-m", "2")
    assert_one_line_error(result, 1, "upstream dflash checkpoint: convert it first")


def test_bench_compares_a_dflash_drafter(setup):
    result = invoke_cli(
        *("bench", "-M", setup["qwen3"], "--drafters", f"{setup['converted']}"),
        *("-w", "2", "-l", "5", "-N", "6", "-n", "1", "-m", "8", "--skip-mlx-lm", "--json"),
    )
    assert result.exit_code == 0, result.output
    methods = {m["name"].split()[0]: m for m in json.loads(result.stdout)["methods"]}
    assert methods["dflash"]["identical_to_ar"]
