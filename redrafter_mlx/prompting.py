"""Turn a user prompt (and optional system prompt / history) into the ids the model expects.

Tokenizers with a chat template use it (SmolLM2: ChatML). Vicuna checkpoints ship none, so
the Vicuna v1.1 conversation format is written here. Anything else gets the raw text.
"""

from __future__ import annotations

from mlx_lm.tokenizer_utils import TokenizerWrapper

VICUNA_SYSTEM = (
    "A chat between a curious user and an artificial intelligence assistant. "
    "The assistant gives helpful, detailed, and polite answers to the user's questions."
)

Message = dict[str, str]  # {"role": "system"|"user"|"assistant", "content": ...}


def vicuna_prompt(messages: list[Message]) -> str:
    """Vicuna v1.1 format: `SYSTEM USER: q ASSISTANT: a</s>USER: q ASSISTANT:`."""
    system = next((m["content"] for m in messages if m["role"] == "system"), VICUNA_SYSTEM)
    text = system + " "
    for m in messages:
        if m["role"] == "user":
            text += f"USER: {m['content']} "
        elif m["role"] == "assistant":
            text += f"ASSISTANT: {m['content']}</s>"
    return text + "ASSISTANT:"


def encode_messages(
    tokenizer: TokenizerWrapper, messages: list[Message], *, use_chat_template: bool = True, vicuna: bool = False
) -> list[int]:
    """Ids of a conversation, ending with the assistant's turn to speak."""
    if use_chat_template and tokenizer.has_chat_template:
        return list(tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True))
    if use_chat_template and vicuna:
        return tokenizer.encode(vicuna_prompt(messages))
    return tokenizer.encode("\n".join(m["content"] for m in messages if m["role"] != "system"))


def encode_prompt(
    tokenizer: TokenizerWrapper,
    prompt: str,
    *,
    system_prompt: str | None = None,
    use_chat_template: bool = True,
    vicuna: bool = False,
) -> list[int]:
    """Prompt ids exactly as fed to the model (also what `--json` reports)."""
    messages = ([{"role": "system", "content": system_prompt}] if system_prompt else []) + [
        {"role": "user", "content": prompt}
    ]
    return encode_messages(tokenizer, messages, use_chat_template=use_chat_template, vicuna=vicuna)
