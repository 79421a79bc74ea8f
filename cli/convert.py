"""`redrafter convert`: a PyTorch-trained drafter (ReDrafter, EAGLE, Medusa, MLP speculator) ->
an MLX drafter folder."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from redrafter_mlx import runtime
from redrafter_mlx.drafting.kinds.rnn import read_config
from redrafter_mlx.drafting.kinds.rnn_convert import convert_drafter, locate_checkpoint, parameter_count
from redrafter_mlx.drafting.registry import FORMATS, convert_upstream, detect_format
from redrafter_mlx.formats.target_llm import head_tokens_for, read_llm_config
from redrafter_mlx.formats.token_ranking import DEFAULT_CORPUS

from .app import UsageError, app, console, friendly_errors
from .options import DTypeOpt

SrcArg = Annotated[
    Path,
    typer.Argument(
        help="Folder with config.json + model.safetensors | pytorch_model.bin | model.pt, or that file.",
        show_default=False,
    ),
]
OutArg = Annotated[Path, typer.Argument(help="MLX drafter folder to write.", show_default=False)]
QuantizeOpt = Annotated[bool, typer.Option("--quantize", "-q", help="Quantize the linear layers.")]
BitsOpt = Annotated[Optional[int], typer.Option("--bits", help="4 | 8 (with -q; default 4).")]
GroupSizeOpt = Annotated[Optional[int], typer.Option("--group-size", help="32 | 64 | 128 (with -q; default 64).")]
CheckModelOpt = Annotated[
    Optional[str],
    typer.Option(
        "--model",
        "-M",
        help="Check vocab_size / hidden_size against this LLM "
        "(reads only its config, and its tokenizer for --head-tokens).",
    ),
]
ForceOpt = Annotated[bool, typer.Option("--force", help="Replace an existing OUT.")]
FormatOpt = Annotated[
    Optional[str],
    typer.Option(
        "--format",
        "-f",
        metavar="FORMAT",
        help=f"The checkpoint's kind: {', '.join(FORMATS)} (default: detected from its files: "
        "medusa_lm_head.*, an MLP speculator's config, a dflash_config, EAGLE's fc layer, else ReDrafter).",
        show_default=False,
    ),
]
HeadTokensOpt = Annotated[
    Optional[int],
    typer.Option(
        "--head-tokens",
        min=1,
        help="Trim the head to the LLM's (-M) K most frequent tokens (in --token-corpus), or a trimmed head to "
        "its own K best-ranked ones; others are never drafted.",
        show_default=False,
    ),
]
TokenCorpusOpt = Annotated[
    Optional[Path],
    typer.Option(
        "--token-corpus",
        help="Text or JSONL (.gz ok) whose tokens rank the vocabulary for --head-tokens "
        "(default: chat answers shipped with the package).",
        show_default=False,
    ),
]


@app.command()
@friendly_errors
def convert(
    src: SrcArg,
    out: OutArg,
    dtype: DTypeOpt = None,
    quantize: QuantizeOpt = False,
    bits: BitsOpt = None,
    group_size: GroupSizeOpt = None,
    model: CheckModelOpt = None,
    head_tokens: HeadTokensOpt = None,
    token_corpus: TokenCorpusOpt = None,
    force: ForceOpt = False,
    format: FormatOpt = None,
) -> None:
    """Convert a PyTorch-trained drafter to MLX: ReDrafter (reference or TensorRT-LLM key
    names), EAGLE-1/2, Medusa or an IBM MLP speculator."""
    if format is not None and format not in FORMATS:
        raise UsageError(f"--format: choose one of {', '.join(FORMATS)}, got {format!r}")
    fmt = format or detect_format(src.expanduser())
    if fmt != "redrafter":
        if quantize or head_tokens is not None or token_corpus is not None:
            raise UsageError(f"-q/--head-tokens/--token-corpus apply to ReDrafter drafters, not to {fmt}")
        llm = read_llm_config(model) if model else None
        path = convert_upstream(fmt, src, out, dtype=runtime.parse_dtype(dtype), llm_config=llm, force=force)
        console.print(
            f"converted a {fmt} drafter ({runtime.dtype_name(runtime.parse_dtype(dtype))}) -> {path}",
            soft_wrap=True,
            markup=False,
        )
        return
    if not quantize and (bits is not None or group_size is not None):
        raise UsageError("--bits / --group-size need -q/--quantize")
    trimmed = head_tokens is not None and read_config(locate_checkpoint(src.expanduser())[0]).token_subset_size
    if head_tokens is not None and model is None and not trimmed:
        raise UsageError("--head-tokens needs -M/--model: the LLM's tokenizer ranks its tokens")
    if token_corpus is not None and head_tokens is None:
        raise UsageError("--token-corpus needs --head-tokens")
    mx_dtype = runtime.parse_dtype(dtype)
    llm_config = read_llm_config(model) if model else None
    head_token_ids = None
    if head_tokens is not None and not trimmed:
        head_token_ids = head_tokens_for(model, llm_config, head_tokens, token_corpus or DEFAULT_CORPUS)
    path = convert_drafter(
        src,
        out,
        dtype=mx_dtype,
        bits=(bits or 4) if quantize else None,
        group_size=group_size or 64,
        llm_config=llm_config,
        head_token_ids=head_token_ids,
        head_tokens=head_tokens,
        force=force,
    )
    config = read_config(path)
    quant = config.quantization
    how = f"{quant['bits']}-bit, group size {quant['group_size']}" if quant else "not quantized"
    if config.token_subset_size:
        how += f", head trimmed to {config.token_subset_size:,} of {config.vocab_size:,} tokens"
    console.print(
        f"converted {parameter_count(config):,} parameters ({runtime.dtype_name(mx_dtype)}, {how}) -> {path}",
        soft_wrap=True,
        markup=False,
    )
