"""The drafter flags of `redrafter train` that belong to one kind's recipe: each sets the field
of its name (`train_setup.recipe_field`), and is refused with another kind."""

from __future__ import annotations

from typing import Annotated

import typer

RNN_PANEL, MLP_PANEL = "Drafter: --kind redrafter only", "Drafter: --kind mlp-speculator only"
EAGLE_PANEL, DFLASH_PANEL = "Drafter: --kind eagle only", "Drafter: --kind dflash only"

ExitDim = Annotated[
    int | None,
    typer.Option(
        "--exit-dim",
        rich_help_panel=RNN_PANEL,
        help="Drafter width (default: the LLM's hidden size; <=0: 2 x hidden, the paper's).",
    ),
]

Rnn = Annotated[
    bool,
    typer.Option("--rnn/--no-rnn", rich_help_panel=RNN_PANEL, help="RNN state update (else sum of embeddings)."),
]

Tied = Annotated[
    bool, typer.Option("--tied/--untied", rich_help_panel=RNN_PANEL, help="Tie the head to the LLM embedding.")
]

TokenSubset = Annotated[
    int,
    typer.Option(
        "--token-subset", min=0, rich_help_panel=RNN_PANEL, help="Head vocabulary size K (0: full vocabulary)."
    ),
]

InnerDim = Annotated[
    int | None,
    typer.Option(
        "--inner-dim",
        min=1,
        rich_help_panel=MLP_PANEL,
        show_default=False,
        help="Width of the stages (default: the LLM's hidden size).",
    ),
]

TieWeights = Annotated[
    bool,
    typer.Option(
        "--tie-weights/--no-tie-weights",
        rich_help_panel=MLP_PANEL,
        help="One embedding, head and norm shared by all stages (upstream's tie_weights; needs --predict >= 2).",
    ),
]

ScaleInput = Annotated[
    bool,
    typer.Option(
        "--scale-input/--no-scale-input",
        rich_help_panel=MLP_PANEL,
        help="Start the stages from rms_norm(h) / sqrt(2) (upstream's scale_input).",
    ),
]

EagleLayers = Annotated[
    int,
    typer.Option(
        "--eagle-layers",
        min=1,
        rich_help_panel=EAGLE_PANEL,
        help="Decoder layers, each of the LLM's own shape (upstream's: 1).",
    ),
]

EagleSeq = Annotated[
    int,
    typer.Option(
        "--eagle-seq",
        min=2,
        rich_help_panel=EAGLE_PANEL,
        help="Tokens per training sequence (an answer, longer ones cropped at random); --batch-positions / "
        "--eagle-seq answers per step.",
    ),
]

EagleNoise = Annotated[
    float,
    typer.Option(
        "--eagle-noise",
        min=0.0,
        rich_help_panel=EAGLE_PANEL,
        help="Width of the uniform noise added to the input features (0.2: U(-0.1, 0.1), the paper's).",
    ),
]

EagleRegWeight = Annotated[
    float,
    typer.Option(
        "--eagle-reg-weight",
        min=0.0,
        rich_help_panel=EAGLE_PANEL,
        help="Weight of the SmoothL1 loss on the next feature (upstream's v_w).",
    ),
]

EagleClsWeight = Annotated[
    float,
    typer.Option(
        "--eagle-cls-weight",
        min=0.0,
        rich_help_panel=EAGLE_PANEL,
        help="Weight of the LLM head's cross-entropy on EAGLE's feature (upstream's p_w); --soft-targets 1 "
        "makes its target the LLM's distribution, as upstream.",
    ),
]

EagleStagePrompt = Annotated[
    bool,
    typer.Option(
        "--eagle-stage-prompt/--no-eagle-stage-prompt",
        rich_help_panel=EAGLE_PANEL,
        help="Save the EAGLE to read the prompt's pairs before drafting (upstream's inference); off, it starts "
        "at the first answer token, as it was trained.",
    ),
]

BlockSize = Annotated[
    int,
    typer.Option(
        "--block-size",
        min=2,
        rich_help_panel=DFLASH_PANEL,
        help="The block: the guaranteed token and the positions drafted after it in one forward (z-lab's: 16).",
    ),
]

Anchors = Annotated[
    int,
    typer.Option(
        "--anchors", min=1, rich_help_panel=DFLASH_PANEL, help="Blocks drawn from each answer of a training step."
    ),
]

LossDecay = Annotated[
    float,
    typer.Option(
        "--loss-decay",
        min=0.0,
        rich_help_panel=DFLASH_PANEL,
        help="gamma: block position k weighs exp(-(k - 1) / gamma) in the loss (the paper's 7 for blocks of 16).",
    ),
]

MaskTokenId = Annotated[
    int | None,
    typer.Option(
        "--mask-token-id",
        min=0,
        rich_help_panel=DFLASH_PANEL,
        show_default=False,
        help="The token that fills the block after the guaranteed one (default: the LLM's pad token, else 0).",
    ),
]
