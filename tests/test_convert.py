"""`redrafter convert`: PyTorch drafter checkpoints -> MLX, checked against a PyTorch forward.

The PyTorch drafter below is the reference architecture (Apple's ml-recurrent-drafter
`modeling_drafter.py`) written out here, independent of redrafter_mlx: converted drafters
must reproduce its logits, state updates and beam search (float32).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import NamedTuple

import mlx.core as mx
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from mlx.utils import tree_flatten
from safetensors.torch import save_file
from torch import nn

from redrafter_mlx.decoding.loop import generate_ar, generate_redrafter
from redrafter_mlx.drafting import TreeShape
from redrafter_mlx.drafting.beam_search import beam_search
from redrafter_mlx.drafting.kinds.rnn import RecurrentDrafter, untie_head
from redrafter_mlx.drafting.kinds.rnn import load as load_drafter
from redrafter_mlx.drafting.kinds.rnn import save as save_drafter
from redrafter_mlx.drafting.kinds.rnn_convert import convert_drafter
from redrafter_mlx.drafting.loading import load_drafter_for
from redrafter_mlx.errors import DrafterLoadError
from redrafter_mlx.formats.checkpoint import TORCH_HINT
from redrafter_mlx.formats.loading import EMBEDDED, SHIPPED_DRAFTERS
from redrafter_mlx.prompting import encode_prompt
from redrafter_mlx.tuning import DraftPlan

from .helpers import (
    FLOAT32_RTOL,
    TorchResBlock,
    assert_one_line_error,
    invoke_cli,
    relative_error,
    word_corpus,
    write_word_tokenizer,
)

VOCAB, HIDDEN, LAYERS, EXIT_DIM = 96, 16, 2, 64  # EXIT_DIM != 2 * HIDDEN: has input_proj
LOG_0 = -50000.0  # the reference's log(0) for beams 1.. before the first step
State = dict[str, torch.Tensor]


class TorchDrafter(nn.Module):
    """Reference drafter: head input concat(h, s), s' = silu(rnn_w(E(tok)) + rnn_u(s))."""

    def __init__(self, exit_dim: int):
        super().__init__()
        if exit_dim != 2 * HIDDEN:
            self.input_proj = nn.Linear(2 * HIDDEN, exit_dim)
        blocks = [TorchResBlock(exit_dim) for _ in range(LAYERS)]
        self.lm_head = nn.Sequential(*blocks, nn.Linear(exit_dim, VOCAB, bias=False))
        self.rnn_u = nn.Linear(HIDDEN, HIDDEN)
        self.rnn_w = nn.Linear(HIDDEN, HIDDEN, bias=False)

    def logits(self, h: torch.Tensor, state: torch.Tensor) -> torch.Tensor:
        x = torch.cat([h, state], dim=-1)
        if hasattr(self, "input_proj"):
            x = self.input_proj(x)
        return self.lm_head(x)

    def update_state(self, state: torch.Tensor, token_embeddings: torch.Tensor) -> torch.Tensor:
        return F.silu(self.rnn_w(token_embeddings) + self.rnn_u(state))


def torch_drafter(exit_dim: int = EXIT_DIM, seed: int = 0) -> TorchDrafter:
    """Random N(0, (2/sqrt(fan_in))^2) weights: logit gaps wide enough that float32 rounding
    in two frameworks never reorders beam candidates."""
    torch.manual_seed(seed)
    model = TorchDrafter(exit_dim)
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, 2 / p.shape[-1] ** 0.5)
    return model.eval()


def write_checkpoint(folder: Path, state: State | dict, file: str, exit_dim: int = EXIT_DIM) -> Path:
    """A reference config.json (with fields the converter ignores) and the weights file."""
    folder.mkdir(parents=True, exist_ok=True)
    config = {
        "architectures": ["Drafter"],
        "model_type": "recurrent_drafting_drafter",
        "vocab_size": VOCAB,
        "hidden_size": HIDDEN,
        "exit_dim": exit_dim,
        "num_draft_layers": LAYERS,
        "rnn": True,
        "emb_norm": False,
        "rms_norm_eps": 1e-6,
    }
    (folder / "config.json").write_text(json.dumps(config))
    if file.endswith(".safetensors"):
        save_file({k: v.contiguous() for k, v in state.items()}, str(folder / file))
    else:
        torch.save(state, folder / file)
    return folder


def renamed(rename: Callable[[str], str]) -> Callable[[State], State]:
    return lambda state: {rename(k): v for k, v in state.items()}


class Format(NamedTuple):
    file: str
    store: Callable[[State], State | dict]  # state dict -> what is saved
    src_is_file: bool = False  # SRC names the weights file rather than the folder
    exit_dim: int = EXIT_DIM
    stored_dtype: torch.dtype = torch.float32


FORMATS = {
    "safetensors_reference": Format(
        "model.safetensors",
        lambda s: s | {"emb_norm.weight": torch.ones(HIDDEN)},  # unused, dropped
    ),
    "bin_reference": Format("pytorch_model.bin", lambda s: s, src_is_file=True),
    "pt_training_checkpoint": Format("model.pt", lambda s: {"state_dict": s, "step": 7}),
    "bf16_safetensors": Format(
        "model.safetensors", lambda s: {k: v.bfloat16() for k, v in s.items()}, stored_dtype=torch.bfloat16
    ),
    # TensorRT-LLM examples/redrafter/convert_checkpoint.py (hf_drafter) accepts these names.
    "trtllm_plural_names": Format(
        "model.safetensors",
        renamed(lambda k: k.replace("input_proj.", "input_projs.").replace("lm_head.", "lm_heads.")),
    ),
    "trtllm_head_as_element_0": Format(  # 0.{i}.linear.*, 0.{n}.weight; no input_proj in that form
        "model.pt", renamed(lambda k: k.replace("lm_head.", "0.")), src_is_file=True, exit_dim=2 * HIDDEN
    ),
    "whole_drafter_prefixed_0": Format("pytorch_model.bin", renamed(lambda k: f"0.{k}")),
}


def random_inputs(seed: int, rows: int = 5) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """h, state (rows, HIDDEN) and the LLM embedding table (VOCAB, HIDDEN), float32."""
    rng = np.random.default_rng(seed)
    h, state = rng.normal(0, 1, (2, rows, HIDDEN)).astype(np.float32)
    return h, state, rng.normal(0, 1, (VOCAB, HIDDEN)).astype(np.float32)


@torch.no_grad()
def torch_logits(model: TorchDrafter, h: np.ndarray, state: np.ndarray) -> np.ndarray:
    return model.logits(torch.from_numpy(h), torch.from_numpy(state)).numpy()


@torch.no_grad()
def torch_beam_search(
    model: TorchDrafter,
    embedding: np.ndarray,
    h: np.ndarray,
    token: int,
    width: int,
    length: int,
    top_k: int = 50,
    kept: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """The reference beam search with whole-tensor torch ops: beam 0 at 0, others at LOG_0;
    top-k warp to -inf, log_softmax, keep the W best of W x V; L counts the given token.
    `kept` (K,): the tokens a trimmed head scores (its logits are those columns)."""
    table, context = torch.from_numpy(embedding), torch.from_numpy(h)
    vocab = torch.arange(VOCAB) if kept is None else torch.from_numpy(kept).long()
    beams = torch.full((width, 1), token)
    scores = torch.tensor([0.0] + [LOG_0] * (width - 1))
    states = torch.zeros(width, HIDDEN)
    for _ in range(length - 1):
        states = model.update_state(states, table[beams[:, -1]])
        logits = model.logits(context.expand(width, -1), states)[:, vocab]
        kth = logits.topk(top_k, dim=-1).values[:, -1:]
        log_probs = torch.log_softmax(logits.masked_fill(logits < kth, -torch.inf), dim=-1)
        scores, best = (scores[:, None] + log_probs).flatten().topk(width)
        parents = best // len(vocab)
        beams = torch.cat([beams[parents], vocab[best % len(vocab)][:, None]], dim=1)
        states = states[parents]
    return beams.numpy(), scores.numpy()


@pytest.fixture(scope="module")
def reference() -> TorchDrafter:
    return torch_drafter()


@pytest.fixture(scope="module")
def reference_folder(tmp_path_factory, reference) -> Path:
    """A reference-named safetensors checkpoint shared by the CLI tests."""
    folder = tmp_path_factory.mktemp("ref") / "ckpt"
    return write_checkpoint(folder, reference.state_dict(), "model.safetensors")


@pytest.mark.parametrize("name", sorted(FORMATS))
def test_converted_drafter_matches_torch(tmp_path, name):
    fmt = FORMATS[name]
    model = torch_drafter(fmt.exit_dim, seed=len(name))
    folder = write_checkpoint(tmp_path / "ckpt", fmt.store(model.state_dict()), fmt.file, fmt.exit_dim)
    model = model.to(fmt.stored_dtype).float()  # the weights the file actually holds
    src = folder / fmt.file if fmt.src_is_file else folder
    drafter = load_drafter(convert_drafter(src, tmp_path / "mlx", dtype=mx.float32))
    h, state, embedding = random_inputs(1)
    logits = np.array(drafter.logits(mx.array(h), mx.array(state)))
    assert relative_error(logits, torch_logits(model, h, state)) <= FLOAT32_RTOL
    with torch.no_grad():
        want_state = model.update_state(torch.from_numpy(state), torch.from_numpy(embedding[:5])).numpy()
    new_state = np.array(drafter.update_state(mx.array(state), mx.array(embedding[:5])))
    assert np.abs(new_state - want_state).max() <= 1e-4
    for width, length in ((1, 4), (3, 4), (4, 5)):
        beams, scores = beam_search(drafter, mx.array(embedding), mx.array(h[0]), mx.array(7), width, length)
        want_beams, want_scores = torch_beam_search(model, embedding, h[0], 7, width, length)
        np.testing.assert_array_equal(np.array(beams), want_beams)
        np.testing.assert_allclose(np.array(scores), want_scores, atol=1e-4, rtol=0)


# tolerance: max |error| relative to max |logit| (measured: 0.0008, 0.006, 0.011, 0.16)
@pytest.mark.parametrize(
    ("dtype", "bits", "group_size", "tolerance"),
    [
        ("float16", None, None, 0.003),
        ("bfloat16", None, None, 0.02),
        ("float32", 8, 32, 0.03),
        ("float16", 4, 64, 0.3),
    ],
)
def test_dtype_and_quantization(tmp_path, reference, reference_folder, dtype, bits, group_size, tolerance):
    out = tmp_path / "out"
    quant = ["-q", "--bits", bits, "--group-size", group_size] if bits else []
    result = invoke_cli("convert", reference_folder, out, "--dtype", dtype, *quant)
    assert result.exit_code == 0, result.output
    how = f"{bits}-bit, group size {group_size}" if bits else "not quantized"
    n_params = sum(p.numel() for p in reference.parameters())
    assert result.output.strip() == f"converted {n_params:,} parameters ({dtype}, {how}) -> {out}"
    config = json.loads((out / "config.json").read_text())
    assert config.get("quantization") == ({"group_size": group_size, "bits": bits} if bits else None)
    mx_dtype = getattr(mx, dtype)
    drafter = load_drafter(out, mx_dtype)
    h, state, _ = random_inputs(2)
    logits = np.array(drafter.logits(mx.array(h, mx_dtype), mx.array(state, mx_dtype)).astype(mx.float32))
    want = torch_logits(reference, h, state)
    assert np.abs(logits - want).max() <= tolerance * np.abs(want).max()


def test_model_option_checks_sizes_against_the_llm_config(tmp_path, reference_folder):
    llm = tmp_path / "llm"
    llm.mkdir()
    for vocab in (VOCAB, 32000):
        llm_config = {"model_type": "llama", "vocab_size": vocab, "hidden_size": HIDDEN}
        (llm / "config.json").write_text(json.dumps(llm_config))
        result = invoke_cli("convert", reference_folder, tmp_path / f"out{vocab}", "--model", llm)
    assert (tmp_path / f"out{VOCAB}" / "model.safetensors").is_file()
    assert_one_line_error(result, 1, "drafter vocab_size is 96 but the model's is 32000")
    assert not (tmp_path / "out32000").exists()


def test_model_option_reads_the_embedded_gguf_config(tmp_path, reference_folder):
    result = invoke_cli("convert", reference_folder, tmp_path / "out", "--model", "smollm2-135m")
    assert_one_line_error(result, 1, "drafter vocab_size is 96 but the model's is 49152")


def cut_in_half(file: Path) -> None:
    file.write_bytes(file.read_bytes()[: file.stat().st_size // 2])


def random_bytes(file: Path) -> None:
    file.write_bytes(np.random.default_rng(0).bytes(4096))


WRONG_SHAPE = "shape mismatch for 'lm_head.0.linear.weight': file has (64, 63), config.json implies (64, 64)"
# name -> (weights file, change to the state dict, damage done to the written files, message)
BROKEN = {
    "truncated_safetensors": ("model.safetensors", None, cut_in_half, "unreadable safetensors"),
    "random_safetensors": ("model.safetensors", None, random_bytes, "unreadable safetensors"),
    "random_bin": ("pytorch_model.bin", None, random_bytes, "unreadable PyTorch checkpoint"),
    "missing_key": ("model.safetensors", lambda s: s.pop("rnn_w.weight"), None, "missing key 'rnn_w.weight'"),
    "wrong_shape": (
        "model.safetensors",
        lambda s: s.update({"lm_head.0.linear.weight": torch.zeros(64, 63)}),
        None,
        WRONG_SHAPE,
    ),
    "no_config": ("model.safetensors", None, lambda f: (f.parent / "config.json").unlink(), "no config.json"),
}


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_bad_source_is_one_line_error_and_writes_nothing(tmp_path, reference, case):
    file, edit, damage, message = BROKEN[case]
    state = dict(reference.state_dict())
    if edit:
        edit(state)
    folder = write_checkpoint(tmp_path / "ckpt", state, file)
    if damage:
        damage(folder / file)
    assert_one_line_error(invoke_cli("convert", folder, tmp_path / "out"), 1, message)
    assert [p.name for p in tmp_path.iterdir()] == ["ckpt"]


def test_missing_source_is_one_line_error(tmp_path):
    result = invoke_cli("convert", tmp_path / "nowhere", tmp_path / "out")
    assert_one_line_error(result, 1, "no such file or folder")
    assert list(tmp_path.iterdir()) == []


def test_existing_out_is_kept_without_force_and_replaced_with_it(tmp_path, reference_folder):
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("user data")
    assert_one_line_error(invoke_cli("convert", reference_folder, out), 1, "exists and is not empty")
    assert [p.name for p in out.iterdir()] == ["keep.txt"]
    assert (out / "keep.txt").read_text() == "user data"
    assert invoke_cli("convert", reference_folder, out, "--force").exit_code == 0
    assert sorted(p.name for p in out.iterdir()) == ["config.json", "model.safetensors"]
    assert [p.name for p in tmp_path.iterdir()] == ["out"]  # no staging folders left behind


def test_out_holding_the_source_is_refused_even_with_force(reference_folder):
    result = invoke_cli("convert", reference_folder, reference_folder.parent, "--force")
    assert_one_line_error(result, 1, "holds the source")
    assert (reference_folder / "model.safetensors").is_file()


def test_failed_write_leaves_no_out(tmp_path, monkeypatch, reference_folder):
    """A failure after some files are written must not leave a half-written OUT."""
    import redrafter_mlx.drafting.kinds.rnn_convert as convert_module

    def save_then_fail(drafter, folder):
        (Path(folder) / "config.json").write_text("{}")
        raise OSError("disk full")

    monkeypatch.setattr(convert_module, "save", save_then_fail)
    with pytest.raises(OSError, match="disk full"):
        convert_drafter(reference_folder, tmp_path / "out", dtype=mx.float32)
    assert list(tmp_path.iterdir()) == []


def test_out_gets_the_umask_permissions_not_the_staging_0700(tmp_path, reference_folder):
    umask = os.umask(0o022)
    try:
        out = convert_drafter(reference_folder, tmp_path / "out", dtype=mx.float32)
    finally:
        os.umask(umask)
    assert out.stat().st_mode & 0o777 == 0o755


def test_bin_without_torch_says_how_to_get_it(tmp_path, monkeypatch, reference):
    folder = write_checkpoint(tmp_path / "ckpt", reference.state_dict(), "pytorch_model.bin")
    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` now raises ImportError
    with pytest.raises(DrafterLoadError) as error:
        convert_drafter(folder, tmp_path / "out", dtype=mx.float32)
    assert str(error.value) == TORCH_HINT


def test_safetensors_needs_no_torch(tmp_path, monkeypatch, reference_folder):
    monkeypatch.setitem(sys.modules, "torch", None)
    out = convert_drafter(reference_folder, tmp_path / "out", dtype=mx.float32)
    assert (out / "model.safetensors").is_file()


def test_bad_quantization_settings_are_refused(tmp_path, reference_folder):
    out = tmp_path / "out"
    result = invoke_cli("convert", reference_folder, out, "-q", "--bits", 3)
    assert_one_line_error(result, 1, "bits must be one of (4, 8)")
    assert_one_line_error(invoke_cli("convert", reference_folder, out, "--bits", 8), 2, "need -q/--quantize")
    assert not out.exists()


def test_two_keys_naming_one_weight_are_refused(tmp_path, reference):
    state = reference.state_dict()
    state["lm_heads.2.weight"] = state["lm_head.2.weight"].clone()
    folder = write_checkpoint(tmp_path / "ckpt", state, "model.safetensors")
    with pytest.raises(DrafterLoadError, match="both name 'lm_head.2.weight'"):
        convert_drafter(folder, tmp_path / "out", dtype=mx.float32)
    assert not (tmp_path / "out").exists()


def write_llm_folder(folder: Path) -> Path:
    """All that `--head-tokens` reads of a target LLM: its config (the reference drafter's
    sizes) and a tokenizer with one word per id."""
    folder.mkdir(parents=True)
    config = {
        "model_type": "llama",
        "vocab_size": VOCAB,
        "hidden_size": HIDDEN,
        "num_attention_heads": 4,
        "eos_token_id": 2,
    }
    (folder / "config.json").write_text(json.dumps(config))
    return write_word_tokenizer(folder, VOCAB)


@pytest.fixture(scope="module")
def ranked_llm(tmp_path_factory) -> tuple[Path, Path, list[int]]:
    """(LLM folder, a token corpus for its tokenizer, the ranking the corpus implies)."""
    root = tmp_path_factory.mktemp("ranked")
    text, ranking = word_corpus(VOCAB)
    (root / "corpus.txt").write_text(text)
    return write_llm_folder(root / "llm"), root / "corpus.txt", ranking


def test_head_tokens_keep_the_top_ranked_rows_and_draft_only_them(tmp_path, reference, reference_folder, ranked_llm):
    llm, corpus, ranking = ranked_llm
    out = tmp_path / "out"
    result = invoke_cli("convert", reference_folder, out, "-M", llm, "--head-tokens", 60, "--token-corpus", corpus)
    assert result.exit_code == 0, result.output
    assert "not quantized, head trimmed to 60 of 96 tokens) -> " in result.output
    drafter = load_drafter(out)
    kept = np.array(ranking[:60])
    np.testing.assert_array_equal(drafter.token_ids, kept)
    head = reference.state_dict()[f"lm_head.{LAYERS}.weight"].numpy()
    np.testing.assert_array_equal(np.array(drafter.lm_head[LAYERS].weight), head[kept])
    h, _, embedding = random_inputs(3)
    for width, length in ((1, 4), (4, 5)):
        beams, scores = beam_search(drafter, mx.array(embedding), mx.array(h[0]), mx.array(7), width, length)
        assert set(np.array(beams)[:, 1:].ravel()) <= set(kept.tolist())
        want_beams, want_scores = torch_beam_search(reference, embedding, h[0], 7, width, length, kept=kept)
        np.testing.assert_array_equal(np.array(beams), want_beams)
        np.testing.assert_allclose(np.array(scores), want_scores, atol=1e-4, rtol=0)


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["--head-tokens", 8], 2, "--head-tokens needs -M/--model"),
        (["--token-corpus", "corpus.txt"], 2, "--token-corpus needs --head-tokens"),
        (["-M", "LLM", "--head-tokens", 97], 1, "the head can keep 1 to 96 tokens (the vocabulary), not 97"),
        (["-M", "LLM", "--head-tokens", 8, "--token-corpus", "nowhere.txt"], 1, "nowhere.txt: no such file"),
    ],
)
def test_bad_head_tokens_are_one_line_errors_and_write_nothing(
    tmp_path, reference_folder, ranked_llm, args, code, message
):
    llm = ranked_llm[0]
    args = [llm if a == "LLM" else a for a in args]
    assert_one_line_error(invoke_cli("convert", reference_folder, tmp_path / "out", *args), code, message)
    assert list(tmp_path.iterdir()) == []


def test_a_trimmed_head_keeps_its_own_best_ranked_tokens_when_trimmed_again(tmp_path, reference, reference_folder):
    """A trimmed head's token ids are best first, so trimming it further keeps the first K
    (no LLM needed to rank them): its rows and its drafts are the reference's over those K."""
    ranking = np.random.default_rng(3).permutation(96)[:60].astype(np.int32)
    trimmed = convert_drafter(reference_folder, tmp_path / "trimmed", dtype=mx.float32, head_token_ids=ranking)
    before = (trimmed / "model.safetensors").read_bytes()
    result = invoke_cli("convert", trimmed, tmp_path / "again", "--head-tokens", 25)
    assert result.exit_code == 0, result.output
    assert "head trimmed to 25 of 96 tokens" in result.output
    drafter, kept = load_drafter(tmp_path / "again"), ranking[:25]
    np.testing.assert_array_equal(drafter.token_ids, kept)
    head = reference.state_dict()[f"lm_head.{LAYERS}.weight"].numpy()
    np.testing.assert_array_equal(np.array(drafter.lm_head[LAYERS].weight), head[kept])
    h, _, embedding = random_inputs(3)
    beams, scores = beam_search(drafter, mx.array(embedding), mx.array(h[0]), mx.array(7), 3, 4, draft_top_k=10)
    want_beams, want_scores = torch_beam_search(reference, embedding, h[0], 7, 3, 4, top_k=10, kept=kept)
    np.testing.assert_array_equal(np.array(beams), want_beams)
    np.testing.assert_allclose(np.array(scores), want_scores, atol=1e-4, rtol=0)
    wider = invoke_cli("convert", trimmed, tmp_path / "wider", "--head-tokens", 70)
    assert_one_line_error(wider, 1, "the head is trimmed to 60 tokens; it can keep fewer, not 70")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["again", "trimmed"]
    assert (trimmed / "model.safetensors").read_bytes() == before


@pytest.mark.slow
def test_trimmed_drafter_still_drafts_and_decodes_exactly_like_ar(tmp_path, embedded):
    """A full-vocabulary drafter that drafts well (the shipped one, its head widened to all
    49,152 tokens and untied), trimmed to 8,192 by the shipped corpus ranking: the output is
    AR's token for token, and drafts are still accepted (so head index -> id is right)."""
    shipped = load_drafter(SHIPPED_DRAFTERS[EMBEDDED])
    full = RecurrentDrafter(replace(shipped.config, token_subset_size=None))
    full.load_weights([(k, v) for k, v in tree_flatten(shipped.parameters()) if k != "token_ids"])
    save_drafter(untie_head(full, embedded.model.embedding), tmp_path / "full")
    result = invoke_cli("convert", tmp_path / "full", tmp_path / "trimmed", "-M", EMBEDDED, "--head-tokens", 8192)
    assert result.exit_code == 0, result.output
    drafter = load_drafter_for(embedded, str(tmp_path / "trimmed"))
    assert drafter.config.token_subset_size == 8192 and not drafter.config.head_tied
    eos = embedded.tokenizer.eos_token_ids
    accepted = []
    for prompt in ("What is the capital of France?", "Write a haiku about the sea."):
        ids = encode_prompt(embedded.tokenizer, prompt)
        want = [t for step in generate_ar(embedded.model, ids, max_tokens=24, eos_ids=eos) for t in step.tokens]
        steps = list(
            generate_redrafter(
                embedded.model, drafter, ids, DraftPlan(TreeShape(3, 5, 3), lookup=False), max_tokens=24, eos_ids=eos
            )
        )
        assert [t for step in steps for t in step.tokens] == want
        accepted += steps[-1].stats.accepted_per_step
    assert max(accepted) > 1
