"""The chat page at `/` and what it reads besides the OpenAI API: the served model and tree
(`/redrafter/info`), and the calibration and `redrafter sweep` results behind the tree
(`/redrafter/tuning`, the sweeps' heatmaps under `/redrafter/sweeps/`).

The page is three static files shipped in the package (`page/`): no build step, and nothing
is fetched from outside the server. The page and its two files need no API key (they hold
no data); everything they fetch does, as every other route.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

from fastapi import APIRouter
from fastapi.responses import FileResponse

from ..drafting import TreeShape
from ..tuning.calibration import Calibration
from .requests import ApiError, ServerInfo

PAGE = Path(__file__).with_name("page")
ASSETS = {"page.js": "text/javascript", "page.css": "text/css"}
PUBLIC = ("/", *(f"/page/{name}" for name in ASSETS))  # served without the API key


@dataclass(frozen=True)
class Served:
    """What the page shows of how the server decodes: the tree (None: plain decoding),
    whether each step's tree follows the batch, the calibration the tree was chosen from,
    and `redrafter sweep --out` folders to show."""

    shape: TreeShape | None = None
    adaptive: bool = False
    calibration: Calibration | None = None
    sweeps: tuple[Path, ...] = ()


def shape_fields(shape: TreeShape) -> dict:
    return {
        "beam_width": shape.beam_width,
        "beam_length": shape.beam_length,
        "search_width": shape.search_width,
        "node_budget": shape.node_budget,
    }


def calibration_table(calibration: Calibration, chosen: TreeShape | None) -> dict:
    """Each measured shape's expected step time and speed-up over plain decoding."""
    ar_ms = calibration.ar_ms
    shapes = []
    for shape, cost in calibration.shapes.items():
        rate = calibration.expected_tokens_per_s(shape)
        shapes.append(
            shape_fields(shape)
            | {
                "tokens_per_step": round(cost.tokens_per_step, 3),
                "draft_ms": round(cost.draft_ms, 2),
                "step_ms": round(calibration.step_ms(shape), 2),
                "speedup": round(rate * ar_ms / 1e3, 3) if ar_ms else None,
            }
        )
    return {
        "device": calibration.device,
        "dtype": calibration.dtype,
        "ar_ms": ar_ms,
        "overhead_ms": round(calibration.overhead_ms, 2),
        "shapes": shapes,
        "chosen": shape_fields(chosen) if chosen in calibration.shapes else None,
    }


def sweep_listing(index: int, folder: Path) -> dict:
    """A sweep folder's rows (sweep.csv) and heatmaps (its PNGs)."""
    try:
        with open(folder / "sweep.csv", newline="") as f:
            rows = list(csv.DictReader(f))
    except OSError:
        rows = []
    images = [{"name": p.name, "url": f"/redrafter/sweeps/{index}/{p.name}"} for p in sorted(folder.glob("*.png"))]
    return {"name": folder.name, "rows": rows, "images": images}


def page_router(info: ServerInfo, served: Served) -> APIRouter:
    router = APIRouter()

    @router.get("/", include_in_schema=False)
    async def index() -> FileResponse:
        return FileResponse(PAGE / "index.html", media_type="text/html")

    @router.get("/page/{name}", include_in_schema=False)
    async def asset(name: str) -> FileResponse:
        if name not in ASSETS:
            raise ApiError(404, f"no page file {name!r}", code="not_found")
        return FileResponse(PAGE / name, media_type=ASSETS[name])

    @router.get("/redrafter/info")
    async def about() -> dict:
        return {
            "model": info.model_id,
            "drafter": info.drafter,
            "tree": shape_fields(served.shape) if served.shape else None,
            "adaptive": served.adaptive and served.shape is not None,
            "defaults": {"temperature": info.defaults.temp, "max_tokens": info.defaults.max_tokens},
            "context_length": info.context_length,
        }

    @router.get("/redrafter/tuning")
    async def tuning() -> dict:
        calibration = served.calibration
        return {
            "calibration": calibration_table(calibration, served.shape) if calibration else None,
            "sweeps": [sweep_listing(i, folder) for i, folder in enumerate(served.sweeps)],
        }

    @router.get("/redrafter/sweeps/{index}/{name}")
    async def heatmap(index: int, name: str) -> FileResponse:
        images = {p.name: p for p in served.sweeps[index].glob("*.png")} if 0 <= index < len(served.sweeps) else {}
        if name not in images:  # only a listed file: no path leaves the sweep folder
            raise ApiError(404, f"no heatmap {name!r} in sweep {index}", code="not_found")
        return FileResponse(images[name], media_type="image/png")

    return router
