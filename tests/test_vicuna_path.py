"""The Vicuna path end to end, as a user runs it: `redrafter convert` an upstream EAGLE, Medusa
or MLP-speculator checkpoint made for a Vicuna, then `generate` / `chat` with it, or with a
vicuna-68m-like `--draft-model`.

Vicuna's weights cannot be downloaded here, so the target is a random Llama with Vicuna's
config scaled down: vocabulary 32000, a SentencePiece `tokenizer.model` only (no
tokenizer.json; Llama-1 style: LlamaTokenizer adding BOS, <unk>=0, <s>=1, </s>=2), model_type
llama, untied lm_head, and a folder name containing "vicuna" (so Vicuna's prompt format is
used). Greedy decoding with every drafter must give exactly the plain (`--mode ar`) answer.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import mlx.core as mx
import pytest
import sentencepiece as spm
from sentencepiece import sentencepiece_model_pb2

from redrafter_mlx.drafting.loading import load_draft_model, load_drafter_for
from redrafter_mlx.errors import InputError
from redrafter_mlx.formats.loading import LoadedModel, load

from .helpers import (
    SpeculatorSizes,
    TorchResBlock,
    assert_one_line_error,
    eagle_upstream_state,
    run_redrafter,
    tiny_config,
    write_medusa_upstream,
    write_random_llama,
    write_sentencepiece_tokenizer,
    write_speculator_upstream,
)

torch = pytest.importorskip("torch")

VOCAB, HIDDEN = 32000, 64
PROMPT = "Name a river."
CHAT_LINES = "Name a river.\nAnd a mountain?\n"
TREE = ("-w", "2", "-l", "3")
KINDS = ("eagle", "medusa", "mlp")


def sentencepiece_32000(root: Path) -> Path:
    """Vicuna's vocabulary size from a small trained BPE model (and its LlamaTokenizer config):
    its ModelProto extended with low-scored NORMAL pieces up to 32000 (the random model emits
    ids anywhere in [0, 32000))."""
    proto = sentencepiece_model_pb2.ModelProto()
    proto.ParseFromString(write_sentencepiece_tokenizer(root).read_bytes())
    known, lowest = {p.piece for p in proto.pieces}, min(p.score for p in proto.pieces)
    extra = (f"▁w{i}" for i in range(VOCAB) if f"▁w{i}" not in known)
    while len(proto.pieces) < VOCAB:
        piece = proto.pieces.add()
        piece.piece, piece.score = next(extra), lowest - len(proto.pieces)
        piece.type = sentencepiece_model_pb2.ModelProto.SentencePiece.NORMAL
    path = root / "tokenizer.model"
    path.write_bytes(proto.SerializeToString())
    sp = spm.SentencePieceProcessor(model_file=str(path))
    assert sp.get_piece_size() == VOCAB and (sp.unk_id(), sp.bos_id(), sp.eos_id()) == (0, 1, 2)
    pieces = [sp.id_to_piece(i) for i in range(VOCAB)]
    assert pieces[:3] == ["<unk>", "<s>", "</s>"] and len(set(pieces)) == VOCAB
    sp.decode(list(range(VOCAB)))  # every id decodes
    return path


def eagle_config(**overrides) -> dict:
    """An upstream EAGLE config: the target's Llama config with one layer."""
    return (
        tiny_config(
            vocab_size=VOCAB,
            hidden_size=HIDDEN,
            num_hidden_layers=1,
            num_key_value_heads=4,
            architectures=["LlamaForCausalLM"],
            hidden_act="silu",
            torch_dtype="float16",
        )
        | overrides
    )


def write_eagle(folder: Path, config: dict) -> None:
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config))
    torch.save(eagle_upstream_state(config, seed=1), folder / "pytorch_model.bin")


@pytest.fixture(scope="module")
def vicuna(tmp_path_factory) -> dict[str, Path]:
    """The tiny Vicuna, a tiny "vicuna-68m" draft model of its tokenizer, and upstream-format
    EAGLE / Medusa / MLP-speculator checkpoints sized for it (vocab 32000, hidden 64)."""
    root = tmp_path_factory.mktemp("vicuna")
    sentencepiece_32000(root / "spm")
    config = tiny_config(
        vocab_size=VOCAB,
        hidden_size=HIDDEN,
        num_key_value_heads=4,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=0,
        architectures=["LlamaForCausalLM"],
    )
    paths = {"vicuna": write_random_llama(root / "tiny-vicuna-7b", config, root / "spm", seed=0)}
    # vicuna-68m's upstream config carries bos/pad ids that are not Vicuna's; harmless, since
    # only token ids cross the seam and the draft model's own tokenizer is never used.
    draft = tiny_config(
        vocab_size=VOCAB,
        hidden_size=32,
        intermediate_size=64,
        num_attention_heads=4,
        num_key_value_heads=4,
        bos_token_id=0,
        eos_token_id=2,
        pad_token_id=1,
    )
    paths["draft"] = write_random_llama(root / "tiny-vicuna-68m", draft, root / "spm", seed=1)

    write_eagle(root / "EAGLE-tiny-vicuna", eagle_config())
    torch.manual_seed(2)
    medusa_heads = torch.nn.ModuleList(  # upstream's medusa_head: 3 heads of one ResBlock
        torch.nn.Sequential(TorchResBlock(HIDDEN), torch.nn.Linear(HIDDEN, VOCAB, bias=False)) for _ in range(3)
    )
    write_medusa_upstream(root / "medusa-tiny-vicuna", medusa_heads.state_dict(), "pt", layers=1)
    write_speculator_upstream(
        root / "mlp-speculator-tiny-vicuna",
        tie=False,
        scale=True,
        layout="hf-bin",
        sizes=SpeculatorSizes(emb=HIDDEN, inner=32, vocab=VOCAB, n=3),
    )
    paths |= {
        "eagle": root / "EAGLE-tiny-vicuna",
        "medusa": root / "medusa-tiny-vicuna",
        "mlp": root / "mlp-speculator-tiny-vicuna",
        "root": root,
    }
    return paths


@pytest.fixture(scope="module")
def loaded(vicuna) -> LoadedModel:
    return load(str(vicuna["vicuna"]), mx.float32)


def test_the_tiny_vicuna_loads_with_its_sentencepiece_tokenizer(vicuna, loaded):
    assert not (vicuna["vicuna"] / "tokenizer.json").exists() and loaded.is_vicuna
    tokenizer = loaded.tokenizer
    assert len(tokenizer._tokenizer) == VOCAB and tokenizer.eos_token_ids == {2}
    assert tokenizer.encode(PROMPT)[0] == 1 and tokenizer.encode(PROMPT, add_special_tokens=False)[0] != 1
    assert isinstance(tokenizer.decode(list(range(VOCAB))), str)  # every id the random model can emit
    assert not loaded.config["tie_word_embeddings"] and "lm_head" in loaded.model


def generate_args(vicuna: dict[str, Path], *extra: str) -> list[str]:
    return ["generate", "-M", str(vicuna["vicuna"]), "-p", PROMPT, "-m", "12", "--json", *extra]


def one_record(result) -> dict:
    assert result.returncode == 0, result.stderr
    (line,) = result.stdout.splitlines()
    return json.loads(line)


@pytest.fixture(scope="module")
def plain(vicuna) -> dict:
    """The plain decoder's answers: `generate --json` and a two-line piped `chat`."""
    record = one_record(run_redrafter(*generate_args(vicuna, "--mode", "ar")))
    assert record["num_tokens"] > 0 and record["prompt_tokens"][0] == 1  # BOS added
    chat = run_redrafter("chat", "-M", str(vicuna["vicuna"]), "--mode", "ar", "-m", "8", stdin=CHAT_LINES)
    assert chat.returncode == 0, chat.stderr
    return {"generate": record, "chat": chat.stdout}


def assert_same_as_plain(vicuna, plain, how: list[str]) -> dict:
    """`generate` and a two-line `chat` drafting `how` give the plain decoder's answers."""
    record = one_record(run_redrafter(*generate_args(vicuna, *how, *TREE)))
    expected = plain["generate"]
    for field in ("prompt_tokens", "tokens", "text", "num_tokens", "finish_reason"):
        assert record[field] == expected[field], field
    assert sum(record["verified_tokens"]) > len(record["verified_tokens"])  # drafts were really verified
    chat = run_redrafter("chat", "-M", str(vicuna["vicuna"]), *how, *TREE, "-m", "8", stdin=CHAT_LINES)
    assert chat.returncode == 0, chat.stderr
    assert chat.stdout == plain["chat"]  # both turns, the second on the first's history
    assert len([line for line in chat.stderr.splitlines() if "tokens/step" in line]) == 2
    return record


@pytest.mark.parametrize("kind", KINDS)
def test_a_converted_upstream_drafter_decodes_like_plain_decoding(vicuna, plain, kind):
    out = vicuna["root"] / f"{kind}-mlx"
    result = run_redrafter("convert", str(vicuna[kind]), str(out), "-M", str(vicuna["vicuna"]))  # format detected
    assert result.returncode == 0, result.stderr
    assert result.stderr.startswith(f"converted a {kind} drafter (float32) -> {out}"), result.stderr
    assert sorted(p.name for p in out.iterdir()) == ["config.json", "model.safetensors"]
    assert_same_as_plain(vicuna, plain, ["--drafter", str(out)])


def test_a_vicuna_68m_like_draft_model_decodes_like_plain_decoding(vicuna, plain):
    assert_same_as_plain(vicuna, plain, ["--draft-model", str(vicuna["draft"])])


@pytest.mark.slow
def test_the_vicuna_as_its_own_drafter_accepts_whole_beams(vicuna, plain):
    """A Llama folder given to --drafter drafts as a small LLM; the target itself as that LLM
    proposes exactly its greedy tokens, so multi-token acceptance (and its detokenizing,
    byte-fallback pieces included) runs through generate and chat."""
    record = assert_same_as_plain(vicuna, plain, ["--drafter", str(vicuna["vicuna"])])
    assert max(record["accepted_per_step"]) == 3 and record["steps"] < record["num_tokens"]


def test_a_draft_model_folder_without_tokenizer_files_drafts(vicuna, loaded, tmp_path):
    """Only token ids cross the seam, so a draft model needs no tokenizer files; a target
    model without them is a one-line error."""
    folder = tmp_path / "vicuna-68m-weights-only"
    folder.mkdir()
    for name in ("config.json", "model.safetensors"):
        shutil.copy(vicuna["draft"] / name, folder / name)
    assert load_draft_model(loaded, str(folder), mx.float32).kind == "draft-llm"
    assert_one_line_error(
        run_redrafter("generate", "-M", str(folder), "-p", "hi", "-m", "2", "--mode", "ar"), 1, "no usable tokenizer"
    )


def nothing_written(parent: Path, out: Path) -> bool:
    return not out.exists() and not any(p.name.startswith(f".{out.name}.") for p in parent.iterdir())


def test_an_eagle_for_another_vocabulary_is_refused(vicuna, tmp_path):
    write_eagle(tmp_path / "EAGLE-other", eagle_config(vocab_size=1000))
    out = tmp_path / "out"
    result = run_redrafter("convert", str(tmp_path / "EAGLE-other"), str(out), "-M", str(vicuna["vicuna"]))
    assert_one_line_error(result, 1, "vocab_size is 1000 but the model's is 32000")
    assert nothing_written(tmp_path, out)


def test_a_wrong_or_unknown_format_is_refused(vicuna, tmp_path):
    out = tmp_path / "out"
    wrong = run_redrafter("convert", str(vicuna["eagle"]), str(out), "--format", "medusa", "-M", str(vicuna["vicuna"]))
    assert_one_line_error(wrong, 1, "no Medusa weights (expected medusa_lm_head.safetensors or medusa_lm_head.pt)")
    unknown = run_redrafter("convert", str(vicuna["eagle"]), str(out), "--format", "x")
    assert_one_line_error(unknown, 2, "--format: choose one of redrafter, medusa, mlp, dflash, eagle3, eagle, got 'x'")
    assert nothing_written(tmp_path, out)


def test_an_unconverted_medusa_folder_as_drafter_is_one_line(vicuna):
    result = run_redrafter(
        "chat", "-M", str(vicuna["vicuna"]), "--drafter", str(vicuna["medusa"]), "-m", "4", stdin="Hi\n"
    )
    assert_one_line_error(result, 1, str(vicuna["medusa"]))


@pytest.mark.parametrize("kind", KINDS)
def test_an_unconverted_upstream_folder_as_drafter_says_to_convert_it(vicuna, loaded, kind):
    """In-process (the CLI prints an InputError's first line, as above for Medusa)."""
    with pytest.raises(InputError, match=re.escape(str(vicuna[kind]))) as error:
        load_drafter_for(loaded, str(vicuna[kind]), mx.float32)
    assert f"upstream {kind} checkpoint: convert it first (`redrafter convert" in str(error.value)
