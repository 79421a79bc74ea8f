"""Write a random drafter of a kind's reference shape, for the step-overhead benchmark.

Random weights accept nothing, so each step emits one token and `redrafter bench` measures
the step's overhead alone. Shapes, for the LLM given (default: the embedded SmolLM2-135M):
- redrafter: what `redrafter convert` gives for a vicuna-style checkpoint of Apple's
  ml-recurrent-drafter: exit dim 2 x hidden, 2 ResBlocks, the RNN state update and an untied
  head over the whole vocabulary (for SmolLM2-135M: 1152 wide, 49,152 x 1,152 head);
- eagle: one decoder layer of the LLM's own shape (as EAGLE-Vicuna-7B is for Vicuna-7B);
- medusa: 4 heads of one ResBlock and a full-vocabulary projection each;
- mlp-speculator: 4 stages, inner width = the LLM's hidden size, untied;
- draft-llm: the LLM's architecture cut to 2 layers (a model folder without tokenizer).
    python -m redrafter_mlx.profiling.reference_drafter OUT [--kind K] [--model smollm2-135m] [--seed 0]
    redrafter convert OUT OUT-8k -M smollm2-135m --head-tokens 8192   # redrafter only: trim its head
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import mlx.core as mx
from mlx.utils import tree_flatten
from mlx_lm.models.llama import ModelArgs

from redrafter_mlx.drafting.kinds.eagle import Eagle
from redrafter_mlx.drafting.kinds.eagle import save as save_eagle
from redrafter_mlx.drafting.kinds.medusa import Medusa, MedusaConfig
from redrafter_mlx.drafting.kinds.medusa import save as save_medusa
from redrafter_mlx.drafting.kinds.mlp_speculator import MLPSpeculator, MLPSpeculatorConfig
from redrafter_mlx.drafting.kinds.mlp_speculator import save as save_mlp_speculator
from redrafter_mlx.drafting.kinds.rnn import DrafterConfig, RecurrentDrafter
from redrafter_mlx.drafting.kinds.rnn import save as save_drafter
from redrafter_mlx.formats.target_llm import read_llm_config
from redrafter_mlx.models.llama import Model


def reference_drafter(vocab_size: int, hidden_size: int, seed: int = 0) -> RecurrentDrafter:
    """Reference-shaped drafter with the default (torch.nn.Linear-like) random init."""
    mx.random.seed(seed)
    config = DrafterConfig(vocab_size=vocab_size, hidden_size=hidden_size, num_draft_layers=2, rnn=True)
    drafter = RecurrentDrafter(config)
    mx.eval(drafter.parameters())
    return drafter


def _save_draft_llm(llm: dict[str, Any], out: Path) -> Path:
    config = llm | {"num_hidden_layers": 2}
    model = Model(ModelArgs.from_dict(config))
    mx.eval(model.parameters())
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    mx.save_safetensors(str(out / "model.safetensors"), dict(tree_flatten(model.parameters())))
    return out


def write(kind: str, llm: dict[str, Any], out: Path, seed: int = 0) -> Path:
    """A random drafter of `kind` sized for the LLM config `llm`, saved at `out`."""
    vocab, hidden = llm["vocab_size"], llm["hidden_size"]
    if kind == "redrafter":
        return save_drafter(reference_drafter(vocab, hidden, seed), out)
    mx.random.seed(seed)
    if kind == "draft-llm":
        return _save_draft_llm(llm, out)
    if kind == "eagle":
        drafter, save = Eagle(llm | {"model_type": "eagle_drafter", "num_hidden_layers": 1}), save_eagle
    elif kind == "medusa":
        drafter, save = Medusa(MedusaConfig(vocab, hidden, 4, 1)), save_medusa
    else:
        config = MLPSpeculatorConfig(emb_dim=hidden, inner_dim=hidden, n_predict=4, vocab_size=vocab)
        drafter, save = MLPSpeculator(config), save_mlp_speculator
    mx.eval(drafter.parameters())
    return save(drafter, out)


KINDS = ("redrafter", "eagle", "medusa", "mlp-speculator", "draft-llm")

if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="drafter folder to write (must not hold files)")
    parser.add_argument("--kind", choices=KINDS, default="redrafter")
    parser.add_argument("--model", default="smollm2-135m", help="LLM whose shape to match")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if args.out.exists() and (not args.out.is_dir() or any(args.out.iterdir())):
        parser.error(f"{args.out} exists and is not an empty folder: nothing was written")
    print(write(args.kind, read_llm_config(args.model), args.out, args.seed))
