"""Factories, references and constants that several test modules share (fixtures live in
conftest.py). No test module imports another: what two of them need is here."""

from __future__ import annotations

import copy
import json
import math
import os
import shutil
import subprocess
import sys
import threading
import time
from collections import Counter
from contextlib import contextmanager
from dataclasses import fields
from pathlib import Path
from typing import Any, NamedTuple

import httpx
import mlx.core as mx
import numpy as np
import pytest
import sentencepiece as spm
import torch
import torch.nn.functional as F
import uvicorn
from mlx.utils import tree_flatten
from safetensors.torch import save_file
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast
from typer.testing import CliRunner

from redrafter_mlx.cli.main import load_commands
from redrafter_mlx.decoding import GenerationStats, generate_ar, generate_redrafter
from redrafter_mlx.decoding.batch import BatchDecoder, Request
from redrafter_mlx.drafting import TreeShape
from redrafter_mlx.drafting.kinds.dflash import DFlash
from redrafter_mlx.drafting.kinds.eagle import Eagle
from redrafter_mlx.drafting.kinds.medusa import Medusa, MedusaConfig
from redrafter_mlx.drafting.kinds.mlp_speculator import MLPSpeculator, MLPSpeculatorConfig
from redrafter_mlx.drafting.kinds.rnn import DrafterConfig, RecurrentDrafter
from redrafter_mlx.models.llama import Model, ModelArgs
from redrafter_mlx.profiling.load_test import free_port
from redrafter_mlx.serve.app import serve_pipeline
from redrafter_mlx.training import (
    Evaluation,
    Optimisation,
    TrainConfig,
    assemble,
    checkpoint,
    prefill_hidden,
    recipe_type,
    train_drafter,
)
from redrafter_mlx.training.distill_file import DistillRecord
from redrafter_mlx.tuning import DraftPlan, StepPolicy
from redrafter_mlx.tuning.calibration import Calibration, ShapeCost

# --- a step policy that replays ----------------------------------------------------------


class ScriptedPolicy(StepPolicy):
    """Each step's choice by a seeded coin: a plain step with probability `plain_share` (None:
    as likely as each tree), else one of the trees; every switch a decoder can meet (prefill to
    either kind, tree to plain and back, runs of each, one tree's length to another's), the
    same in every run (the real policy follows the machine's timings). `cuts`: its verdict on
    whether drafting pays at a burst is a seeded coin too (else the real policy's)."""

    def __init__(self, shape: TreeShape, seed: int = 0, plain_share: float | None = None, cuts: bool = False):
        super().__init__(shape)
        self.rng, self.plain_share, self.cuts = np.random.default_rng(seed), plain_share, cuts
        self.chosen: list[TreeShape | None] = []

    def choose(self, rows: int, ends=None):
        if self.plain_share is None:
            choice = self.choices[self.rng.integers(len(self.choices))]
        else:
            plain = self.rng.random() < self.plain_share
            choice = None if plain else self.trees[self.rng.integers(len(self.trees))]
        self.chosen.append(choice)
        return choice

    def drafting_pays(self, rows: int, choice) -> bool:
        if not self.cuts:
            return super().drafting_pays(rows, choice)
        return choice is None or bool(self.rng.random() < 0.5)


# --- float32 comparisons -------------------------------------------------------------------

# A float32 forward pass rounds each op at about 6e-8 of the values it handles, and those
# roundings add up over layers, heads and reduction lengths, and differ with the BLAS kernel a
# machine's CPU picks. So two correct float32 computations of the same logits agree to a share
# of the logits' own scale, not to an absolute 1e-4 (measured: 4e-7 to 2.2e-6 of it on this
# project's 2-core development machine, 1.5e-5 on another machine). Bugs (a wrong mask, position or weight)
# move logits by a tenth of their scale and more.
FLOAT32_RTOL = 1e-4


def relative_error(got: Any, expected: Any) -> float:
    """max |got - expected| as a share of the largest |expected|, computed in float64."""
    got, expected = np.asarray(got, np.float64), np.asarray(expected, np.float64)
    return float(np.abs(got - expected).max() / max(np.abs(expected).max(), np.finfo(np.float32).tiny))


# --- tiny random Llamas and decoding ------------------------------------------------------

PROMPTS = ["What is the capital of France?", "Name three colours of the rainbow."]
MORE_PROMPTS = [
    *PROMPTS,
    "Write a Python function that reverses a string.",
    "List the planets of the solar system.",
    "Say hello.",
]
PROBE = mx.array([[1, 520, 33, 871, 4000, 12]])  # token ids (1, 6) whose logits loaded models must agree on
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "tokenizer_config.json", "chat_template.jinja")


def tiny_config(**overrides) -> dict:
    """A small Llama that shares the embedded model's vocabulary (so its tokenizer works)."""
    config = {
        "model_type": "llama",
        "hidden_size": 64,
        "num_hidden_layers": 2,
        "intermediate_size": 128,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "rms_norm_eps": 1e-5,
        "vocab_size": 49152,
        "rope_theta": 10000.0,
        "max_position_embeddings": 2048,
        "tie_word_embeddings": False,
        "eos_token_id": 2,
    }
    return config | overrides


def random_model(config: dict, seed: int = 0) -> Model:
    mx.random.seed(seed)
    model = Model(ModelArgs.from_dict(config))
    # Larger-than-default embeddings so logits are not all near-ties.
    model.model.embed_tokens.weight = mx.random.normal(model.model.embed_tokens.weight.shape) * 0.5
    mx.eval(model.parameters())
    return model


def write_random_llama(folder: Path, config: dict, tokenizer_from: Path, seed: int = 0, shards: int = 1) -> Path:
    """A Hugging Face folder of `random_model(config, seed)`: config.json, the weights (in
    `shards` files with an index when more than one) and the tokenizer files of `tokenizer_from`."""
    folder.mkdir(parents=True, exist_ok=True)
    weights = dict(tree_flatten(random_model(config, seed).parameters()))
    if shards == 1:
        mx.save_safetensors(str(folder / "model.safetensors"), weights)
    else:
        names, index = sorted(weights), {}
        for i in range(shards):
            part = {k: weights[k] for k in names[i::shards]}
            file = f"model-{i + 1:05d}-of-{shards:05d}.safetensors"
            mx.save_safetensors(str(folder / file), part)
            index |= {k: file for k in part}
        (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": index}))
    (folder / "config.json").write_text(json.dumps(config))
    for name in TOKENIZER_FILES:
        if (tokenizer_from / name).exists():
            shutil.copy(tokenizer_from / name, folder / name)
    return folder


def first_layers(model: Model, count: int) -> Model:
    """The model cut to its first `count` layers (same embedding, final norm and head)."""
    args = copy.copy(model.args)
    args.num_hidden_layers = count
    cut = Model(args)
    cut.load_weights(
        [
            (k, v)
            for k, v in tree_flatten(model.parameters())
            if not k.startswith("model.layers.") or int(k.split(".")[2]) < count
        ]
    )
    return cut


def llm_hidden_states(model: Model, records: list[DistillRecord], predict: int) -> tuple[np.ndarray, np.ndarray]:
    """(hidden (N, D), windows (N, T+1)) of every training position of `records`: what
    `training.prepare_data` builds from a distillation file, for in-memory records."""
    return assemble(records, prefill_hidden(model, records), predict)


def collect(steps) -> tuple[list[int], GenerationStats]:
    """All tokens of a decoder's steps, and its final stats."""
    tokens, stats = [], None
    for step in steps:
        tokens += step.tokens
        stats = step.stats
    return tokens, stats


def count_host_reads(monkeypatch) -> Counter:
    """A counter of every way MLX can hand a value to Python (item, tolist, bool/int/float/
    index conversion, numpy, mx.eval), filled as the test runs."""
    reads: Counter = Counter()

    def counting(name, original):
        def wrapper(*args, **kwargs):
            reads[name] += 1
            return original(*args, **kwargs)

        return wrapper

    for name in ("item", "tolist", "__bool__", "__int__", "__float__", "__index__", "__array__"):
        monkeypatch.setattr(mx.array, name, counting(name, getattr(mx.array, name)))
    monkeypatch.setattr(mx, "eval", counting("eval", mx.eval))
    return reads


# --- random drafters of each kind -----------------------------------------------------------


def random_drafter(vocab: int, hidden: int, seed: int = 0, tied: bool = False) -> RecurrentDrafter:
    """Reference architecture (2 ResBlocks, exit 2 * hidden), or a cheap tied-head variant."""
    mx.random.seed(seed)
    shape = {"exit_dim": hidden, "head_tied": True, "num_draft_layers": 1} if tied else {"num_draft_layers": 2}
    drafter = RecurrentDrafter(DrafterConfig(vocab_size=vocab, hidden_size=hidden, rnn=True, **shape))
    mx.eval(drafter.parameters())
    return drafter


def random_eagle(vocab: int, hidden: int, heads: int, kv_heads: int, seed: int = 0) -> Eagle:
    mx.random.seed(seed)
    eagle = Eagle(
        {
            "model_type": "eagle_drafter",
            "hidden_size": hidden,
            "intermediate_size": 2 * hidden,
            "num_attention_heads": heads,
            "num_key_value_heads": kv_heads,
            "num_hidden_layers": 1,
            "rms_norm_eps": 1e-5,
            "vocab_size": vocab,
            "rope_theta": 10000.0,
        }
    )
    mx.eval(eagle.parameters())
    return eagle


def dflash_config(
    hidden: int,
    heads: int,
    kv_heads: int,
    vocab: int,
    layer_ids: tuple[int, ...],
    mask_token_id: int,
    block_size: int = 8,
    layers: int = 1,
) -> dict:
    """A DFlash config.json in z-lab's layout (Qwen3-style, `dflash_config`), scaled down."""
    return {
        "architectures": ["DFlashDraftModel"],
        "model_type": "qwen3",
        "hidden_size": hidden,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads,
        "head_dim": hidden // heads,
        "intermediate_size": 2 * hidden,
        "rms_norm_eps": 1e-6,
        "rope_theta": 10000.0,
        "max_position_embeddings": 2048,
        "vocab_size": vocab,
        "block_size": block_size,
        "dflash_config": {"target_layer_ids": list(layer_ids), "mask_token_id": mask_token_id},
    }


def random_dflash(config: dict, seed: int = 0) -> DFlash:
    mx.random.seed(seed)
    dflash = DFlash(config)
    mx.eval(dflash.parameters())
    return dflash


def random_medusa(vocab: int, hidden: int, heads: int, layers: int = 1, seed: int = 0) -> Medusa:
    mx.random.seed(seed)
    medusa = Medusa(MedusaConfig(vocab, hidden, heads, layers))
    mx.eval(medusa.parameters())
    return medusa


def random_speculator(emb: int, inner: int, vocab: int, n: int, seed: int = 0, **flags: bool) -> MLPSpeculator:
    mx.random.seed(seed)
    config = MLPSpeculatorConfig(emb_dim=emb, inner_dim=inner, n_predict=n, vocab_size=vocab, **flags)
    speculator = MLPSpeculator(config)
    mx.eval(speculator.parameters())
    return speculator


# --- exactness of sampling on a tiny model with an enumerable output space -------------------

TINY_VOCAB = 5
TINY = random_model(tiny_config(vocab_size=TINY_VOCAB, hidden_size=32, intermediate_size=64), seed=11)
TINY_PROMPT = [1, 3, 0, 2]
SEQ_LEN = 3


def exact_sequence_probabilities(
    temperature: float, prompt: list[int] = TINY_PROMPT, model: Any = TINY
) -> dict[tuple[int, ...], float]:
    """p(y1 y2 y3 | prompt) of `model` (a TINY_VOCAB-token LLM) under temperature, by
    enumerating every sequence."""
    probs = {(): 1.0}
    for _ in range(SEQ_LEN):
        grown = {}
        for seq, p in probs.items():
            logits = model.logits(model(mx.array([list(prompt) + list(seq)]), model.make_cache()))[0, -1]
            q = np.array(mx.softmax(logits.astype(mx.float32) / temperature))
            for token in range(TINY_VOCAB):
                grown[seq + (token,)] = p * float(q[token])
        probs = grown
    return probs


def scripted_plan(shape: TreeShape, seed: int = 0, plain_share: float = 0.5) -> DraftPlan:
    """A plan whose steps switch between trees and plain steps at random (`ScriptedPolicy`)."""
    return DraftPlan(shape, policy=ScriptedPolicy(shape, seed, plain_share))


def sample_counts(generate, n: int) -> tuple[Counter, int]:
    """Sequence counts over n runs, and how many drafted tokens were accepted in total."""
    counts, accepted_drafts = Counter(), 0
    for _ in range(n):
        tokens, stats = collect(generate())
        counts[tuple(tokens)] += 1
        accepted_drafts += sum(stats.accepted_per_step) - len(stats.accepted_per_step)
    return counts, accepted_drafts


def chi_square_p_value(counts: Counter, probs: dict, n: int) -> float:
    from scipy.stats import chisquare

    cells = sorted(probs, key=probs.get, reverse=True)
    observed, expected, rest_o, rest_e = [], [], 0, 0.0
    for cell in cells:  # pool rare cells so every expected count is >= 5
        if probs[cell] * n >= 5:
            observed.append(counts[cell])
            expected.append(probs[cell] * n)
        else:
            rest_o += counts[cell]
            rest_e += probs[cell] * n
    observed.append(rest_o)
    expected.append(rest_e)
    expected = np.array(expected) * n / sum(expected)  # float rounding of the enumeration
    return chisquare(observed, expected).pvalue


# --- synthetic device cost curves ------------------------------------------------------------

SHAPE_GRID = [TreeShape(w, length, s) for w in (1, 2, 3, 4, 6, 8) for length in (2, 3, 4, 5, 6, 7) for s in {w, 16}]


def synthetic_costs(accept: float = 0.6) -> dict[TreeShape, ShapeCost]:
    """A drafter whose every beam holds the next token with probability `accept` at every
    depth, independently: depth d is reached with probability (1 - (1 - a)^W)^d. Trees are
    packed with no shared prefix beyond the root (the costliest case)."""
    costs = {}
    for shape in SHAPE_GRID:
        hit = 1 - (1 - accept) ** shape.beam_width
        tokens = 1 + sum(hit**d for d in range(1, shape.beam_length))
        draft = 1.0 + 0.5 * (shape.beam_length - 1) * (1 + shape.search_width / 8)
        costs[shape] = ShapeCost(tokens, draft, {shape.max_packed: 10})
    return costs


def cpu_like(accept: float = 0.6) -> Calibration:
    """Verify cost grows with every token: 70 ms + 4 ms per token (a 2-core CPU)."""
    return Calibration("cpu", "float32", {p: 70.0 + 4.0 * p for p in range(1, 64)}, 3.0, synthetic_costs(accept))


def cpu_like_ms(rows: int, choice: TreeShape | None) -> float:
    """A step's time on a machine that runs as `cpu_like` says, at any batch size: the pass's
    70 ms, 3 ms overhead, 4 ms per verified token and each row's draft (`synthetic_costs`)."""
    if choice is None:
        return 73.0 + 4.0 * rows
    draft = 1.0 + 0.5 * (choice.beam_length - 1) * (1 + choice.search_width / 8)
    return 73.0 + rows * (4.0 * choice.max_packed + draft)


def gpu_like() -> Calibration:
    """Verifying up to 64 tokens costs about as much as one (memory-bound GPU)."""
    return Calibration("gpu", "float16", {p: 20.0 + 0.01 * p for p in range(1, 64)}, 1.0, synthetic_costs())


# --- the CLI ---------------------------------------------------------------------------------

REDRAFTER = shutil.which("redrafter") or str(Path(sys.executable).parent / "redrafter")


def run_redrafter(
    *args: str, env: dict | None = None, stdin: str | None = None, cwd: Path | None = None
) -> subprocess.CompletedProcess:
    """The installed `redrafter` as a user runs it: a subprocess (wide COLUMNS: rich wraps at 80)."""
    return subprocess.run(
        [REDRAFTER, *args],
        capture_output=True,
        text=True,
        input=stdin,
        timeout=600,
        env={**os.environ, "COLUMNS": "200", **(env or {})},
        cwd=cwd,
    )


def invoke_cli(*args: object):
    """`redrafter ...` in-process, through typer's runner (wide COLUMNS: rich wraps at 80)."""
    return CliRunner().invoke(load_commands(), [str(a) for a in args], env={"COLUMNS": "2000"})


def assert_one_line_error(result, code: int = 1, fragment: str = "") -> None:
    """The CLI's error contract: exit status `code` and one line `error: ...` holding `fragment`,
    no traceback. `result`: from `run_redrafter` (its stderr) or `invoke_cli` (its output)."""
    if isinstance(result, subprocess.CompletedProcess):
        status, text = result.returncode, result.stderr
    else:
        status, text = result.exit_code, result.output
    assert status == code, (status, text)
    lines = [line for line in text.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:"), text
    assert "Traceback" not in text
    assert fragment in lines[0], text


# --- upstream checkpoints and their PyTorch forwards, restated independently of redrafter_mlx --


class TorchResBlock(torch.nn.Module):
    """x + silu(linear(x)): the ResBlock of Medusa's heads and of Apple's reference drafter
    (without Medusa's zero init: random weights test more)."""

    def __init__(self, hidden: int):
        super().__init__()
        self.linear = torch.nn.Linear(hidden, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + F.silu(self.linear(x))


def write_medusa_upstream(folder: Path, state: dict[str, torch.Tensor], fmt: str = "pt", layers: int = 1) -> Path:
    """An upstream Medusa checkpoint folder; its config under-counts the heads, as uploaded ones can."""
    folder.mkdir(parents=True, exist_ok=True)
    if fmt == "pt":
        torch.save(state, folder / "medusa_lm_head.pt")
    else:
        save_file({k: v.contiguous() for k, v in state.items()}, str(folder / "medusa_lm_head.safetensors"))
    config = {"medusa_num_heads": 2, "medusa_num_layers": layers, "base_model_name_or_path": "lmsys/vicuna-7b-v1.3"}
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def eagle_upstream_state(config: dict, seed: int = 0) -> dict[str, torch.Tensor]:
    """Random EAGLE weights under the upstream key names (cnets1.py `Model`)."""
    g = torch.Generator().manual_seed(seed)
    h, inter, v = config["hidden_size"], config["intermediate_size"], config["vocab_size"]
    kv = h // config["num_attention_heads"] * config["num_key_value_heads"]

    def rand(*shape):
        return torch.randn(*shape, generator=g) * 0.2

    state = {"embed_tokens.weight": rand(v, h), "fc.weight": rand(h, 2 * h), "fc.bias": rand(h)}
    for i in range(config["num_hidden_layers"]):
        p = f"layers.{i}."
        state |= {
            p + "self_attn.q_proj.weight": rand(h, h),
            p + "self_attn.k_proj.weight": rand(kv, h),
            p + "self_attn.v_proj.weight": rand(kv, h),
            p + "self_attn.o_proj.weight": rand(h, h),
            p + "mlp.gate_proj.weight": rand(inter, h),
            p + "mlp.up_proj.weight": rand(inter, h),
            p + "mlp.down_proj.weight": rand(h, inter),
            p + "post_attention_layernorm.weight": 1 + rand(h),
        }
        if i:
            state[p + "input_layernorm.weight"] = 1 + rand(h)
    return state


def torch_eagle(state: dict, config: dict, tokens: list[int], features: np.ndarray) -> np.ndarray:
    """The upstream EAGLE forward restated: fc(cat(embed, feature)), Llama layers (the first
    without its input norm), rotate-half RoPE at positions 0..T-1, causal attention; no final norm."""
    heads, kv_heads = config["num_attention_heads"], config["num_key_value_heads"]
    eps, theta = config["rms_norm_eps"], config["rope_theta"]

    def norm(x, w):
        return w * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)

    x = torch.tensor(features, dtype=torch.float32)
    t, h = x.shape
    dim = h // heads
    x = torch.cat([state["embed_tokens.weight"][torch.tensor(tokens)], x], -1) @ state["fc.weight"].T + state["fc.bias"]
    inv = 1.0 / theta ** (torch.arange(0, dim, 2).float() / dim)
    angles = torch.arange(t).float()[:, None] * inv[None]
    cos, sin = torch.cat([angles.cos()] * 2, -1), torch.cat([angles.sin()] * 2, -1)

    def rope(q):
        half = q.shape[-1] // 2
        return q * cos + torch.cat([-q[..., half:], q[..., :half]], -1) * sin

    causal = torch.ones(t, t).tril().bool()
    for i in range(config["num_hidden_layers"]):
        p = f"layers.{i}."
        a = norm(x, state[p + "input_layernorm.weight"]) if i else x
        q = (a @ state[p + "self_attn.q_proj.weight"].T).view(t, heads, dim).transpose(0, 1)
        k = (a @ state[p + "self_attn.k_proj.weight"].T).view(t, kv_heads, dim).transpose(0, 1)
        v = (a @ state[p + "self_attn.v_proj.weight"].T).view(t, kv_heads, dim).transpose(0, 1)
        k, v = k.repeat_interleave(heads // kv_heads, 0), v.repeat_interleave(heads // kv_heads, 0)
        scores = (rope(q) @ rope(k).transpose(1, 2)) / dim**0.5
        attn = scores.masked_fill(~causal, float("-inf")).softmax(-1) @ v
        x = x + attn.transpose(0, 1).reshape(t, h) @ state[p + "self_attn.o_proj.weight"].T
        m = norm(x, state[p + "post_attention_layernorm.weight"])
        gate = m @ state[p + "mlp.gate_proj.weight"].T
        x = x + (F.silu(gate) * (m @ state[p + "mlp.up_proj.weight"].T)) @ state[p + "mlp.down_proj.weight"].T
    return x.numpy()


class SpeculatorSizes(NamedTuple):
    emb: int  # the LLM's hidden size
    inner: int
    vocab: int
    n: int  # tokens predicted


SPECULATOR = SpeculatorSizes(emb=24, inner=16, vocab=40, n=3)


class TorchSpeculator(torch.nn.Module):
    """An independent re-statement of fms-extras' MLPSpeculator forward (and its tying)."""

    def __init__(self, tie: bool, scale: bool, sizes: SpeculatorSizes = SPECULATOR):
        super().__init__()
        emb, inner, vocab, n = sizes
        self.scale, self.sizes = scale, sizes
        self.emb = torch.nn.ModuleList([torch.nn.Embedding(vocab, inner) for _ in range(n)])
        self.proj = torch.nn.ModuleList(
            [torch.nn.Linear(emb if i == 0 else inner, inner, bias=False) for i in range(n)]
        )
        self.head = torch.nn.ModuleList([torch.nn.Linear(inner, vocab, bias=False) for _ in range(n)])
        self.ln = torch.nn.ModuleList([torch.nn.Module() for _ in range(n)])
        for ln in self.ln:
            ln.weight = torch.nn.Parameter(1 + 0.3 * torch.randn(inner))
            ln.bias = torch.nn.Parameter(0.3 * torch.randn(inner))
        if tie:
            for i in range(1, n):
                self.emb[i].weight = self.emb[0].weight
                self.head[i].weight = self.head[0].weight
                self.ln[i].weight, self.ln[i].bias = self.ln[0].weight, self.ln[0].bias
            for i in range(2, n):
                self.proj[i].weight = self.proj[1].weight

    @staticmethod
    def rms(x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)

    def forward(self, state: torch.Tensor, tokens: torch.Tensor) -> list[torch.Tensor]:
        """state (B, 1, emb), tokens (B, n): g then the drafted tokens -> n logits (B, 1, vocab)."""
        n, inner = self.sizes.n, self.sizes.inner
        state_weight = 0.5 ** (0.5 / n)
        emb_weight = math.sqrt((1 - state_weight**2) * (inner / 2))
        if self.scale:
            state = self.rms(state) / 2**0.5
        out = []
        for i in range(n):
            state = self.proj[i](state) + self.emb[i](tokens[:, i : i + 1]) * (emb_weight / state_weight)
            ln = self.ln[i]
            state = F.gelu(self.rms(state) * ln.weight + ln.bias)
            out.append(self.head[i](state))
        return out


def write_speculator_upstream(
    folder: Path, tie: bool, scale: bool, layout: str, sizes: SpeculatorSizes = SPECULATOR
) -> TorchSpeculator:
    """An upstream MLP-speculator checkpoint folder: layout "hf-bin" (`speculator.` keys,
    torch.save), "fms-pt" (bare keys, torch.save) or "hf-safetensors" (shared tensors stored once)."""
    torch.manual_seed(int(tie) * 2 + int(scale))
    model = TorchSpeculator(tie, scale, sizes)
    folder.mkdir(parents=True)
    config = {
        "model_type": "mlp_speculator",
        "architectures": ["MLPSpeculatorPreTrainedModel"],
        "emb_dim": sizes.emb,
        "inner_dim": sizes.inner,
        "n_predict": sizes.n,
        "vocab_size": sizes.vocab,
        "top_k_tokens_per_head": [4, 3, 2],
        "n_candidates": 5,
        "tie_weights": tie,
        "scale_input": scale,
    }
    (folder / "config.json").write_text(json.dumps(config))
    if layout == "fms-pt":
        torch.save(model.state_dict(), folder / "model.pt")
    elif layout == "hf-bin":
        torch.save({f"speculator.{k}": v for k, v in model.state_dict().items()}, folder / "pytorch_model.bin")
    else:
        from safetensors.torch import save_model

        wrapper = torch.nn.Module()
        wrapper.speculator = model
        save_model(wrapper, str(folder / "model.safetensors"))
    return model


# --- tokenizers --------------------------------------------------------------------------------

WORD_SPECIALS = ("<unk>", "<s>", "</s>")  # ids 0, 1, 2; the words "w3" ... are ids 3 ...
SENTENCEPIECE_CORPUS = [
    "A chat between a curious user and an artificial intelligence assistant.",
    "USER: What is the capital of France? ASSISTANT: Paris is the capital of France.",
    "USER: Name a river. ASSISTANT: The Danube flows through ten countries.",
    "the quick brown fox jumps over the lazy dog",
]


def write_word_tokenizer(folder: Path, vocab_size: int) -> Path:
    """A Hugging Face tokenizer folder whose vocabulary is WORD_SPECIALS then one word per id."""
    words = {token: i for i, token in enumerate(WORD_SPECIALS)}
    words |= {f"w{i}": i for i in range(len(WORD_SPECIALS), vocab_size)}
    backend = Tokenizer(models.WordLevel(words, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="<unk>", bos_token="<s>", eos_token="</s>")
    tokenizer.save_pretrained(str(folder))
    return folder


def word_corpus(vocab_size: int, seed: int = 0) -> tuple[str, list[int]]:
    """Text in which word id i occurs counts[i] times (0-5: many ties, some never), shuffled,
    and the ranking those counts imply: specials, then by count, ties by id."""
    rng = np.random.default_rng(seed)
    words = list(range(len(WORD_SPECIALS), vocab_size))
    counts = dict(zip(words, rng.integers(0, 6, len(words)).tolist()))
    text = [f"w{i}" for i in words for _ in range(counts[i])]
    rng.shuffle(text)
    lines = "\n".join(" ".join(text[k : k + 7]) for k in range(0, len(text), 7))
    return lines + "\n", [0, 1, 2] + sorted(words, key=lambda i: (-counts[i], i))


def write_sentencepiece_tokenizer(folder: Path) -> Path:
    """A Llama-1 style tokenizer (Vicuna, Llama 2: no tokenizer.json) in `folder`: a BPE
    `tokenizer.model` of 400 pieces trained on SENTENCEPIECE_CORPUS (byte fallback, <unk>=0,
    <s>=1, </s>=2) and the `tokenizer_config.json` of a LlamaTokenizer that adds BOS.
    Returns the tokenizer.model path."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "corpus.txt").write_text("\n".join(SENTENCEPIECE_CORPUS * 20))
    spm.SentencePieceTrainer.train(
        input=str(folder / "corpus.txt"),
        model_prefix=str(folder / "tokenizer"),
        vocab_size=400,
        model_type="bpe",
        byte_fallback=True,
        unk_id=0,
        bos_id=1,
        eos_id=2,
        pad_id=-1,
        minloglevel=2,
    )
    (folder / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "tokenizer_class": "LlamaTokenizer",
                "bos_token": "<s>",
                "eos_token": "</s>",
                "unk_token": "<unk>",
                "add_bos_token": True,
                "add_eos_token": False,
            }
        )
    )
    return folder / "tokenizer.model"


# --- drafter training on tiny random Llamas with a tiny vocabulary -----------------------------

TRAINING_VOCAB = 64


def training_llm(seed: int = 0) -> tuple[Model, dict]:
    """A random tiny Llama of TRAINING_VOCAB tokens, and its config."""
    config = tiny_config(vocab_size=TRAINING_VOCAB)
    return random_model(config, seed), config


def train_config(kind: str = "redrafter", **kw) -> TrainConfig:
    """A small, fast training run of `kind`; `kw` overrides fields of its recipe, optimisation,
    evaluation or the run itself, by name."""
    recipe = recipe_type(kind)
    settings = {
        "lr": 3e-3,
        "warmup_steps": 5,
        "batch_positions": 256,
        "steps": 150,
        "eval_every": 1000,
        "checkpoint_every": 1000,
        "eval_prompts": 0,
        "save_dtype": "float32",
    }
    if kind == "redrafter":
        settings |= {"exit_dim": 64, "layers": 1, "rnn": True, "tied": False, "token_subset": None}
    if "predict" in {f.name for f in fields(recipe)}:
        settings["predict"] = 3
    settings |= kw
    parts = {}
    for name, part in (("recipe", recipe), ("optimisation", Optimisation), ("evaluation", Evaluation)):
        names = {f.name for f in fields(part)}
        parts[name] = part(**{k: settings.pop(k) for k in list(settings) if k in names})
    return TrainConfig(**parts, **settings)


def pattern_records(n: int, length: int = 24, seed: int = 0) -> list[DistillRecord]:
    """Responses y_{k+1} = y_k + step (mod V), step in {1, 2} per sequence: predictable from
    the context, unlike random tokens."""
    rng = np.random.default_rng(seed)
    records = []
    for i in range(n):
        start, step = int(rng.integers(TRAINING_VOCAB)), int(rng.choice([1, 2]))
        prompt = [int(x) for x in rng.integers(0, TRAINING_VOCAB, 4)]
        response = [(start + step * k) % TRAINING_VOCAB for k in range(length)]
        records.append(DistillRecord(f"r{i}", prompt, response, 0.0, "length"))
    return records


def greedy_records(model, n: int, seed: int, length: int = 24) -> list[DistillRecord]:
    """The LLM's own greedy answers to random prompts: what distillation writes."""
    rng = np.random.default_rng(seed)
    records = []
    for i in range(n):
        prompt = [int(x) for x in rng.integers(0, TRAINING_VOCAB, 4)]
        answer, _ = collect(generate_ar(model, prompt, max_tokens=length))
        records.append(DistillRecord(f"g{seed}-{i}", prompt, answer, 0.0, "length"))
    return records


def greedy_tokens_per_step(model, drafter, records) -> float:
    """Mean tokens per step decoding each record's prompt greedily with `drafter` (tree 3 x 4,
    no lookup, 24 tokens), every answer checked to be the record's: the LLM's own."""
    accepted = []
    for r in records:
        plan = DraftPlan(TreeShape(3, 4, 3), lookup=False)
        tokens, stats = collect(generate_redrafter(model, drafter, r.prompt_ids, plan, max_tokens=24))
        assert tokens == r.response_ids  # greedy: the LLM's own answer
        accepted += stats.accepted_per_step
    return float(np.mean(accepted))


def randomised(drafter):
    """The drafter with every parameter random (fresh norms and Medusa's zero ResBlocks test little)."""
    mx.random.seed(11)
    drafter.load_weights([(k, mx.random.normal(v.shape) * 0.3) for k, v in tree_flatten(drafter.parameters())])
    return drafter


def assert_resume_matches(monkeypatch, model, config, data, tmp_path, cfg) -> Path:
    """Train `cfg` (8 steps, a checkpoint every 4) straight through in tmp_path/a, and in
    tmp_path/b interrupted after its step-4 checkpoint, then resumed: the resumed run must end
    with the same weights. Returns the interrupted run's checkpoint folder."""
    straight = dict(tree_flatten(train_drafter(model, config, data, data, tmp_path / "a", cfg).drafter.parameters()))
    _train_until_interrupted(monkeypatch, model, config, data, tmp_path / "b", cfg, stop_after=4)
    folder = tmp_path / "b" / "checkpoint"
    assert json.loads((folder / "train_state.json").read_text())["step"] == 4
    resumed = train_drafter(model, config, data, data, tmp_path / "b", cfg, resume=True)
    assert resumed.steps == 8
    again = dict(tree_flatten(resumed.drafter.parameters()))
    assert again.keys() == straight.keys()
    for k, v in again.items():
        np.testing.assert_allclose(np.array(v), np.array(straight[k]), atol=1e-5, err_msg=k)
    return folder


def _train_until_interrupted(monkeypatch, model, config, data, work, cfg, stop_after: int) -> None:
    """Run `cfg` but raise KeyboardInterrupt right after the checkpoint at `stop_after`."""
    original = checkpoint.save

    def save_then_stop(folder, drafter, opt, state):
        original(folder, drafter, opt, state)
        if state["step"] >= stop_after:
            raise KeyboardInterrupt

    with monkeypatch.context() as patch:
        patch.setattr(checkpoint, "save", save_then_stop)
        with pytest.raises(KeyboardInterrupt):
            train_drafter(model, config, data, data, work, cfg)


def train_cli(tmp_path, model, *options: str):
    """`run(out, *args)`: `redrafter train` of the tiny model on 12 pattern answers into
    tmp_path / out, with `options` and `args` (through typer's runner)."""
    data = tmp_path / "distill.jsonl"
    data.write_text("".join(r.to_json() + "\n" for r in pattern_records(12, length=10)))

    def run(out, *args):
        return invoke_cli(
            "train",
            "-M",
            model,
            "--out",
            tmp_path / out,
            "--skip-distill",
            "--distill-data",
            data,
            "--eval-prompts",
            "0",
            "--batch-positions",
            "16",
            *options,
            *args,
        )

    return run


def assert_refused(run, tmp_path, cases) -> None:
    """Each (args, message): one usage line holding the message, and nothing written."""
    for args, message in cases:
        result = run("refused", *args)
        assert result.exit_code == 2 and len(result.output.strip().splitlines()) == 1, result.output
        assert message in result.output, result.output
        assert not (tmp_path / "refused").exists()


# --- token trees and batches ------------------------------------------------------------------

# A tree of three branches sharing prefixes, written as nodes with parent indices.
#   0 - 1 - 2
#         \ 3
#   \ 4 - 5
TREE_TOKENS = [11, 12, 13, 14, 15, 16]
TREE_PARENTS = [-1, 0, 1, 1, 0, 4]


def ancestors(node: int) -> list[int]:
    path = []
    while node != -1:
        path.append(node)
        node = TREE_PARENTS[node]
    return path[::-1]


def run_batch(
    decoder: BatchDecoder, requests: list[Request], join_every: int = 0, stats: dict | None = None
) -> dict[int, tuple[list[int], str]]:
    """Decode `requests` (all at once, or one joining every `join_every` steps): handle ->
    (tokens, finish reason); `stats` (if given) collects each row's final stats."""
    tokens: dict[int, list[int]] = {}
    reasons: dict[int, str] = {}
    stats = {} if stats is None else stats

    def record(update) -> None:
        tokens.setdefault(update.handle, []).extend(update.tokens)
        if update.finish_reason:
            reasons[update.handle] = update.finish_reason
            stats[update.handle] = update.stats

    waiting = list(enumerate(requests))
    steps = 0
    while waiting or decoder.busy:
        if waiting and (not join_every or steps % join_every == 0 or not decoder.busy):
            joining, waiting = (waiting, []) if not join_every else (waiting[:1], waiting[1:])
            for handle, request in joining:
                decoder.add(handle, request)
        for update in decoder.step():
            record(update)
        steps += 1
    return {h: (tokens[h], reasons[h]) for h in tokens}


# --- the server, in this process ---------------------------------------------------------------


@contextmanager
def serving(pipeline, shape: TreeShape | None, model_id: str = "smollm2-135m", **options):
    """`serve_pipeline`'s app under uvicorn on a free port, in this process; yields its base URL."""
    app = serve_pipeline(pipeline, model_id=model_id, shape=shape, **options)
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=free_port(), log_level="warning"))
    thread = threading.Thread(target=server.run)
    thread.start()
    while not server.started:
        assert thread.is_alive(), "the server did not start"
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{server.config.port}"
    finally:
        server.should_exit = True
        thread.join()


def wait_until_serving(port: int, process: subprocess.Popen, timeout: float) -> None:
    """Poll a server process's /health until it answers; fail if it exits or takes too long."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health").status_code == 200:
                return
        except httpx.HTTPError:
            assert process.poll() is None, f"the server exited: {process.stdout.read()}"
            time.sleep(0.5)
    raise AssertionError(f"no server on port {port} after {timeout} s")
