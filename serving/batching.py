"""Server-side batching (``--enable_batching``): concurrent requests to one signature of one model
version become one call of the signature, and each request gets its own rows of the result back.

Policy (TF Serving's batching scheduler, per model version and signature):

* A batch starts with the oldest waiting request and takes, in arrival order, the later requests
  that fit in ``max_batch_size`` sentences. It runs when it is full, when its first request has
  waited ``batch_timeout_micros``, or at once while the server shuts down.
* Requests are only merged when the signature's scalar inputs agree (``translate_with_options``
  with the same alpha, beta and beamsize); others wait for a batch of their own.
* A request over ``max_batch_size`` sentences is refused (INVALID_ARGUMENT, "Task size N is larger
  than maximum input batch size M", as TF Serving; the client splits it). With
  ``enable_large_batch_splitting { value: true }`` and ``max_execution_batch_size``, as in TF
  Serving, ``max_batch_size`` bounds requests and ``max_execution_batch_size`` the batches that run:
  a larger request is split into pieces that are batched like any request, and its answer is put
  back together in order.
* At most ``max_enqueued_batches`` full batches' worth of sentences wait; a request that does not
  fit gets UNAVAILABLE ("The batch scheduling queue ... is full"), so that overload shows at once
  rather than as ever-growing latency.
* ``num_batch_threads`` batches of one signature run at the same time.

The batch window is measured by the clock the batcher is given (:class:`MonotonicClock`, real time,
unless a test passes one it moves itself), and ``on_queued`` is told each time a request joins the
queue: tests decide when a window closes and know when a request is in flight, without sleeping.

Only signatures whose outputs are all ``[batch]`` or ``[batch, fixed...]`` are batched (see
:func:`serving.models.Signature`): an output with another variable dimension (n-best attention,
wordpieces) would be padded to the longest sentence of the merged batch, so a request's answer
would depend on its neighbours. Those signatures run unbatched.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from typing import Callable, Dict, List, Protocol, Sequence

import numpy as np

from serving.config import BatchingOptions
from serving.errors import ServingError, from_exception


class Clock(Protocol):
    """What measures the batch window."""

    def now(self) -> float:
        """Seconds, from any fixed origin."""

    def wait_until(self, condition: threading.Condition, deadline: float) -> None:
        """Waits on ``condition`` (its lock held) until it is notified or ``now()`` reaches ``deadline``."""


class MonotonicClock:
    """Real time for the batch window (what a server uses)."""

    def now(self) -> float:
        return time.monotonic()

    def wait_until(self, condition: threading.Condition, deadline: float) -> None:
        condition.wait(max(0.0, deadline - time.monotonic()))


def ignore_queued(waiting_sentences: int) -> None:
    """The default ``on_queued`` hook: nothing to tell."""


class _Task:
    __slots__ = ("inputs", "size", "key", "enqueued", "done", "outputs", "error")

    def __init__(self, inputs: Dict[str, np.ndarray], size: int, key: tuple, enqueued: float):
        self.inputs = inputs
        self.size = size
        self.key = key
        self.enqueued = enqueued
        self.done = threading.Event()
        self.outputs = None
        self.error = None


class Batcher:
    """Merges concurrent calls of ``run`` (one signature of one loaded version).

    Args:
        run: the signature: dict of input arrays -> dict of output arrays.
        options: the batching parameters.
        batch_inputs: inputs with a batch dimension (concatenated).
        key_inputs: scalar inputs (only requests with equal values are merged).
        name: for thread names and messages.
        clock: measures the batch window (``batch_timeout_micros``); see :class:`MonotonicClock`.
        on_queued: called with the number of sentences waiting each time a request has joined the queue.
    """

    def __init__(self, run: Callable[[Dict[str, np.ndarray]], Dict[str, np.ndarray]], options: BatchingOptions,
                 batch_inputs: Sequence[str], key_inputs: Sequence[str], name: str = "batcher",
                 clock: Clock = MonotonicClock(), on_queued: Callable[[int], None] = ignore_queued):
        self._run = run
        self._clock = clock
        self._on_queued = on_queued
        self.options = options
        self._batch_inputs = list(batch_inputs)
        self._key_inputs = list(key_inputs)
        self.name = name
        self._cv = threading.Condition()
        self._queue: deque = deque()
        self._queued = 0
        self._forming = False
        self._flush = False
        self._closed = False
        self.stats = {"requests": 0, "batches": 0, "sentences": 0, "largest_batch": 0}
        self._threads = [
            threading.Thread(target=self._work, name=f"{name}-batch-{i}", daemon=True)
            for i in range(options.num_batch_threads)
        ]
        for thread in self._threads:
            thread.start()

    # ------------------------------------------------------------------------------------ clients
    def submit(self, inputs: Dict[str, np.ndarray], size: int) -> Dict[str, np.ndarray]:
        """Runs one request's inputs (``size`` sentences) as part of a batch; returns its outputs."""
        options = self.options
        if size > options.max_batch_size:
            raise ServingError(
                "INVALID_ARGUMENT",
                f"Task size {size} is larger than maximum input batch size {options.max_batch_size} "
                f"(batching parameter max_batch_size; send fewer sentences per request)",
            )
        tasks = self._split(inputs, size)
        with self._cv:
            self._check_room(size)
            self._queue.extend(tasks)
            self._queued += size
            waiting = self._queued
            self.stats["requests"] += 1
            self._cv.notify_all()
        self._on_queued(waiting)
        for task in tasks:
            task.done.wait()
        for task in tasks:
            if task.error is not None:
                raise task.error
        if len(tasks) == 1:
            return tasks[0].outputs
        return {name: np.concatenate([task.outputs[name] for task in tasks]) for name in tasks[0].outputs}

    def _split(self, inputs: Dict[str, np.ndarray], size: int) -> List[_Task]:
        """One request as tasks of at most the execution batch size (one task unless large batches are split)."""
        key = tuple((name, inputs[name].item()) for name in self._key_inputs)
        piece = self.options.execution_batch_size
        enqueued = self._clock.now()
        return [
            _Task({name: value[start:start + piece] if name in self._batch_inputs else value
                   for name, value in inputs.items()}, min(piece, size - start), key, enqueued)
            for start in range(0, size, piece)
        ]

    def _check_room(self, size: int) -> None:
        """UNAVAILABLE when the batcher is closed or ``size`` more sentences do not fit (lock held)."""
        if self._closed:
            raise ServingError("UNAVAILABLE", f"{self.name} is being unloaded; retry")
        options = self.options
        capacity = options.max_enqueued_batches * options.execution_batch_size
        if self._queued and self._queued + size > capacity:
            raise ServingError(
                "UNAVAILABLE",
                f"The batch scheduling queue to which this task was submitted is full ({self._queued} sentences "
                f"waiting, room for {capacity}: max_enqueued_batches {options.max_enqueued_batches} x batch "
                f"size {options.execution_batch_size}); retry later",
            )

    def flush(self) -> None:
        """Run waiting requests now instead of waiting for batch timeouts (shutdown)."""
        with self._cv:
            self._flush = True
            self._cv.notify_all()

    def close(self, timeout: float = 30.0) -> None:
        """Run what is queued, then stop the batch threads."""
        with self._cv:
            self._closed = True
            self._cv.notify_all()
        deadline = time.monotonic() + timeout
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))

    # ------------------------------------------------------------------------------------ threads
    def _select(self, key: tuple):
        """The waiting tasks of ``key`` that fit in one batch, in arrival order, and whether it is full."""
        limit = self.options.execution_batch_size
        chosen, total = [], 0
        for task in self._queue:
            if task.key != key:
                continue
            if total + task.size > limit:
                return chosen, True
            chosen.append(task)
            total += task.size
        return chosen, total >= limit

    def _work(self) -> None:
        while True:
            with self._cv:
                while (not self._queue or self._forming) and not (self._closed and not self._queue):
                    self._cv.wait()
                if not self._queue:
                    return  # closed and drained
                self._forming = True
                try:
                    first = self._queue[0]
                    deadline = first.enqueued + self.options.batch_timeout_seconds
                    while True:
                        batch, full = self._select(first.key)
                        if full or self._flush or self._closed or self._clock.now() >= deadline:
                            break
                        self._clock.wait_until(self._cv, deadline)
                    for task in batch:
                        self._queue.remove(task)
                    self._queued -= sum(task.size for task in batch)
                finally:
                    self._forming = False
                    self._cv.notify_all()
            self._execute(batch)

    def _execute(self, batch: List[_Task]) -> None:
        total = sum(task.size for task in batch)
        try:
            if len(batch) == 1:
                inputs = batch[0].inputs
            else:
                inputs = {
                    name: np.concatenate([task.inputs[name] for task in batch]) if name in self._batch_inputs
                    else batch[0].inputs[name]
                    for name in batch[0].inputs
                }
            outputs = self._run(inputs)
            for name, value in outputs.items():
                if value.ndim == 0 or value.shape[0] != total:
                    raise ServingError("INTERNAL", f"output '{name}' of a batch of {total} has shape "
                                                   f"{list(value.shape)}; cannot split it per request")
            offset = 0
            for task in batch:
                task.outputs = {name: value[offset:offset + task.size] for name, value in outputs.items()}
                offset += task.size
        except BaseException as error:  # every request of the batch gets the error, none hangs
            failure = from_exception(error)
            for task in batch:
                task.error = failure
        with self._cv:
            self.stats["batches"] += 1
            self.stats["sentences"] += total
            self.stats["largest_batch"] = max(self.stats["largest_batch"], total)
        for task in batch:
            task.done.set()
