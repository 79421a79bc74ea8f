"""`redrafter convert`: a PyTorch-trained ReDrafter drafter -> an MLX drafter folder."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from redrafter_mlx import runtime
from redrafter_mlx.convert import convert_drafter, parameter_count, read_llm_config
from redrafter_mlx.drafter import _read_config

from .app import UsageError, app, console, friendly_errors
from .options import DTypeOpt

SrcArg = Annotated[Path, typer.Argument(
    help="Folder with config.json + model.safetensors | pytorch_model.bin | model.pt, or that file.",
    show_default=False,
)]
OutArg = Annotated[Path, typer.Argument(help="MLX drafter folder to write.", show_default=False)]
QuantizeOpt = Annotated[bool, typer.Option("--quantize", "-q", help="Quantize the linear layers.")]
BitsOpt = Annotated[Optional[int], typer.Option("--bits", help="4 | 8 (with -q; default 4).")]
GroupSizeOpt = Annotated[
    Optional[int], typer.Option("--group-size", help="32 | 64 | 128 (with -q; default 64).")
]
CheckModelOpt = Annotated[Optional[str], typer.Option(
    "--model", "-M", help="Check vocab_size / hidden_size against this LLM (reads only its config).",
)]
ForceOpt = Annotated[bool, typer.Option("--force", help="Replace an existing OUT.")]


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
    force: ForceOpt = False,
) -> None:
    """Convert a PyTorch ReDrafter drafter (reference or TensorRT-LLM key names) to MLX."""
    if not quantize and (bits is not None or group_size is not None):
        raise UsageError("--bits / --group-size need -q/--quantize")
    mx_dtype = runtime.parse_dtype(dtype)
    path = convert_drafter(
        src, out, dtype=mx_dtype,
        bits=(bits or 4) if quantize else None, group_size=group_size or 64,
        llm_config=read_llm_config(model) if model else None, force=force,
    )
    config = _read_config(path)
    quant = config.quantization
    how = f"{quant['bits']}-bit, group size {quant['group_size']}" if quant else "not quantized"
    console.print(
        f"converted {parameter_count(config):,} parameters ({runtime.dtype_name(mx_dtype)}, {how}) -> {path}",
        soft_wrap=True, markup=False,
    )
