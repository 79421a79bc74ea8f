"""The chat page's side of `redrafter serve`: the stream's `redrafter` extension (how each token
came: the LLM, a drafted beam at a depth, or the context lookup; running figures), parsed by the
official `openai` client; and the page's routes (info, calibration, sweeps, the API key)."""

from __future__ import annotations

import httpx
import mlx.core as mx
import pytest
from openai import OpenAI

from redrafter_mlx.api import Pipeline
from redrafter_mlx.decoding.batch import BatchDecoder, Request
from redrafter_mlx.drafting import TreeShape
from redrafter_mlx.drafting.loading import load_drafter_for
from redrafter_mlx.options import DecodingOptions
from redrafter_mlx.profiling.sweep import append_row, plot_heatmap
from redrafter_mlx.prompting import encode_prompt
from redrafter_mlx.serve.app import Batching
from redrafter_mlx.tuning.calibration import Calibration, ShapeCost

from .helpers import MORE_PROMPTS, invoke_cli, random_drafter, serving

SHAPE = TreeShape(3, 4, 8)
MODEL = "smollm2-135m"
REPEATED = "Copy this line three times: the quick brown fox jumps over the lazy dog near the river bank."


@pytest.fixture(scope="module")
def pipeline(embedded):
    return Pipeline(embedded, load_drafter_for(embedded, None), mx.float32)


def streamed(url: str, prompt: str, max_tokens: int) -> list:
    client = OpenAI(base_url=f"{url}/v1", api_key="unused")
    return list(
        client.chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": prompt}],
            max_tokens=max_tokens,
            temperature=0,
            stream=True,
            stream_options={"include_usage": True},
        )
    )


def token_pieces(chunks: list) -> tuple[str, list[dict], list[dict]]:
    """(the streamed text, every chunk's `redrafter.tokens`, every chunk's running figures)."""
    text, tokens, figures = "", [], []
    for chunk in chunks:
        if chunk.choices and chunk.choices[0].delta.content:
            extension = chunk.model_extra["redrafter"]
            assert "".join(t["text"] for t in extension["tokens"]) == chunk.choices[0].delta.content
            text += chunk.choices[0].delta.content
            tokens += extension["tokens"]
            figures.append(extension)
    return text, tokens, figures


def test_stream_chunks_say_how_each_token_came_and_the_openai_client_parses_them(pipeline):
    with serving(pipeline, SHAPE, MODEL) as url:
        chunks = streamed(url, MORE_PROMPTS[1], 48)
    with serving(pipeline, SHAPE, MODEL, batching=Batching(adaptive=False)) as url:
        static = streamed(url, MORE_PROMPTS[1], 48)
    text, tokens, figures = token_pieces(chunks)
    final = chunks[-1].model_extra["redrafter"]  # the usage chunk: the whole answer's figures
    assert text and text == token_pieces(static)[0]  # greedy: whatever trees the batch chose
    assert {t["source"] for t in tokens} <= {"llm", "draft", "lookup"}
    assert all((t["source"] == "llm") == (t["depth"] == 0) for t in tokens)
    drafted = [t for t in tokens if t["source"] != "llm"]
    assert 0 < len(drafted) <= final["accepted"]
    for before, token in zip(tokens, tokens[1:]):  # a step's drafts come at depths 1, 2, ... in order
        if token["depth"] > 1:
            assert before["depth"] == token["depth"] - 1 and before["source"] == token["source"]
    assert figures[-1]["tokens_per_step"] == pytest.approx(final["tokens_per_step"], rel=0.35)
    assert figures[-1]["tokens_per_s"] > 0  # (the first token comes before any step: 0 then)
    # the adaptive batch times plain steps, so it knows the speed-up; a static one never runs one
    assert figures[-1]["speedup"] is not None and figures[-1]["speedup"] > 0
    assert all(f["speedup"] is None for f in token_pieces(static)[2])


def test_accepted_drafts_a_random_drafter_could_not_make_are_the_context_lookups(embedded):
    """A random drafter's beams are never accepted, so what a step accepts beyond the LLM's own
    token came from the lookup's copy of the context: exactly the updates marked `copied`."""
    drafter = random_drafter(embedded.config["vocab_size"], embedded.config["hidden_size"], seed=3, tied=True)
    prompt = encode_prompt(embedded.tokenizer, REPEATED)
    request = Request(prompt, DecodingOptions(max_tokens=48))
    updates = {}
    for lookup in (True, False):
        decoder = BatchDecoder(embedded.model, drafter, TreeShape(2, 4, 2), lookup=lookup)
        decoder.add(0, request)
        updates[lookup] = []
        while decoder.busy:
            updates[lookup] += decoder.step()
    assert not any(u.drafted or u.copied for u in updates[False])  # the drafter alone: nothing accepted
    accepted = [u for u in updates[True] if u.drafted]
    assert accepted and all(u.copied for u in accepted)
    assert not any(u.copied for u in updates[True] if not u.drafted)
    assert sum(u.drafted for u in accepted) >= 8  # the copied line was taken several tokens at once


def test_updates_of_a_batch_keep_their_drafts_apart(embedded):
    """Rows of one batch are told their own accepted drafts: each row's drafted counts add up to
    its steps' accepted tokens beyond the LLM's own."""
    decoder = BatchDecoder(embedded.model, load_drafter_for(embedded, None), SHAPE)
    requests = [Request(encode_prompt(embedded.tokenizer, p), DecodingOptions(max_tokens=24)) for p in MORE_PROMPTS[:3]]
    drafted: dict[int, int] = {}
    for handle, request in enumerate(requests):
        decoder.add(handle, request)
    stats = {}
    while decoder.busy:
        for update in decoder.step():
            drafted[update.handle] = drafted.get(update.handle, 0) + update.drafted
            stats[update.handle] = update.stats
    for handle, s in stats.items():
        assert drafted[handle] == sum(s.accepted_per_step) - s.steps, handle
    assert sum(drafted.values()) > 0


def test_the_page_is_public_and_its_data_needs_the_key(pipeline, tmp_path):
    sweep = tmp_path / "sweep-smollm2"
    sweep.mkdir()
    rows = [
        {"beam_width": w, "beam_length": n, "tokens_per_s": 10.0 * w + n, "speedup": 1 + w / 10 + n / 100}
        | {"tokens_per_step": 1.5, "compression": 0.8}
        for w in (1, 2)
        for n in (2, 3)
    ]
    for row in rows:
        append_row(sweep / "sweep.csv", row)
    heatmap = plot_heatmap(rows, "speedup", sweep / "speedup.png", "speed-up")
    calibration = Calibration(
        "cpu",
        "float32",
        {8: 40.0, 16: 48.0},
        2.0,
        {SHAPE: ShapeCost(2.0, 5.0, {12: 10}), TreeShape(1, 3, 1): ShapeCost(1.5, 3.0, {3: 10})},
        ar_ms=30.0,
    )
    key = {"Authorization": "Bearer page-key"}
    with serving(pipeline, SHAPE, MODEL, api_key="page-key", calibration=calibration, sweeps=[sweep]) as url:
        page = httpx.get(f"{url}/")
        assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
        assert "/page/page.js" in page.text and "http" not in page.text.replace(url, "")  # nothing from outside
        for name, kind in (("page.js", "javascript"), ("page.css", "css")):
            asset = httpx.get(f"{url}/page/{name}")
            assert asset.status_code == 200 and kind in asset.headers["content-type"]
        assert httpx.get(f"{url}/page/app.py", headers=key).status_code == 404
        assert httpx.get(f"{url}/redrafter/info").status_code == 401
        assert httpx.get(f"{url}/redrafter/tuning").status_code == 401
        info = httpx.get(f"{url}/redrafter/info", headers=key).json()
        tuning = httpx.get(f"{url}/redrafter/tuning", headers=key).json()
        image = httpx.get(f"{url}{tuning['sweeps'][0]['images'][0]['url']}", headers=key)
        missing = [
            httpx.get(f"{url}/redrafter/sweeps/{where}", headers=key).status_code
            for where in ("0/tokens_per_s.png", "1/speedup.png", "0/sweep.csv")
        ]
    shape = {"beam_width": 3, "beam_length": 4, "search_width": 8, "node_budget": None}
    assert info["model"] == MODEL and info["drafter"] == "redrafter" and info["tree"] == shape
    assert info["adaptive"] is True and info["defaults"]["max_tokens"] == 512
    table = {(s["beam_width"], s["beam_length"]): s for s in tuning["calibration"]["shapes"]}
    # SHAPE: 2 tokens per step of 5 ms drafting + 48 ms verifying (12 tokens pad to 16) + 2 ms
    assert table[3, 4]["step_ms"] == pytest.approx(55.0)
    assert table[3, 4]["speedup"] == pytest.approx(2.0 / 55.0 * 30.0, abs=1e-3)
    assert table[1, 3]["speedup"] == pytest.approx(1.5 / (3.0 + 40.0 + 2.0) * 30.0, abs=1e-3)
    assert tuning["calibration"]["chosen"] == shape
    listed = tuning["sweeps"][0]
    assert listed["name"] == "sweep-smollm2" and [r["beam_width"] for r in listed["rows"]] == ["1", "1", "2", "2"]
    assert image.status_code == 200 and image.content == heatmap.read_bytes()
    assert missing == [404, 404, 404]


def test_serve_refuses_a_sweep_folder_that_does_not_exist(tmp_path):
    result = invoke_cli("serve", "--sweep", tmp_path / "nowhere")
    assert result.exit_code != 0 and "nowhere" in result.output and "Traceback" not in result.output
