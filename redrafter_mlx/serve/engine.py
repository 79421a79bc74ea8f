"""The model's one worker: requests queue to a thread that owns MLX and decodes them together.

HTTP handlers run on the event loop; MLX runs only on the worker thread, which admits waiting
requests into the `BatchDecoder` between steps (up to `max_batch` rows), runs a step, and
hands every row's update back to its request's asyncio queue. A request that is cancelled
(its client left) leaves the batch before the next step. An idle worker that wakes to a request
waits `COALESCE_SECONDS` for the rest of its burst, which then prefills in shared passes: a
burst admitted one request at a time would prefill one prompt a pass, each pass streaming the
weights again.

Across ranks (`mlx.launch`), rank 0 serves HTTP and tells the others, before every step,
which requests join and leave (`Orders`); each of them replays its steps (`follow`) on its
shard of the model, so their verify passes all-reduce together.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import random
import signal
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import mlx.core as mx

from ..decoding import GenerationStats
from ..decoding.batch import BatchDecoder, Request, Update
from ..runtime import distributed

LOG = logging.getLogger("redrafter.errors")
COALESCE_SECONDS = 0.005  # a few ms of a prefill's hundreds


class QueueFull(Exception):
    """More requests wait than the server takes (`--max-queue`)."""


@dataclass
class Ticket:
    """One request's place in the engine: its updates arrive on `events` (an `Update` per
    step, the last with a finish reason, or an exception)."""

    request: Request
    loop: asyncio.AbstractEventLoop
    handle: int
    events: asyncio.Queue = field(default_factory=asyncio.Queue)
    cancelled: bool = False


@dataclass
class Orders:
    """What rank 0 tells the other ranks before a step: the requests that join (each with a
    seed, so that every rank draws alike) and the handles that leave."""

    joining: list[tuple[int, Request]]
    leaving: list[int]


def follow(make_decoder: Callable[[], BatchDecoder]) -> None:
    """A rank beyond 0 of a distributed server: rank 0's steps, replayed until it stops. Ctrl-C
    reaches every rank; this one ends when rank 0 has drained and says so (were it to stop
    between the two halves of a broadcast, rank 0 would wait for it forever)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    decoder = make_decoder()
    while (orders := distributed.broadcast()) is not None:
        try:
            for handle in orders.leaving:
                decoder.remove(handle)
            for handle, request in orders.joining:
                with contextlib.suppress(Exception):  # rank 0 fails this request alone, as here
                    decoder.add(handle, request)
            for _ in decoder.admit():
                pass
            decoder.verify()
        except Exception:  # as rank 0 does: its rows failed, the server goes on
            LOG.exception("rank %d: a step failed; its rows are dropped", distributed.rank())
            decoder = make_decoder()


def seeded(request: Request) -> Request:
    """The request with a seed of its own if it had none (drawn here, once, for every rank)."""
    if request.options.seed is not None:
        return request
    return replace(request, options=replace(request.options, seed=random.getrandbits(63)))


class Engine:
    """Continuous batching over one `BatchDecoder` on a worker thread; `lead`: rank 0 of a
    distributed server, whose every step the other ranks `follow`; `coalesce`: seconds an idle
    worker waits for the rest of a burst."""

    def __init__(
        self,
        make_decoder: Callable[[], BatchDecoder],
        *,
        max_batch: int = 8,
        max_queue: int = 64,
        lead: bool = False,
        coalesce: float = COALESCE_SECONDS,
    ):
        self.make_decoder, self.lead, self.coalesce = make_decoder, lead, coalesce
        self.decoder: BatchDecoder | None = None  # built on the worker, which owns MLX
        self.max_batch, self.max_queue = max_batch, max_queue
        self._waiting: deque[Ticket] = deque()
        self._active: dict[int, Ticket] = {}
        self._wake = threading.Condition()
        self._stopping = False
        self._handles = itertools.count()
        self._thread = threading.Thread(target=self._run, name="redrafter-engine", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Cancel what is queued or decoding and end the worker."""
        with self._wake:
            self._stopping = True
            self._wake.notify()
        if self._thread.is_alive():
            self._thread.join()

    @property
    def queued(self) -> int:
        return len(self._waiting)

    @property
    def running(self) -> int:
        return len(self._active)

    def submit(self, request: Request) -> Ticket:
        """Queue a request (from the event loop); QueueFull when `max_queue` already wait."""
        with self._wake:
            if self._stopping:
                raise QueueFull("the server is shutting down")
            if len(self._waiting) >= self.max_queue:
                raise QueueFull(f"{len(self._waiting)} requests are already waiting (--max-queue {self.max_queue})")
            ticket = Ticket(request, asyncio.get_running_loop(), next(self._handles))
            self._waiting.append(ticket)
            self._wake.notify()
        return ticket

    def cancel(self, ticket: Ticket) -> None:
        """The client left: drop the request before the next step (or from the queue)."""
        with self._wake:
            ticket.cancelled = True
            self._wake.notify()

    def _deliver(self, ticket: Ticket, item: Update | Exception) -> None:
        ticket.loop.call_soon_threadsafe(ticket.events.put_nowait, item)

    def _run(self) -> None:
        with mx.stream(mx.new_stream(mx.default_device())):  # MLX streams belong to a thread
            self.decoder = self.make_decoder()
            self._serve()
        # A stream left to die with its thread can abort the process at exit ("terminate called
        # without an active exception", status 134): finish its work and destroy it here.
        self.decoder = None
        if self.lead:
            distributed.broadcast(None)  # the other ranks stop too
        mx.synchronize()
        mx.clear_streams()

    def _serve(self) -> None:
        while True:
            with self._wake:
                while not (self._stopping or self._waiting or self._active):
                    self._wake.wait()
                if not self._active:
                    self._gather_burst()
                if self._stopping:
                    break
                cancelled = [t for t in self._active.values() if t.cancelled]
                gone = [t for t in self._waiting if t.cancelled]
                for t in gone:
                    self._waiting.remove(t)
                room = self.max_batch - (len(self._active) - len(cancelled))
                joining = [self._waiting.popleft() for _ in range(min(room, len(self._waiting)))]
                self.decoder.backlog = len(self._waiting)
            for ticket in gone:
                self._deliver(ticket, Update(ticket.handle, [], GenerationStats(), "cancelled"))
            if self.lead:
                for ticket in joining:
                    ticket.request = seeded(ticket.request)
                distributed.broadcast(Orders([(t.handle, t.request) for t in joining], [t.handle for t in cancelled]))
            for ticket in cancelled:
                self._finish(ticket, self.decoder.remove(ticket.handle))
            for ticket in joining:
                try:
                    self.decoder.add(ticket.handle, ticket.request)
                except Exception as error:  # this request alone fails (the handler logs it)
                    self._deliver(ticket, error)
                    continue
                self._active[ticket.handle] = ticket
            try:
                for update in self.decoder.admit():  # each first token as soon as it is known
                    self._route(update)
                for update in self.decoder.verify():
                    self._route(update)
            except Exception as error:  # a failed step fails its rows (each handler logs it), not the server
                for ticket in self._active.values():
                    self._deliver(ticket, error)
                self._active.clear()
                self.decoder = self.make_decoder()
        with self._wake:
            left = [*self._active.values(), *self._waiting]
            self._active.clear()
            self._waiting.clear()
        for ticket in left:
            self._deliver(ticket, Update(ticket.handle, [], GenerationStats(), "cancelled"))

    def _gather_burst(self) -> None:
        """Wait (the lock held by the caller, released while waiting) until `coalesce` seconds
        after the first request, or a full batch, or a stop."""
        deadline = time.monotonic() + self.coalesce
        while not self._stopping and len(self._waiting) < self.max_batch and (left := deadline - time.monotonic()) > 0:
            self._wake.wait(left)

    def _route(self, update: Update) -> None:
        ticket = self._active[update.handle]
        if update.finish_reason:
            self._finish(ticket, update)
        else:
            self._deliver(ticket, update)

    def _finish(self, ticket: Ticket, update: Update | None) -> None:
        self._active.pop(ticket.handle, None)
        if update is not None:
            self._deliver(ticket, update)
