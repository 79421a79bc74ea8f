"""The schedule fuzzer through HTTP: hypothesis draws bursts of concurrent requests to the real
app (chat and token-id completions, greedy and seeded samples, max_tokens 1 to 8, streams
the client drops midway, clients that give up on a whole answer, bad bodies, staggered
arrivals) against the embedded model, its shipped drafter, the adaptive batch policy and the
prompt cache. No valid request may get a 5xx; each answer a client reads whole must be its
own (greedy: `generate`'s alone; seeded: the same request's alone); the server must end idle.
"""

from __future__ import annotations

import argparse
import asyncio
from dataclasses import dataclass

import httpx
import mlx.core as mx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from redrafter_mlx.api import Pipeline, generate
from redrafter_mlx.drafting import TreeShape
from redrafter_mlx.drafting.loading import load_drafter_for
from redrafter_mlx.options import DecodingOptions
from redrafter_mlx.profiling import soak

from .helpers import serving

MODEL = "smollm2-135m"
SHAPE = TreeShape(3, 4, 8)
PROMPTS = [
    "Say yes.",
    "Name a colour.",
    "Write one sentence about the number 7.",
    "Answer with one word: is water wet?",
    "List three fruits.",
]


@pytest.fixture(scope="module")
def pipeline(embedded):
    return Pipeline(embedded, load_drafter_for(embedded, None), mx.float32)


@pytest.fixture(scope="module")
def url(pipeline):
    with serving(pipeline, SHAPE, MODEL) as base:
        yield base


@dataclass(frozen=True)
class Call:
    chat: bool  # else /v1/completions with the prompt's token ids
    prompt: int
    max_tokens: int
    seed: int | None  # None: greedy
    stream: bool
    leaves_after: int | None  # the client leaves: a stream after this many events, a whole answer after this many 10 ms
    delay: int  # 10 ms units after the burst starts
    bad: bool = False  # a body the server must refuse with a 4xx

    def body(self, pipeline: Pipeline) -> dict:
        body = {"model": MODEL, "max_tokens": self.max_tokens, "stream": self.stream}
        body |= {"temperature": 0.0} if self.seed is None else {"temperature": 1.0, "seed": self.seed}
        if self.chat:
            body["messages"] = [{"role": "user", "content": PROMPTS[self.prompt]}]
        else:
            body["prompt"] = token_prompt(pipeline, self.prompt)
        if self.bad:
            body["max_tokens"] = -self.max_tokens
        return body


def token_prompt(pipeline: Pipeline, i: int) -> list[int]:
    return pipeline.loaded.tokenizer.encode(PROMPTS[i])


calls = st.builds(
    Call,
    chat=st.booleans(),
    prompt=st.integers(0, len(PROMPTS) - 1),
    max_tokens=st.integers(1, 8),
    seed=st.one_of(st.none(), st.none(), st.integers(0, 1000)),
    stream=st.booleans(),
    leaves_after=st.one_of(st.none(), st.none(), st.none(), st.integers(1, 20)),
    delay=st.integers(0, 30),
    bad=st.sampled_from([False] * 9 + [True]),
)


async def send(client: httpx.AsyncClient, url: str, call: Call, pipeline: Pipeline) -> tuple[int, str | None]:
    """(status, text): text None when the client left before the answer ended."""
    await asyncio.sleep(call.delay / 100)
    path = "/v1/chat/completions" if call.chat else "/v1/completions"
    body = call.body(pipeline)
    if call.stream:
        async with client.stream("POST", url + path, json=body) as reply:
            if reply.status_code != 200:
                await reply.aread()
                return reply.status_code, None
            text, events = "", 0
            async for line in reply.aiter_lines():
                if not line.startswith("data: {"):
                    continue
                events += 1
                if call.leaves_after is not None and events > call.leaves_after:
                    return 200, None  # leaving the block closes the connection
                chunk = httpx.Response(200, content=line[6:]).json()
                assert "error" not in chunk, chunk
                choice = chunk["choices"][0] if chunk["choices"] else {}
                text += choice.get("delta", {}).get("content", "") if call.chat else choice.get("text", "")
            return 200, text
    timeout = None if call.leaves_after is None else call.leaves_after / 100
    try:
        reply = await client.post(url + path, json=body, timeout=timeout)
    except httpx.TimeoutException:
        return 200, None
    if reply.status_code != 200:
        return reply.status_code, None
    choice = reply.json()["choices"][0]
    return 200, choice["message"]["content"] if call.chat else choice["text"]


_greedy: dict[tuple[bool, int, int], str] = {}  # `generate`'s answers, by (chat, prompt, max_tokens)


def greedy_answer(pipeline: Pipeline, chat: bool, prompt: int, max_tokens: int) -> str:
    key = (chat, prompt, max_tokens)
    if key not in _greedy:
        source = PROMPTS[prompt] if chat else token_prompt(pipeline, prompt)
        _greedy[key] = generate(pipeline, source, DecodingOptions(max_tokens=max_tokens))
    return _greedy[key]


async def burst(url: str, calls: list[Call], pipeline: Pipeline) -> list[tuple[int, str | None]]:
    async with httpx.AsyncClient(timeout=120) as client:
        return await asyncio.gather(*(send(client, url, call, pipeline) for call in calls))


def check(url: str, pipeline: Pipeline, calls: list[Call], alone: dict) -> None:
    replies = asyncio.run(burst(url, calls, pipeline))
    health = soak.idle_health(url + "/v1", 20)
    assert (health["running"], health["queued"]) == (0, 0), health
    for call, (status, text) in zip(calls, replies):
        if call.bad:
            assert 400 <= status < 500, (call, status)
            continue
        assert status == 200, (call, status)
        if text is None:
            continue
        if call.seed is None:
            assert text == greedy_answer(pipeline, call.chat, call.prompt, call.max_tokens), call
        else:
            key = (call.chat, call.prompt, call.max_tokens, call.seed)
            if key not in alone:
                single = Call(call.chat, call.prompt, call.max_tokens, call.seed, False, None, 0)
                alone[key] = asyncio.run(burst(url, [single], pipeline))[0][1]
            assert text == alone[key], call


FUZZ = settings(
    max_examples=12,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    print_blob=True,
)
bursts = st.lists(calls, min_size=1, max_size=12)
_alone: dict = {}  # seeded answers asked alone, by (chat, prompt, max_tokens, seed)


@FUZZ
@given(bursts)
def test_every_burst_of_requests_is_answered_each_with_its_own_answer(url, pipeline, calls):
    check(url, pipeline, calls, _alone)


@pytest.mark.slow
@settings(FUZZ, max_examples=60)
@given(bursts)
def test_every_burst_of_requests_is_answered_each_with_its_own_answer_longer(url, pipeline, calls):
    check(url, pipeline, calls, _alone)


def test_the_soak_tool_counts_what_its_mixed_traffic_met(url):
    """Ten seconds of `profiling.soak`'s mix against the server: every kind of traffic ran, bad
    bodies got 400, no 5xx and no failure, and the server is idle at the end."""
    args = argparse.Namespace(minutes=10 / 60, concurrency=4, seed=1, serve_args="")
    tally = soak.Tally()
    memory = asyncio.run(soak.soak(url + "/v1", None, args, PROMPTS, tally))
    result = soak.report(tally, memory, soak.idle_health(url + "/v1"), None, args)
    assert result["server_errors_5xx"] == 0 and result["failures"] == [], result
    assert result["health_at_end"]["running"] == 0 and result["requests"] >= 8
    assert set(result["by_kind"]["bad body"]) <= {"400"}
    assert result["latency_s"]["short"]["p50"] > 0
