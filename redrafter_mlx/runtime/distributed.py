"""The process's place in an `mx.distributed` group: launched by `mlx.launch -n N` (ring,
MPI or JACCL backends), every rank runs the same program on its shard of the LLM.

Ranks stay in step without messages beyond the model's own all-reduces: they load the same
model and drafter (`agree` checks it), draw the same random numbers (`shared_seed`), and so
accept the same tokens at every step, each reading its own copy of the step's result. Only
rank 0 (`is_leader`) prints, streams or serves.
"""

from __future__ import annotations

import hashlib
import os
import pickle
import random
from functools import cache

import mlx.core as mx
import numpy as np

from ..errors import InputError

SPLIT_ENV = "REDRAFTER_SPLIT"  # how the LLM is split across ranks: "tensor" (default) or "pipeline"
SPLITS = ("tensor", "pipeline")


def split_mode() -> str:
    """How `api.load` splits the LLM across ranks: $REDRAFTER_SPLIT (`redrafter --pipeline`
    sets it), else by tensors."""
    mode = os.environ.get(SPLIT_ENV) or "tensor"
    if mode not in SPLITS:
        raise InputError(f"{SPLIT_ENV}={mode!r}: expected one of {', '.join(SPLITS)}")
    return mode


@cache
def world() -> mx.distributed.Group | None:
    """The group this process was launched in; None when it runs alone. A launch that MLX
    cannot join (a hostfile that does not parse, a peer that never answers) is an InputError."""
    if not mx.distributed.is_available():
        return None
    try:
        group = mx.distributed.init()
    except RuntimeError as error:
        hostfile = os.environ.get("MLX_HOSTFILE", "")
        where = f" (MLX_HOSTFILE={hostfile})" if hostfile else ""
        raise InputError(f"cannot join the distributed group{where}: {str(error).splitlines()[0]}") from None
    return group if group.size() > 1 else None


def rank() -> int:
    group = world()
    return group.rank() if group is not None else 0


def size() -> int:
    group = world()
    return group.size() if group is not None else 1


def is_leader() -> bool:
    return rank() == 0


# What `mlx.launch` puts in each rank's environment, by backend.
BACKEND_VARIABLES = (("MLX_HOSTFILE", "ring"), ("MLX_IBV_DEVICES", "jaccl"), ("OMPI_COMM_WORLD_SIZE", "mpi"))


def describe() -> str:
    """One line for `redrafter info`: the rank, the group's size and its backend."""
    group = world()
    if group is None:
        return "single process"
    backend = next((f" ({name} backend)" for variable, name in BACKEND_VARIABLES if variable in os.environ), "")
    return f"rank {group.rank()} of {group.size()}{backend}"


def agree(what: str, fingerprint: str) -> None:
    """Refuse in one line, on every rank, unless every rank passed the same fingerprint of
    `what` (e.g. the model it loaded): ranks that disagree would all-reduce unrelated numbers."""
    group = world()
    if group is None:
        return
    digest = np.frombuffer(hashlib.sha256(fingerprint.encode()).digest(), dtype=np.uint8).astype(np.int32)
    gathered = np.array(mx.distributed.all_gather(mx.array(digest)[None], group=group))
    differ = [r for r in range(group.size()) if not np.array_equal(gathered[r], gathered[0])]
    if differ:
        ranks = ", ".join(str(r) for r in differ)
        raise InputError(f"rank {ranks} loaded a different {what} than rank 0: launch every rank with the same one")


def shared_seed() -> None:
    """Seed MLX's and Python's generators on every rank with rank 0's draw, so that unseeded
    sampling draws the same numbers everywhere (and accepts the same tokens)."""
    group = world()
    if group is None:
        return
    mine = random.getrandbits(31) if group.rank() == 0 else 0
    seed = int(mx.distributed.all_sum(mx.array(mine, mx.int32), group=group).item())
    mx.random.seed(seed)
    random.seed(seed)


def broadcast(message: object = None) -> object:
    """Rank 0's `message` on every rank (the others' is ignored): pickled, and sent as two
    all-reduces, its size then its bytes, in which the other ranks add nothing."""
    group = world()
    data = pickle.dumps(message) if group.rank() == 0 else b""
    size = int(mx.distributed.all_sum(mx.array(len(data), mx.int32), group=group).item())
    payload = np.zeros(size, np.uint8)
    payload[: len(data)] = np.frombuffer(data, np.uint8)
    return pickle.loads(np.array(mx.distributed.all_sum(mx.array(payload), group=group)).tobytes())
