"""From a loaded LLM to its drafter: a drafter folder or hub id of any kind, the one this
package ships for the model, or a small LLM of the same tokenizer (a draft model)."""

from __future__ import annotations

from pathlib import Path

import mlx.core as mx

from ..formats.loading import LoadedModel, ModelLoadError, download, load_draft, shipped_drafter
from ..runtime import default_dtype
from .kinds.draft_llm import DraftLLM
from .registry import load_drafter_folder
from .seam import TreeDrafter


def load_drafter_for(loaded: LoadedModel, name: str | None, dtype: mx.Dtype | None = None) -> TreeDrafter:
    """The drafter (any kind) in folder or hub id `name`, or the one shipped for the model
    (None), checked against the model and made ready for it (`TreeDrafter.for_target`)."""
    if name is None:
        folder = shipped_drafter(loaded)
        if folder is None:
            raise ModelLoadError(
                f"no drafter ships for model {loaded.name!r}: name a drafter folder or hub id "
                "(train one with `redrafter train`, or convert one with `redrafter convert`), "
                "or decode without one"
            )
    else:
        folder = Path(name).expanduser()
        if not folder.exists():
            if name.count("/") != 1 or name.startswith((".", "/", "~")):
                raise ModelLoadError(f"drafter {name!r} not found: not a folder and not a hub id (owner/name)")
            folder = download(name, ["*.json", "*.safetensors"])
    drafter = load_drafter_folder(folder, dtype or default_dtype())
    if isinstance(drafter, DraftLLM):
        drafter.check_tokenizer(loaded.tokenizer, loaded.name)
    return drafter.for_target(loaded.model, loaded.name)


def load_draft_model(loaded: LoadedModel, name: str, dtype: mx.Dtype | None = None) -> TreeDrafter:
    """A small LLM (alias, folder, hub id or .gguf; any architecture the verifier runs) as the
    drafter of `loaded`: it must share the target's tokenizer."""
    draft = load_draft(name, dtype)
    drafter = DraftLLM(draft.model, name, draft.tokenizer)
    drafter.check_tokenizer(loaded.tokenizer, loaded.name)
    return drafter.for_target(loaded.model, loaded.name)
