"""Tuning: measured costs (`calibration.py`), the per-step choice of tree or plain step
(`controller.py`) and the drafting plan built from them (`plan.py`)."""

from .calibration import (
    CACHE_ENV,
    CALIBRATION_FILE,
    Calibration,
    ShapeCost,
    cache_dir,
    calibration_dir,
    calibration_path,
    find_calibration,
    read_calibration,
    write_calibration,
)
from .controller import StepController, geometric_drafts, geometric_rate
from .plan import FALLBACK_SHAPE, DraftPlan, plan_drafting, resolve_shape

__all__ = [
    "CACHE_ENV",
    "CALIBRATION_FILE",
    "Calibration",
    "DraftPlan",
    "FALLBACK_SHAPE",
    "ShapeCost",
    "StepController",
    "cache_dir",
    "calibration_dir",
    "calibration_path",
    "find_calibration",
    "geometric_drafts",
    "geometric_rate",
    "plan_drafting",
    "read_calibration",
    "resolve_shape",
    "write_calibration",
]
