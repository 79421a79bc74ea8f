"""Tuning: measured costs (`calibration.py`), a drafter's acceptance by depth
(`acceptance.py`), what a step may run (`choices.py`), the per-step choice among them
(`policy.py`) and the drafting plan built from them (`plan.py`)."""

from .acceptance import geometric_drafts, geometric_rate
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
from .plan import FALLBACK_SHAPE, DraftPlan, plan_drafting, resolve_shape
from .policy import Choice, StepPolicy

__all__ = [
    "CACHE_ENV",
    "CALIBRATION_FILE",
    "Choice",
    "Calibration",
    "DraftPlan",
    "FALLBACK_SHAPE",
    "ShapeCost",
    "StepPolicy",
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
