"""The chat page in a real browser: headless Chromium (Debian's `chromium` and
`chromium-driver`, which `make test` installs as root) opens `redrafter serve`'s page, gives the
API key it asks for, types a prompt, and the streamed answer equals `generate`'s greedy text with
its drafted tokens coloured. The screenshot is kept in test-artifacts/chat-page.png."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import mlx.core as mx
import pytest

from redrafter_mlx.api import Pipeline, generate
from redrafter_mlx.drafting import TreeShape
from redrafter_mlx.drafting.loading import load_drafter_for
from redrafter_mlx.options import DecodingOptions

from .helpers import MORE_PROMPTS, serving

webdriver = pytest.importorskip("selenium.webdriver")
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
DRIVER = shutil.which("chromedriver")
ARTIFACTS = Path(os.environ.get("REDRAFTER_TEST_ARTIFACTS", Path(__file__).parents[1] / "test-artifacts"))
SHAPE = TreeShape(3, 4, 8)
MODEL = "smollm2-135m"

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not (CHROMIUM and DRIVER), reason="chromium and chromium-driver not installed (make test installs them as root)"
    ),
]


@pytest.fixture
def browser():
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1280,860"):
        options.add_argument(argument)
    # Not with the OpenBLAS that `make test` preloads for MLX: Chromium's zygote dies with it.
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    driver = webdriver.Chrome(service=Service(DRIVER, env=env), options=options)
    yield driver
    driver.quit()


def set_field(browser, field: str, value: str) -> None:
    element = browser.find_element(By.ID, field)
    element.clear()
    element.send_keys(value)


def test_the_page_streams_the_greedy_answer_with_its_drafted_tokens_coloured(embedded, browser):
    pipeline = Pipeline(embedded, load_drafter_for(embedded, None), mx.float32)
    prompt = MORE_PROMPTS[1]
    shape = {"beam_width": SHAPE.beam_width, "beam_length": SHAPE.beam_length, "search_width": SHAPE.search_width}
    reference = generate(pipeline, prompt, DecodingOptions(max_tokens=40, **shape))
    calibration = pipeline.plan().calibration  # the shipped drafter's, for this CPU
    with serving(pipeline, SHAPE, MODEL, api_key="page-key", calibration=calibration) as url:
        browser.get(f"{url}/")
        wait = WebDriverWait(browser, 180)
        wait.until(lambda b: b.find_element(By.ID, "api-key").is_displayed())  # the page met a 401
        browser.find_element(By.ID, "api-key").send_keys("page-key")
        browser.find_element(By.ID, "api-key-save").click()
        wait.until(lambda b: b.find_element(By.ID, "model").text == MODEL)
        set_field(browser, "temperature", "0")
        set_field(browser, "max_tokens", "40")
        browser.find_element(By.ID, "prompt").send_keys(prompt)
        browser.find_element(By.ID, "send").click()
        answer = wait.until(lambda b: b.find_element(By.CSS_SELECTOR, ".message.assistant[data-done='true']"))
        text = browser.execute_script("return arguments[0].textContent", answer.find_element(By.CLASS_NAME, "content"))
        coloured = answer.find_elements(By.CSS_SELECTOR, ".content .tok-draft, .content .tok-lookup")
        live = browser.find_element(By.ID, "live").text
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        browser.save_screenshot(str(ARTIFACTS / "chat-page.png"))
        browser.find_element(By.CSS_SELECTOR, "#tuning summary").click()
        rows = wait.until(lambda b: b.find_elements(By.CSS_SELECTOR, "#tuning-body table tr td:first-child"))
        browser.save_screenshot(str(ARTIFACTS / "chat-page-tuning.png"))
    assert text == reference
    assert coloured and "tokens/step" in live
    assert calibration is not None and len(rows) == len(calibration.shapes)  # a row per measured tree
