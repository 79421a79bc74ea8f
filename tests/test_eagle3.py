"""EAGLE-3: an upstream-layout checkpoint (SafeAILab/EAGLE `cnets.py` keys and shapes) converts,
its forward matches upstream's restated in PyTorch, the target's tapped layer inputs match
mlx-lm's own layers, and decoding with it is plain decoding's, on our Llama and the adapter."""

from __future__ import annotations

import json
from pathlib import Path

import mlx.core as mx
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from mlx_lm.utils import load_model

from redrafter_mlx.decoding.loop import generate_ar, generate_redrafter
from redrafter_mlx.drafting import TreeShape
from redrafter_mlx.drafting.kinds.eagle3 import Eagle3, target_layers
from redrafter_mlx.drafting.loading import load_drafter_for
from redrafter_mlx.drafting.registry import detect_format
from redrafter_mlx.formats.loading import load
from redrafter_mlx.models.cache import KVCache
from redrafter_mlx.prompting import encode_prompt
from redrafter_mlx.tuning import DraftPlan

from .archs import arch_config, write_arch_folder
from .helpers import (
    FLOAT32_RTOL,
    PROMPTS,
    assert_one_line_error,
    collect,
    invoke_cli,
    relative_error,
    tiny_config,
    write_random_llama,
)

LAYERS = 8  # EAGLE-3 reads layers 2, 4 and 5 of these targets
DRAFT_VOCAB = 256
CONFIG = {  # upstream's traineagle3/config.json fields, scaled down to the targets' width
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 64,
    "intermediate_size": 96,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "num_hidden_layers": 1,
    "max_position_embeddings": 2048,
    "rms_norm_eps": 1e-5,
    "vocab_size": 49152,
    "draft_vocab_size": DRAFT_VOCAB,
    "tie_word_embeddings": False,
    "torch_dtype": "float32",
}


def upstream_state(seed: int = 0) -> dict[str, torch.Tensor]:
    """Random EAGLE-3 weights under upstream's names and shapes (no biases; d2t/t2d buffers)."""
    g = torch.Generator().manual_seed(seed)
    h, inter, vocab = CONFIG["hidden_size"], CONFIG["intermediate_size"], CONFIG["vocab_size"]
    kv = h // CONFIG["num_attention_heads"] * CONFIG["num_key_value_heads"]

    def rand(*shape):
        return torch.randn(*shape, generator=g) * 0.2

    used = torch.randperm(vocab, generator=g)[:DRAFT_VOCAB].sort().values  # the draft vocabulary's target ids
    t2d = torch.zeros(vocab, dtype=torch.bool)
    t2d[used] = True
    p = "midlayer."
    return {
        "fc.weight": rand(h, 3 * h),
        p + "self_attn.q_proj.weight": rand(h, 2 * h),
        p + "self_attn.k_proj.weight": rand(kv, 2 * h),
        p + "self_attn.v_proj.weight": rand(kv, 2 * h),
        p + "self_attn.o_proj.weight": rand(h, h),
        p + "mlp.gate_proj.weight": rand(inter, h),
        p + "mlp.up_proj.weight": rand(inter, h),
        p + "mlp.down_proj.weight": rand(h, inter),
        p + "hidden_norm.weight": 1 + rand(h),
        p + "input_layernorm.weight": 1 + rand(h),
        p + "post_attention_layernorm.weight": 1 + rand(h),
        "norm.weight": 1 + rand(h),
        "lm_head.weight": rand(DRAFT_VOCAB, h),
        "d2t": used - torch.arange(DRAFT_VOCAB),
        "t2d": t2d,
    }


def write_upstream(folder: Path, state: dict, config: dict = CONFIG) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    torch.save(state, folder / "pytorch_model.bin")
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def torch_eagle3(state: dict, embedding: np.ndarray, tokens: list[int], features: np.ndarray) -> np.ndarray:
    """Upstream's EAGLE-3 forward restated: h = fc(features); the layer attends over
    [input_layernorm(embed); hidden_norm(h)] with residual h (rotate-half RoPE at positions
    0..T-1, base 10,000, causal), then the MLP; logits lm_head(norm(out)) over the draft
    vocabulary. Returns those logits (T, v)."""
    heads, kv_heads, eps = CONFIG["num_attention_heads"], CONFIG["num_key_value_heads"], CONFIG["rms_norm_eps"]
    p = "midlayer."

    def norm(x, w):
        return w * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)

    h = torch.tensor(features, dtype=torch.float32) @ state["fc.weight"].T
    t, width = h.shape
    dim = width // heads
    emb = torch.tensor(embedding[tokens], dtype=torch.float32)
    a = torch.cat([norm(emb, state[p + "input_layernorm.weight"]), norm(h, state[p + "hidden_norm.weight"])], -1)
    inv = 1.0 / 10000.0 ** (torch.arange(0, dim, 2).float() / dim)
    angles = torch.arange(t).float()[:, None] * inv[None]
    cos, sin = torch.cat([angles.cos()] * 2, -1), torch.cat([angles.sin()] * 2, -1)

    def rope(q):
        half = q.shape[-1] // 2
        return q * cos + torch.cat([-q[..., half:], q[..., :half]], -1) * sin

    q = (a @ state[p + "self_attn.q_proj.weight"].T).view(t, heads, dim).transpose(0, 1)
    k = (a @ state[p + "self_attn.k_proj.weight"].T).view(t, kv_heads, dim).transpose(0, 1)
    v = (a @ state[p + "self_attn.v_proj.weight"].T).view(t, kv_heads, dim).transpose(0, 1)
    k, v = k.repeat_interleave(heads // kv_heads, 0), v.repeat_interleave(heads // kv_heads, 0)
    scores = (rope(q) @ rope(k).transpose(1, 2)) / dim**0.5
    attn = scores.masked_fill(~torch.ones(t, t).tril().bool(), float("-inf")).softmax(-1) @ v
    h = h + attn.transpose(0, 1).reshape(t, width) @ state[p + "self_attn.o_proj.weight"].T
    m = norm(h, state[p + "post_attention_layernorm.weight"])
    h = (
        h
        + (F.silu(m @ state[p + "mlp.gate_proj.weight"].T) * (m @ state[p + "mlp.up_proj.weight"].T))
        @ state[p + "mlp.down_proj.weight"].T
    )
    return (norm(h, state["norm.weight"]) @ state["lm_head.weight"].T).numpy()


@pytest.fixture(scope="module")
def setup(tmp_path_factory, embedded_folder):
    """Two 8-layer targets (our Llama; Qwen3 through the adapter) and one converted EAGLE-3."""
    root = tmp_path_factory.mktemp("eagle3")
    llama = root / "llama"
    write_random_llama(llama, tiny_config(num_hidden_layers=LAYERS), embedded_folder)
    qwen3 = write_arch_folder(root / "qwen3", arch_config("qwen3", num_hidden_layers=LAYERS), embedded_folder)
    state = upstream_state()
    upstream = write_upstream(root / "upstream", state)
    converted = root / "converted"
    result = invoke_cli("convert", upstream, converted, "-M", llama)
    assert result.exit_code == 0, result.output
    return {"llama": llama, "qwen3": qwen3, "state": state, "upstream": upstream, "converted": converted}


def test_conversion_detects_eagle3_and_keeps_upstream_keys(setup):
    assert detect_format(setup["upstream"]) == "eagle3"
    weights = mx.load(str(setup["converted"] / "model.safetensors"))
    assert set(weights) == set(setup["state"])
    assert json.loads((setup["converted"] / "config.json").read_text())["model_type"] == "eagle3_drafter"
    assert np.array_equal(np.array(weights["d2t"]), setup["state"]["d2t"].numpy())


@pytest.mark.parametrize("target", ["llama", "qwen3"])
def test_taps_are_the_inputs_of_mlx_lm_layers_2_4_5(setup, target):
    """The features the loop hands EAGLE-3 equal what enters mlx-lm's own decoder layers."""
    ours = load(str(setup[target])).model
    tokens = mx.array([[5, 900, 31, 7000, 12, 44]])
    taps = target_layers(LAYERS)
    assert taps == (2, 4, 5)
    rows = ours(tokens, ours.make_cache(), taps=taps)
    reference, _ = load_model(setup[target])
    h, entering = reference.model.embed_tokens(tokens), []
    for layer in reference.model.layers:
        entering.append(h)
        h = layer(h, "causal", None)
    expected = mx.concatenate([reference.model.norm(h), *(entering[i] for i in taps)], axis=-1)
    assert rows.shape == (1, 6, 4 * 64)
    assert relative_error(rows, expected) < FLOAT32_RTOL


def test_forward_matches_upstream_restated_in_torch(setup):
    loaded = load(str(setup["llama"]))
    eagle = load_drafter_for(loaded, str(setup["converted"]))
    assert isinstance(eagle, Eagle3) and eagle.target_layers == (2, 4, 5)
    rng = np.random.default_rng(0)
    tokens, features = [3, 77, 1200, 9, 31000], rng.normal(size=(5, 3 * 64)).astype(np.float32)
    out = eagle(mx.array([tokens]), mx.array(features)[None], KVCache(1), mx.arange(5)[None], "causal")
    embedding = np.array(loaded.model.embedding.weight)
    expected = torch_eagle3(setup["state"], embedding, tokens, features)
    assert relative_error(eagle.draft_logits(out, None)[0], expected) < FLOAT32_RTOL
    head_ids = mx.array([0, 5, DRAFT_VOCAB - 1])
    assert (
        eagle.vocab_ids(head_ids).tolist()
        == (np.array([0, 5, DRAFT_VOCAB - 1]) + setup["state"]["d2t"].numpy()[[0, 5, DRAFT_VOCAB - 1]]).tolist()
    )


@pytest.mark.parametrize("target", ["llama", "qwen3"])
def test_greedy_decoding_with_eagle3_is_plain_decoding(setup, target):
    loaded = load(str(setup[target]))
    eagle = load_drafter_for(loaded, str(setup["converted"]))
    for text in PROMPTS:
        ids = encode_prompt(loaded.tokenizer, text)
        expected, _ = collect(generate_ar(loaded.model, ids, max_tokens=16))
        for shape in (TreeShape(3, 4, 3), TreeShape(2, 5, 4, node_budget=5)):
            plan = DraftPlan(shape, lookup=False)
            tokens, stats = collect(generate_redrafter(loaded.model, eagle, ids, plan, max_tokens=16))
            assert tokens == expected, shape
            assert sum(stats.verified_tokens) > len(stats.verified_tokens)  # trees were verified


def test_bad_checkpoints_are_one_line_and_write_nothing(setup, tmp_path):
    state = upstream_state()
    cases = {
        "no-d2t": ({k: v for k, v in state.items() if k != "d2t"}, CONFIG, "missing key 'd2t'"),
        "narrow-fc": (state | {"fc.weight": torch.zeros(64, 2 * 64)}, CONFIG, "shape mismatch for 'fc.weight'"),
        "other-vocab": (state, CONFIG | {"vocab_size": 32000}, "shape mismatch for 't2d'"),
    }
    for name, (bad_state, config, message) in cases.items():
        out = tmp_path / f"{name}-out"
        source = write_upstream(tmp_path / name, bad_state, config)
        assert_one_line_error(invoke_cli("convert", source, out, "-M", setup["llama"]), 1, message)
        assert not out.exists()


def test_bench_compares_eagle3_with_other_drafters(setup):
    result = invoke_cli(
        *("bench", "-M", setup["qwen3"], "--drafters", f"{setup['converted']},{setup['qwen3']}"),
        *("-w", "2", "-l", "3", "-n", "1", "-m", "8", "--skip-mlx-lm", "--json"),
    )
    assert result.exit_code == 0, result.output
    methods = {m["name"].split()[0]: m for m in json.loads(result.stdout)["methods"]}
    assert {"eagle3", "draft-llm"} <= set(methods)
    assert methods["eagle3"]["identical_to_ar"] and methods["draft-llm"]["identical_to_ar"]
