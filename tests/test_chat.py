"""Chat: cache reuse across turns is exact; piped and real-terminal (tmux) sessions work."""

from __future__ import annotations

import os
import shutil
import subprocess
import time

import mlx.core as mx
import pytest

from redrafter_mlx.api import Pipeline
from redrafter_mlx.chat import ChatSession
from redrafter_mlx.decoding.loop import generate_ar
from redrafter_mlx.drafting.kinds.rnn import save as save_drafter
from redrafter_mlx.options import DecodingOptions
from redrafter_mlx.prompting import encode_messages

from .helpers import REDRAFTER, random_drafter


@pytest.fixture(scope="module")
def drafter_folder(tmp_path_factory):
    return save_drafter(random_drafter(49152, 576, tied=True), tmp_path_factory.mktemp("drafter") / "random")


@pytest.mark.parametrize("use_drafter", [False, True], ids=["ar", "redrafter"])
def test_second_turn_reuses_the_cache_and_equals_a_fresh_run(embedded, use_drafter):
    drafter = random_drafter(49152, 576, tied=True) if use_drafter else None
    session = ChatSession(Pipeline(embedded, drafter, mx.float32), DecodingOptions(max_tokens=12))
    first = [t for step in session.send("What is the capital of France?") for t in step.tokens]
    second = [t for step in session.send("And of Italy?") for t in step.tokens]
    assert session.reused_tokens > 30  # the first turn was not recomputed
    history = [
        {"role": "user", "content": "What is the capital of France?"},
        {"role": "assistant", "content": embedded.tokenizer.decode(first)},
        {"role": "user", "content": "And of Italy?"},
    ]
    ids = encode_messages(embedded.tokenizer, history)
    fresh = [
        t
        for step in generate_ar(embedded.model, ids, max_tokens=12, eos_ids=embedded.tokenizer.eos_token_ids)
        for t in step.tokens
    ]
    assert second == fresh
    assert "Rome" in embedded.tokenizer.decode(second)


def test_piped_stdin_answers_one_prompt_per_line(drafter_folder):
    result = subprocess.run(
        [REDRAFTER, "chat", "-d", str(drafter_folder), "-m", "16"],
        input="What is the capital of France?\nAnd of Germany?\n/stats\n",
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr
    answers = result.stdout.strip().splitlines()
    assert "Paris" in answers[0] and "Berlin" in answers[1]
    assert "tokens/step" in result.stderr and "2 turns" in result.stderr


def tmux(*args: str) -> str:
    return subprocess.run(["tmux", *args], capture_output=True, text=True, check=True).stdout


def wait_for(session: str, text: str, timeout: float = 240) -> str:
    deadline = time.time() + timeout
    while time.time() < deadline:
        screen = tmux("capture-pane", "-p", "-J", "-t", session)  # -J: wrapped lines joined
        if text in screen:
            return screen
        time.sleep(0.5)
    raise AssertionError(f"{text!r} never appeared:\n{screen}")


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux not installed (make installs it as root)")
@pytest.mark.slow
def test_interactive_chat_in_a_real_terminal(drafter_folder):
    session = f"redrafter-test-{os.getpid()}"
    command = f"{REDRAFTER} chat -d {drafter_folder} -m 400"
    tmux("new-session", "-d", "-s", session, "-x", "160", "-y", "50", command)
    try:
        wait_for(session, ">>>")
        tmux("send-keys", "-t", session, "What is the capital of France?", "Enter")
        screen = wait_for(session, "tokens/step")
        assert "Paris" in screen
        tmux("send-keys", "-t", session, "Write a very long story about a dragon.", "Enter")
        time.sleep(3)
        tmux("send-keys", "-t", session, "C-c", "")
        wait_for(session, "[stopped]")
        tmux("send-keys", "-t", session, "/stats", "Enter")
        screen = wait_for(session, "2 turns")
        assert "cut:" not in screen  # an interrupted answer is not reported as cut short
        tmux("send-keys", "-t", session, "/reset", "Enter")
        wait_for(session, "conversation cleared")
        tmux("send-keys", "-t", session, "/quit", "Enter")
        deadline = time.time() + 30
        while (
            time.time() < deadline and session in subprocess.run(["tmux", "ls"], capture_output=True, text=True).stdout
        ):
            time.sleep(0.5)
        assert session not in subprocess.run(["tmux", "ls"], capture_output=True, text=True).stdout
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True)
