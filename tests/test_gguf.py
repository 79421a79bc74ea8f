"""GGUF reading and HF-folder export, checked on the embedded SmolLM2-135M GGUF."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import mlx.core as mx
import mlx_lm
import pytest
from mlx_lm.models.llama import Model, ModelArgs

from redrafter_mlx.errors import TargetExists
from redrafter_mlx.formats.export import export_hf_folder
from redrafter_mlx.formats.gguf import GGUFError, GGUFModel, embedded_model_path, read_gguf, unpermute_qk

QUESTION = [{"role": "user", "content": "What is the capital of France?"}]
CHATML_QUESTION = (
    "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
    "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n"
)
MIXED_TEXTS = [
    "Héllo wörld — naïve café, 日本語のテキスト, emoji 😀👍🏽!",
    "def f(x):\n\treturn x ** 2  # square\n\n    if x != 0: print(f'{x=}')",
    "  leading and trailing spaces  \n\n\r\n",
    "Year 2024: 3.14159 × 10^-5, price $1,299.99",
]


def llama_cpp_permute(weight: mx.array, n_head: int) -> mx.array:
    """llama.cpp's convert_hf_to_gguf.py Q/K permutation (HF rotate-half -> interleaved rows)."""
    out_dim, in_dim = weight.shape
    return weight.reshape(n_head, 2, out_dim // n_head // 2, in_dim).swapaxes(1, 2).reshape(out_dim, in_dim)


def greedy_answer(model, tokenizer) -> str:
    prompt = tokenizer.apply_chat_template(QUESTION, add_generation_prompt=True, tokenize=False)
    return mlx_lm.generate(model, tokenizer, prompt, max_tokens=12)


@pytest.fixture(scope="module")
def smol() -> GGUFModel:
    return read_gguf(embedded_model_path())


@pytest.fixture(scope="module")
def exported(smol: GGUFModel, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return export_hf_folder(smol.config, smol.weights, smol.tokenizer, tmp_path_factory.mktemp("hf") / "smol")


def test_config_matches_smollm2(smol: GGUFModel) -> None:
    c = smol.config
    assert (c["model_type"], c["architectures"]) == ("llama", ["LlamaForCausalLM"])
    assert (c["num_hidden_layers"], c["hidden_size"], c["intermediate_size"]) == (30, 576, 1536)
    assert (c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]) == (9, 3, 64)
    assert (c["vocab_size"], c["rope_theta"], c["rms_norm_eps"]) == (49152, 1e5, 1e-5)
    assert c["tie_word_embeddings"] is True and "lm_head.weight" not in smol.weights
    assert (c["bos_token_id"], c["eos_token_id"]) == (1, 2)


def test_weights_are_hf_named_and_dequantized(smol: GGUFModel) -> None:
    assert len(smol.weights) == 2 + 30 * 9
    assert smol.weights["model.embed_tokens.weight"].shape == (49152, 576)  # Q8_0 in the file
    assert smol.weights["model.layers.0.self_attn.k_proj.weight"].shape == (192, 576)  # Q4_1
    assert smol.weights["model.layers.29.mlp.down_proj.weight"].shape == (576, 1536)
    assert all(w.dtype == mx.float32 for w in smol.weights.values())


def test_float16_dtype_is_honoured() -> None:
    weights = read_gguf(embedded_model_path(), dtype=mx.float16).weights
    assert {w.dtype for w in weights.values()} == {mx.float16}


def test_unpermute_inverts_llama_cpp_permutation() -> None:
    # One head of dim 4: HF rows [0, 1, 2, 3] are stored by llama.cpp as [0, 2, 1, 3].
    stored = mx.array([[0.0], [2.0], [1.0], [3.0]])
    assert unpermute_qk(stored, n_head=1).flatten().tolist() == [0.0, 1.0, 2.0, 3.0]
    w = mx.random.normal((3 * 64, 40), key=mx.random.key(0))
    assert mx.array_equal(unpermute_qk(llama_cpp_permute(w, 3), 3), w)
    assert mx.array_equal(llama_cpp_permute(unpermute_qk(w, 3), 3), w)
    assert not mx.array_equal(unpermute_qk(w, 3), w)


def test_exported_folder_answers_paris(exported: Path) -> None:
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= {p.name for p in exported.iterdir()}
    model, tokenizer = mlx_lm.load(str(exported))
    assert "Paris" in greedy_answer(model, tokenizer)


def test_still_permuted_qk_does_not_answer_paris(smol: GGUFModel) -> None:
    """The Paris check can fail: with llama.cpp's row order left in place the model is broken."""
    heads = {"q_proj": smol.config["num_attention_heads"], "k_proj": smol.config["num_key_value_heads"]}
    weights = {
        name: llama_cpp_permute(w, heads[name.split(".")[-2]]) if name.split(".")[-2] in heads else w
        for name, w in smol.weights.items()
    }
    model = Model(ModelArgs.from_dict(smol.config))
    model.load_weights(list(weights.items()))
    assert "Paris" not in greedy_answer(model, smol.tokenizer)


def test_tokenizer_round_trips_mixed_text(smol: GGUFModel) -> None:
    tok = smol.tokenizer
    for text in MIXED_TEXTS:
        ids = tok.encode(text)
        assert tok.decode(ids) == text
        assert tok.unk_token_id not in ids


def test_tokenizer_matches_transformers_gguf_converter(smol: GGUFModel) -> None:
    """An independent build of the same vocabulary (transformers' own GGUF path) agrees on ids."""
    mapping = pytest.importorskip("transformers.integrations.gguf.gguf_tokenizer_mapping")
    _, meta = mx.load(str(embedded_model_path()), format="gguf", return_metadata=True)
    spec = {
        "tokenizer_type": meta["tokenizer.ggml.model"],
        "pre_tokenizer_type": meta["tokenizer.ggml.pre"],
        "tokens": meta["tokenizer.ggml.tokens"],
        "merges": meta["tokenizer.ggml.merges"],
        "token_type": meta["tokenizer.ggml.token_type"].tolist(),
    }
    reference, _ = mapping.convert_gguf_tokenizer("llama", spec)
    for text in MIXED_TEXTS + [CHATML_QUESTION]:
        assert smol.tokenizer.encode(text) == reference.encode(text).ids


def test_special_tokens_and_chat_template(smol: GGUFModel, exported: Path) -> None:
    tok = smol.tokenizer
    assert tok.encode("<|im_start|>") == [1] and tok.encode("<|im_end|>") == [2]
    assert (tok.bos_token_id, tok.eos_token_id, tok.pad_token_id) == (1, 2, 2)
    assert tok.apply_chat_template(QUESTION, add_generation_prompt=True, tokenize=False) == CHATML_QUESTION
    reloaded = mlx_lm.tokenizer_utils.load(exported)
    prompt = reloaded.apply_chat_template(QUESTION, add_generation_prompt=True, tokenize=False)
    assert prompt == CHATML_QUESTION
    assert reloaded.encode(CHATML_QUESTION) == tok.encode(CHATML_QUESTION)


def test_export_refuses_non_empty_folder(tmp_path: Path) -> None:
    target = tmp_path / "mine"
    target.mkdir()
    (target / "notes.txt").write_text("keep me")
    weights = {"w": mx.ones((2, 2))}
    with pytest.raises(TargetExists, match="not empty"):
        export_hf_folder({}, weights, _NoTokenizer(), target)
    assert [p.name for p in target.iterdir()] == ["notes.txt"]
    assert (target / "notes.txt").read_text() == "keep me"
    assert [p.name for p in tmp_path.iterdir()] == ["mine"]  # no staging dir left behind


def test_export_failure_leaves_existing_folder_intact(tmp_path: Path) -> None:
    target = tmp_path / "mine"
    target.mkdir()
    (target / "notes.txt").write_text("keep me")
    with pytest.raises(RuntimeError, match="tokenizer broke"):
        export_hf_folder({}, {"w": mx.ones((2, 2))}, _BrokenTokenizer(), target, force=True)
    assert [p.name for p in target.iterdir()] == ["notes.txt"]
    assert [p.name for p in tmp_path.iterdir()] == ["mine"]


def test_export_force_replaces_folder(tmp_path: Path) -> None:
    target = tmp_path / "mine"
    target.mkdir()
    (target / "notes.txt").write_text("old")
    export_hf_folder({"model_type": "llama"}, {"w": mx.ones((2, 2))}, _NoTokenizer(), target, force=True)
    assert sorted(p.name for p in target.iterdir()) == ["config.json", "model.safetensors"]
    assert json.loads((target / "config.json").read_text()) == {"model_type": "llama"}
    assert [p.name for p in tmp_path.iterdir()] == ["mine"]


class _NoTokenizer:
    def save_pretrained(self, folder: str) -> None:
        pass


class _BrokenTokenizer:
    def save_pretrained(self, folder: str) -> None:
        raise RuntimeError("tokenizer broke")


GARBAGE = bytes(range(256)) * 4


@pytest.mark.parametrize(
    "content",
    [
        b"",
        b"not a gguf at all" + GARBAGE,
        b"GGUF" + GARBAGE,  # these three crash MLX's own parser (segfault) without our header check
        b"GGUF" + struct.pack("<IQQ", 3, 1, 1) + GARBAGE,
        b"GGUF" + struct.pack("<IQQ", 3, 0, 10**6) + GARBAGE,
    ],
    ids=["empty", "no-magic", "magic-then-garbage", "v3-garbage-entries", "v3-huge-count"],
)
def test_garbage_file_is_a_gguf_error(tmp_path: Path, content: bytes) -> None:
    garbage = tmp_path / "model.gguf"
    garbage.write_bytes(content)
    with pytest.raises(GGUFError, match="not a readable GGUF"):
        read_gguf(garbage)


def test_truncated_or_absent_file_is_a_gguf_error(tmp_path: Path) -> None:
    truncated = tmp_path / "partial.gguf"
    with embedded_model_path().open("rb") as f:
        truncated.write_bytes(f.read(300_000))  # cut inside the vocabulary
    with pytest.raises(GGUFError, match="truncated or corrupt"):
        read_gguf(truncated)
    with pytest.raises(GGUFError, match="no such file"):
        read_gguf(tmp_path / "absent.gguf")


def _tiny_llama_metadata() -> dict:
    return {
        "general.architecture": "llama",
        "llama.embedding_length": mx.array(8, dtype=mx.uint32),
        "llama.feed_forward_length": mx.array(16, dtype=mx.uint32),
        "llama.block_count": mx.array(1, dtype=mx.uint32),
        "llama.attention.head_count": mx.array(2, dtype=mx.uint32),
        "llama.attention.head_count_kv": mx.array(1, dtype=mx.uint32),
        "llama.attention.layer_norm_rms_epsilon": mx.array(1e-6, dtype=mx.float32),
        "llama.context_length": mx.array(64, dtype=mx.uint32),
        "tokenizer.ggml.model": "gpt2",
        "tokenizer.ggml.tokens": ["<s>", "a", "b", "ab"],
        "tokenizer.ggml.token_type": mx.array([3, 1, 1, 1], dtype=mx.int32),
        "tokenizer.ggml.merges": ["a b"],
        "tokenizer.ggml.bos_token_id": mx.array(0, dtype=mx.uint32),
        "tokenizer.ggml.eos_token_id": mx.array(0, dtype=mx.uint32),
    }


def _tiny_llama_tensors() -> dict[str, mx.array]:
    shapes = {
        "attn_q": (8, 8), "attn_k": (4, 8), "attn_v": (4, 8), "attn_output": (8, 8),
        "ffn_gate": (16, 8), "ffn_up": (16, 8), "ffn_down": (8, 16), "attn_norm": (8,), "ffn_norm": (8,),
    }  # fmt: skip
    tensors = {f"blk.0.{name}.weight": mx.full(shape, 0.5) for name, shape in shapes.items()}
    tensors["token_embd.weight"] = mx.zeros((4, 8))
    tensors["output_norm.weight"] = mx.ones((8,))
    tensors["output.weight"] = mx.ones((4, 8))
    return tensors


def test_tiny_float_llama_reads_untied(tmp_path: Path) -> None:
    path = tmp_path / "tiny.gguf"
    mx.save_gguf(str(path), _tiny_llama_tensors(), _tiny_llama_metadata())
    tiny = read_gguf(path)
    assert tiny.config["tie_word_embeddings"] is False and "lm_head.weight" in tiny.weights
    assert (tiny.config["head_dim"], tiny.config["vocab_size"], tiny.config["rope_theta"]) == (4, 4, 10000.0)
    assert tiny.tokenizer.encode("ab<s>") == [3, 0]


def test_non_llama_and_incomplete_files_are_gguf_errors(tmp_path: Path) -> None:
    other = tmp_path / "gpt2.gguf"
    gpt2_meta = {**_tiny_llama_metadata(), "general.architecture": "gpt2"}
    mx.save_gguf(str(other), _tiny_llama_tensors(), gpt2_meta)
    with pytest.raises(GGUFError, match="architecture 'gpt2' is not supported"):
        read_gguf(other)
    incomplete = tmp_path / "incomplete.gguf"
    tensors = _tiny_llama_tensors()
    del tensors["blk.0.ffn_up.weight"]
    mx.save_gguf(str(incomplete), tensors, _tiny_llama_metadata())
    with pytest.raises(GGUFError, match="missing, e.g. 'model.layers.0.mlp.up_proj.weight'"):
        read_gguf(incomplete)
    biased = tmp_path / "biased.gguf"
    with_bias = {**_tiny_llama_tensors(), "blk.0.attn_q.bias": mx.zeros((8,))}
    mx.save_gguf(str(biased), with_bias, _tiny_llama_metadata())
    with pytest.raises(GGUFError, match="unsupported GGUF tensor 'blk.0.attn_q.bias'"):
        read_gguf(biased)
