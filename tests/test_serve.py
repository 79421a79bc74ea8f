"""`redrafter serve`: the real server on a free localhost port, driven with the official
`openai` client and with raw HTTP for the errors; answers equal `generate`'s; a client that
leaves frees its row; SIGTERM drains."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import subprocess
import sys
import time

import httpx
import mlx.core as mx
import numpy as np
import pytest
from openai import AsyncOpenAI, OpenAI
from prometheus_client.parser import text_string_to_metric_families

from redrafter_mlx.api import Pipeline, generate
from redrafter_mlx.decoding.batch import BatchDecoder, Request
from redrafter_mlx.decoding.loop import generate_ar, generate_redrafter
from redrafter_mlx.drafting import TreeShape
from redrafter_mlx.drafting.loading import load_drafter_for
from redrafter_mlx.models.llm import prefill
from redrafter_mlx.options import DecodingOptions
from redrafter_mlx.profiling.load_test import free_port
from redrafter_mlx.prompting import encode_prompt
from redrafter_mlx.serve.app import Batching, Limits
from redrafter_mlx.serve.engine import Engine
from redrafter_mlx.serve.replies import StopMatcher
from redrafter_mlx.tuning import DraftPlan

from .helpers import MORE_PROMPTS, REDRAFTER, collect, random_eagle, serving, wait_until_serving

SHAPE = TreeShape(3, 4, 8)
MODEL = "smollm2-135m"


def running(pipeline: Pipeline, **options):
    """The server on a free port, in this process, drafting SHAPE; yields its base URL."""
    return serving(pipeline, SHAPE if pipeline.drafter else None, MODEL, **options)


@pytest.fixture(scope="module")
def pipeline(embedded):
    return Pipeline(embedded, load_drafter_for(embedded, None), mx.float32)


@pytest.fixture(scope="module")
def url(pipeline):
    with running(pipeline, batching=Batching(max_batch=4)) as base:
        yield base


def expected(pipeline: Pipeline, prompt: str, max_tokens: int) -> str:
    options = DecodingOptions(
        max_tokens=max_tokens,
        beam_width=SHAPE.beam_width,
        beam_length=SHAPE.beam_length,
        search_width=SHAPE.search_width,
    )
    return generate(pipeline, prompt, options)


def chat(client: OpenAI, prompt: str, max_tokens: int, **extra):
    return client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": prompt}], max_tokens=max_tokens, temperature=0, **extra
    )


async def chat_together(url: str, prompts: list[str], max_tokens: int) -> list[str]:
    """Greedy chat answers to `prompts`, all sent at once."""
    client = AsyncOpenAI(base_url=f"{url}/v1", api_key="unused")
    replies = await asyncio.gather(
        *(
            client.chat.completions.create(
                model=MODEL, messages=[{"role": "user", "content": p}], max_tokens=max_tokens, temperature=0
            )
            for p in prompts
        )
    )
    return [r.choices[0].message.content for r in replies]


def test_greedy_chat_answers_equal_generate_alone_and_four_at_once(pipeline, url):
    client = OpenAI(base_url=f"{url}/v1", api_key="unused")
    prompts = MORE_PROMPTS[:4]
    references = [expected(pipeline, p, 24) for p in prompts]
    alone = chat(client, prompts[0], 24)
    assert alone.choices[0].message.content == references[0]
    assert alone.usage.completion_tokens <= 24 and alone.usage.prompt_tokens > 0
    assert alone.model_extra["redrafter"]["tokens_per_step"] >= 1.0

    assert asyncio.run(chat_together(url, prompts, 24)) == references


def test_streamed_chat_and_completions_give_the_same_text(pipeline, url):
    client = OpenAI(base_url=f"{url}/v1", api_key="unused")
    prompt = MORE_PROMPTS[2]
    pieces, usage, finish = [], None, None
    for chunk in chat(client, prompt, 20, stream=True, stream_options={"include_usage": True}):
        if chunk.choices:
            pieces.append(chunk.choices[0].delta.content or "")
            finish = chunk.choices[0].finish_reason or finish
        if chunk.usage:
            usage = chunk.usage
    assert "".join(pieces) == expected(pipeline, prompt, 20)
    assert finish in ("stop", "length") and usage.completion_tokens >= 1

    plain = client.completions.create(model=MODEL, prompt="The capital of France is", max_tokens=12, temperature=0)
    streamed = "".join(
        c.choices[0].text
        for c in client.completions.create(
            model=MODEL, prompt="The capital of France is", max_tokens=12, temperature=0, stream=True
        )
    )
    assert plain.choices[0].text == streamed and plain.choices[0].text


def test_stop_strings_cut_the_text_before_them(url):
    client = OpenAI(base_url=f"{url}/v1", api_key="unused")
    full = client.completions.create(model=MODEL, prompt="Count: 1, 2, 3,", max_tokens=16, temperature=0)
    text = full.choices[0].text
    assert "," in text
    cut = client.completions.create(model=MODEL, prompt="Count: 1, 2, 3,", max_tokens=16, temperature=0, stop=[","])
    assert cut.choices[0].text == text[: text.index(",")] and cut.choices[0].finish_reason == "stop"


def test_stop_matcher_holds_back_a_possible_start():
    stops = StopMatcher(["END", "\n\n"])
    assert stops.feed("abc E") == ("abc ", False)
    assert stops.feed("N") == ("", False)
    assert stops.feed("Dx") == ("", True)
    other = StopMatcher(["END"])
    assert other.feed("EN") == ("", False) and other.feed("Z") == ("ENZ", False)


def test_sampled_requests_follow_their_seed_and_temperature(pipeline, url):
    """A seed repeats its answer and another seed draws another one; temperature 0 gives the
    greedy answer and temperature 1 something else (32 tokens at temperature 1: a server that
    ignored the seed or the temperature would fail one of these)."""
    client = OpenAI(base_url=f"{url}/v1", api_key="unused")
    prompt, length = "Tell a joke.", 32

    def answer(temperature: float, seed: int) -> str:
        reply = client.chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": prompt}],
            max_tokens=length,
            temperature=temperature,
            seed=seed,
        )
        return reply.choices[0].message.content

    five, again, six = answer(1.0, 5), answer(1.0, 5), answer(1.0, 6)
    greedy = answer(0.0, 5)
    assert five == again
    assert five != six
    assert greedy == expected(pipeline, prompt, length)
    assert greedy not in (five, six)


BAD = [
    (b'{"model": "smollm2-135m", "prompt": ', 400, "not valid JSON"),
    (b'{"model": "smollm2-135m", "prompt": "hi", "best_of": 2}', 400, "best_of: unknown field"),
    (b'{"model": "smollm2-135m", "prompt": "hi", "max_tokens": "many"}', 400, "max_tokens"),
    (b'{"model": "smollm2-135m", "prompt": "hi", "max_tokens": -5}', 400, "max_tokens"),
    (b'{"model": "smollm2-135m", "prompt": "hi", "max_tokens": 10000000}', 400, "context"),
    (b'{"model": "smollm2-135m", "prompt": "hi", "n": 2}', 400, "n:"),
    (b'{"model": "smollm2-135m", "prompt": "hi", "temperature": -1}', 400, "temperature"),
    (b'{"model": "smollm2-135m", "prompt": [1, 99999999]}', 400, "token ids"),
    (b'{"model": "gpt-4", "prompt": "hi"}', 404, "not served here"),
    (b'{"prompt": "hi"}', 400, "model"),
]


@pytest.mark.parametrize("body, status, fragment", BAD)
def test_bad_requests_get_openai_shaped_4xx(url, body, status, fragment):
    reply = httpx.post(f"{url}/v1/completions", content=body, headers={"content-type": "application/json"})
    assert reply.status_code == status
    error = reply.json()["error"]
    assert fragment in error["message"] and error["type"]


NEUTRAL_CHAT = {  # what LangChain / AI-SDK shaped clients send when they mean "nothing special"
    "logprobs": False,
    "top_logprobs": 0,
    "logit_bias": {},
    "response_format": {"type": "text"},
    "tool_choice": "none",
    "presence_penalty": 0,
    "n": 1,
}


def test_neutral_fields_clients_send_are_answered_and_others_named(url, pipeline):
    chat = {"model": MODEL, "messages": [{"role": "user", "content": "Say hi."}], "max_tokens": 6, "temperature": 0}
    plain = httpx.post(f"{url}/v1/chat/completions", json=chat).json()["choices"][0]["message"]["content"]
    neutral = httpx.post(f"{url}/v1/chat/completions", json=chat | NEUTRAL_CHAT)
    assert neutral.status_code == 200, neutral.text
    assert neutral.json()["choices"][0]["message"]["content"] == plain
    completion = {"model": MODEL, "prompt": "hi", "max_tokens": 4, "logprobs": None, "logit_bias": {}}
    assert httpx.post(f"{url}/v1/completions", json=completion).status_code == 200
    for field, value in [
        ("logit_bias", {"99999999": 5}),
        ("response_format", {"type": "json_object"}),
        ("tool_choice", "auto"),
        ("top_logprobs", 3),
    ]:
        reply = httpx.post(f"{url}/v1/chat/completions", json=chat | {field: value})
        assert reply.status_code == 400 and reply.json()["error"]["message"].startswith(field), (field, reply.text)


def test_logit_bias_is_exact_in_decoding_and_served(pipeline, url):
    """Greedy decoding with a bias equals plain decoding with the same bias (whose first token
    is the argmax of the biased logits, computed here), not the unbiased answer."""
    model, drafter = pipeline.loaded.model, pipeline.drafter
    ids = encode_prompt(pipeline.tokenizer, "Name three colours.")
    unbiased, _ = collect(generate_ar(model, ids, max_tokens=12))
    options = DecodingOptions(logit_bias=((unbiased[0], -100.0), (unbiased[1], 3.0)))
    plain, _ = collect(generate_ar(model, ids, max_tokens=12, sampler=options.sampler()))
    drafted, _ = collect(
        generate_redrafter(model, drafter, ids, DraftPlan(SHAPE), max_tokens=12, sampler=options.sampler())
    )
    logits = np.array(model.logits(prefill(model, mx.array(ids, mx.uint32), model.make_cache())[-1]))
    logits[unbiased[0]] -= 100.0
    logits[unbiased[1]] += 3.0
    assert drafted == plain and plain[0] == int(logits.argmax()) != unbiased[0]
    banned = DecodingOptions(
        max_tokens=12,
        beam_width=SHAPE.beam_width,
        beam_length=SHAPE.beam_length,
        search_width=SHAPE.search_width,
        logit_bias=((unbiased[0], -100.0),),
    )
    chat = {"model": MODEL, "messages": [{"role": "user", "content": "Name three colours."}], "temperature": 0}
    biased = chat | {"max_tokens": 12, "logit_bias": {unbiased[0]: -100}}
    reply = httpx.post(f"{url}/v1/chat/completions", json=biased, timeout=120)  # a busy CI machine is slow
    assert reply.status_code == 200, reply.text
    assert reply.json()["choices"][0]["message"]["content"] == generate(pipeline, "Name three colours.", banned)


def test_logprobs_are_the_models_own_log_softmax_at_each_returned_token(pipeline, url):
    model, tokenizer = pipeline.loaded.model, pipeline.tokenizer
    ids = encode_prompt(tokenizer, "Name three colours.")
    answer, _ = collect(generate_ar(model, ids, max_tokens=8))
    every = mx.array(ids + answer, mx.uint32)
    logits = np.array(model.logits(prefill(model, every, model.make_cache())), dtype=np.float64)
    peak = logits.max(-1, keepdims=True)
    logprobs = logits - peak - np.log(np.exp(logits - peak).sum(-1, keepdims=True))
    expected = [logprobs[len(ids) - 1 + i, t] for i, t in enumerate(answer)]
    body = {"model": MODEL, "prompt": ids, "max_tokens": 8, "temperature": 0, "logprobs": 2}
    got = httpx.post(f"{url}/v1/completions", json=body).json()["choices"][0]["logprobs"]
    assert got["tokens"] == [tokenizer.decode([t]) for t in answer]
    assert np.allclose(got["token_logprobs"], expected, atol=1e-3)
    for i, top in enumerate(got["top_logprobs"]):  # greedy: the token is the likeliest
        assert len(top) == 2 and max(top.values()) == pytest.approx(expected[i], abs=1e-3)
    chat = {"model": MODEL, "messages": [{"role": "user", "content": "Say hi."}], "max_tokens": 6, "temperature": 0}
    chat |= {"logprobs": True, "top_logprobs": 3}
    whole = httpx.post(f"{url}/v1/chat/completions", json=chat).json()["choices"][0]
    content = whole["logprobs"]["content"]
    assert "".join(c["token"] for c in content) == whole["message"]["content"]
    for c in content:
        top = [t["logprob"] for t in c["top_logprobs"]]
        assert len(top) == 3 and top == sorted(top, reverse=True) and top[0] == pytest.approx(c["logprob"], abs=1e-5)
    streamed = []
    with httpx.stream("POST", f"{url}/v1/chat/completions", json=chat | {"stream": True}) as reply:
        for line in reply.iter_lines():
            if line.startswith("data: {"):
                streamed += (json.loads(line[6:])["choices"][0].get("logprobs") or {}).get("content", [])
    assert [c["token"] for c in streamed] == [c["token"] for c in content]  # the same answer, in pieces
    assert np.allclose([c["logprob"] for c in streamed], [c["logprob"] for c in content], atol=1e-4)


def test_metrics_parse_as_prometheus_and_count_what_was_served(url, caplog):
    def scrape() -> dict[str, float]:
        text = httpx.get(f"{url}/metrics").text
        return {
            s.name + str(sorted(s.labels.items())): s.value
            for f in text_string_to_metric_families(text)
            for s in f.samples
        }

    before = scrape()
    caplog.set_level(logging.INFO, logger="redrafter.access")
    chat = {"model": MODEL, "messages": [{"role": "user", "content": "Say hi."}], "max_tokens": 6, "temperature": 0}
    body = httpx.post(f"{url}/v1/chat/completions", json=chat).json()
    after = scrape()

    def grew(name: str) -> float:
        return after.get(name, 0.0) - before.get(name, 0.0)

    finish = body["choices"][0]["finish_reason"]
    assert grew(f"redrafter_requests_total[('endpoint', 'chat'), ('finish_reason', '{finish}')]") == 1
    assert grew("redrafter_completion_tokens_total[]") == body["usage"]["completion_tokens"]
    assert grew("redrafter_prompt_tokens_total[]") == body["usage"]["prompt_tokens"]
    assert grew("redrafter_time_to_first_token_seconds_count[]") == 1
    assert grew("redrafter_accepted_drafts_total[]") == body["redrafter"]["accepted"]
    assert "redrafter_queue_length[]" in after and "redrafter_batch_size[]" in after
    line = json.loads(next(r.getMessage() for r in caplog.records if r.name == "redrafter.access"))
    assert line["completion_tokens"] == body["usage"]["completion_tokens"] and line["status"] == 200


def test_a_process_that_served_exits_cleanly():
    """MLX may abort at exit (status 134) when a stream died with its thread; the engine
    destroys its own. The abort is a race, so four processes try."""
    script = (
        "import asyncio\n"
        "from redrafter_mlx.api import load\n"
        "from redrafter_mlx.decoding.batch import BatchDecoder, Request\n"
        "from redrafter_mlx.options import DecodingOptions\n"
        "from redrafter_mlx.serve.engine import Engine\n"
        "p = load('smollm2-135m'); p.materialize()\n"
        "engine = Engine(lambda: BatchDecoder(p.loaded.model, p.drafter))\n"
        "async def main():\n"
        "    engine.start()\n"
        "    ticket = engine.submit(Request([1, 2, 3], DecodingOptions(max_tokens=6)))\n"
        "    while (await ticket.events.get()).finish_reason is None:\n"
        "        pass\n"
        "    engine.stop()\n"
        "asyncio.run(main())\n"
    )
    runs = [subprocess.Popen([sys.executable, "-c", script], stderr=subprocess.PIPE, text=True) for _ in range(4)]
    for run in runs:
        _, err = run.communicate(timeout=300)
        assert run.returncode == 0, err[-500:]


def test_a_prompt_past_the_context_is_refused(url):
    reply = httpx.post(f"{url}/v1/completions", json={"model": MODEL, "prompt": "word " * 9000, "max_tokens": 4})
    assert reply.status_code == 400 and reply.json()["error"]["code"] == "context_length_exceeded"


def test_models_health_and_unknown_routes(url):
    assert httpx.get(f"{url}/v1/models").json()["data"][0]["id"] == MODEL
    health = httpx.get(f"{url}/health").json()
    assert health["status"] == "ok" and health["drafter"] == "redrafter"
    missing = httpx.get(f"{url}/v2/nothing")
    assert missing.status_code == 404 and "error" in missing.json()


def test_a_client_that_leaves_mid_stream_frees_its_row(url):
    body = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "Write a long story."}],
        "max_tokens": 2000,
        "stream": True,
        "temperature": 0,
    }
    with httpx.stream("POST", f"{url}/v1/chat/completions", json=body) as reply:
        lines = reply.iter_lines()
        assert next(line for line in lines if line.startswith("data:"))
        assert httpx.get(f"{url}/health").json()["running"] == 1
    deadline = time.time() + 20  # 2,000 tokens would take minutes
    while httpx.get(f"{url}/health").json()["running"] and time.time() < deadline:
        time.sleep(0.1)
    assert httpx.get(f"{url}/health").json()["running"] == 0


def test_a_client_that_gives_up_on_a_whole_answer_frees_its_row(url):
    body = {"model": MODEL, "prompt": "Write a long story.", "max_tokens": 2000, "temperature": 0}
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(f"{url}/v1/completions", json=body, timeout=3)
    deadline = time.time() + 20
    while httpx.get(f"{url}/health").json()["running"] and time.time() < deadline:
        time.sleep(0.1)
    assert httpx.get(f"{url}/health").json()["running"] == 0


def test_a_full_queue_answers_429_and_an_api_key_is_required(pipeline):
    with running(pipeline, batching=Batching(max_batch=1, max_queue=1), api_key="sesame") as base:
        key = {"authorization": "Bearer sesame"}
        assert httpx.get(f"{base}/v1/models").status_code == 401
        assert httpx.get(f"{base}/v1/models", headers={"authorization": "Bearer nope"}).status_code == 401
        body = {"model": MODEL, "prompt": "Once upon a time", "max_tokens": 30, "temperature": 0}

        async def burst():
            async with httpx.AsyncClient(headers=key, timeout=120) as client:
                return await asyncio.gather(*(client.post(f"{base}/v1/completions", json=body) for _ in range(4)))

        replies = asyncio.run(burst())
        codes = sorted(r.status_code for r in replies)
        assert codes[0] == 200 and codes[-1] == 429  # one decodes, one waits, the rest are refused
        refused = next(r for r in replies if r.status_code == 429)
        assert refused.json()["error"]["type"] == "rate_limit_error"
        assert refused.headers["retry-after"] == "1"


def test_a_large_body_gets_413_and_a_late_request_ends_and_frees_its_row(pipeline):
    with running(pipeline, limits=Limits(max_body_bytes=400, request_timeout=1.0)) as base:
        story = [{"role": "user", "content": "Tell me a long story about a dragon."}]
        body = {"model": MODEL, "messages": story, "max_tokens": 400, "temperature": 0}
        large = httpx.post(f"{base}/v1/chat/completions", json=body | {"messages": story * 10})
        assert large.status_code == 413 and "--max-body-bytes" in large.json()["error"]["message"]
        late = httpx.post(f"{base}/v1/chat/completions", json=body, timeout=60)
        assert late.status_code == 200, late.text
        assert late.json()["choices"][0]["finish_reason"] == "length", late.text
        assert late.json()["usage"]["completion_tokens"] < 400  # cut by the deadline, not max_tokens
        streamed = httpx.post(f"{base}/v1/chat/completions", json=body | {"stream": True}, timeout=60).text
        assert '"finish_reason": "length"' in streamed and streamed.endswith("data: [DONE]\n\n")
        for _ in range(100):  # the rows are freed before the engine's next step
            if httpx.get(f"{base}/health").json()["running"] == 0:
                break
            time.sleep(0.05)
        health = httpx.get(f"{base}/health").json()
        assert health["running"] == 0 and health["queued"] == 0


def test_an_eagle_is_served_with_each_answer_what_generate_gives_alone(embedded):
    eagle = Pipeline(embedded, random_eagle(49152, 576, 9, 3).for_target(embedded.model, "smollm2"), mx.float32)
    prompts = MORE_PROMPTS[:3]
    references = [expected(eagle, p, 16) for p in prompts]
    with running(eagle, batching=Batching(max_batch=2)) as base:  # the third joins as one leaves
        assert asyncio.run(chat_together(base, prompts, 16)) == references


def test_a_second_turn_reuses_the_first_from_the_prompt_cache_and_answers_the_same(pipeline, url):
    first = [{"role": "user", "content": "Name three rivers."}]
    body = {"model": MODEL, "max_tokens": 16, "temperature": 0}
    answer = httpx.post(f"{url}/v1/chat/completions", json=body | {"messages": first}).json()
    history = first + [answer["choices"][0]["message"], {"role": "user", "content": "Which is longest?"}]
    second = httpx.post(f"{url}/v1/chat/completions", json=body | {"messages": history}).json()
    cached = second["usage"]["prompt_tokens_details"]["cached_tokens"]
    assert answer["usage"]["prompt_tokens"] <= cached < second["usage"]["prompt_tokens"]
    with running(pipeline, batching=Batching(prompt_cache_bytes=0)) as uncached:
        miss = httpx.post(f"{uncached}/v1/chat/completions", json=body | {"messages": history}).json()
    assert miss["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    assert second["choices"][0]["message"]["content"] == miss["choices"][0]["message"]["content"]


@pytest.mark.slow
def test_the_cli_serves_and_drains_on_sigterm():
    port = free_port()
    server = subprocess.Popen(
        [REDRAFTER, "serve", "--port", str(port), "-w", "3", "-l", "4", "-s", "8"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "COLUMNS": "200"},
    )
    try:
        wait_until_serving(port, server, 120)
        body = {"model": MODEL, "prompt": "Once upon a time", "max_tokens": 40, "temperature": 0, "stream": True}
        with httpx.stream("POST", f"http://127.0.0.1:{port}/v1/completions", json=body, timeout=120) as reply:
            lines = reply.iter_lines()
            next(line for line in lines if line.startswith("data:"))
            server.send_signal(signal.SIGTERM)
            rest = [line for line in lines if line.startswith("data:")]
        assert rest[-1] == "data: [DONE]"  # the answer in flight was finished, not cut
        assert json.loads(rest[-2][5:])["choices"][0]["finish_reason"] in ("stop", "length")
        # uvicorn re-raises the signal once it has shut down, so a supervisor sees how it ended
        assert server.wait(timeout=60) in (0, -signal.SIGTERM)
    finally:
        server.kill()
        server.wait()


def test_a_failed_step_is_a_logged_500_with_its_request_id_and_the_server_goes_on(pipeline, monkeypatch, caplog):
    """Every 5xx reaches the log with the request id, the exception and its traceback, and the
    client gets the id in OpenAI's error shape and `x-request-id`; the next request is served."""
    verify = BatchDecoder.verify
    failures = iter([RuntimeError("an injected failure")])

    def failing_once(self):
        error = next(failures, None)
        if error is not None:
            raise error
        return verify(self)

    monkeypatch.setattr(BatchDecoder, "verify", failing_once)
    caplog.set_level(logging.ERROR, logger="redrafter.errors")
    body = {"model": MODEL, "messages": [{"role": "user", "content": "Say hi."}], "max_tokens": 4, "temperature": 0}
    with running(pipeline) as base:
        failed = httpx.post(f"{base}/v1/chat/completions", json=body)
        served = httpx.post(f"{base}/v1/chat/completions", json=body)
    assert failed.status_code == 500
    request_id = failed.headers["x-request-id"]
    error = failed.json()["error"]
    assert error["type"] == "server_error" and request_id in error["message"] and "injected" in error["message"]
    record = next(r for r in caplog.records if r.name == "redrafter.errors")
    assert request_id in record.getMessage() and "injected" in record.getMessage()
    assert record.exc_info and "failing_once" in logging.Formatter().formatException(record.exc_info)
    assert served.status_code == 200 and served.json()["choices"][0]["message"]["content"]


def test_an_idle_engine_admits_a_burst_together(pipeline, monkeypatch):
    """Requests arriving within the coalescing window of an idle engine are prefilled and admitted
    in one step (without it, the worker would wake to the first and start on it alone)."""
    first_admitted, admit = [], BatchDecoder.admit

    def recording(self):
        updates = admit(self)
        if updates and not first_admitted:
            first_admitted.append(len(updates))
        return updates

    monkeypatch.setattr(BatchDecoder, "admit", recording)
    engine = Engine(lambda: BatchDecoder(pipeline.loaded.model, pipeline.drafter), coalesce=0.5)
    engine.start()
    prompts = [encode_prompt(pipeline.tokenizer, f"Count to {n}.") for n in range(3, 7)]

    async def burst() -> list:
        tickets = []
        for ids in prompts:  # 20 ms apart: one at a time without the window
            tickets.append(engine.submit(Request(ids, DecodingOptions(max_tokens=2))))
            time.sleep(0.02)
        ends = []
        for ticket in tickets:
            while not isinstance(update := await ticket.events.get(), Exception) and not update.finish_reason:
                pass
            ends.append(update)
        return ends

    try:
        ends = asyncio.run(burst())
    finally:
        engine.stop()
    assert all(not isinstance(end, Exception) and end.finish_reason for end in ends)
    assert first_admitted == [len(prompts)]
