"""The batcher (serving/batching.py) on its own, with fake models and a clock the test moves.

Nothing here sleeps or depends on how fast the machine is: the window closes when the test
advances the clock, a request is known to be queued when the ``on_queued`` hook said so, and a
model call is held by a gate until the test opens it.
"""

import numpy as np
import pytest
import tensorflow as tf
from serving_helpers import Gate, ManualClock, QueuedRequests, Requests

from serving.batching import Batcher
from serving.config import BatchingOptions
from serving.errors import ServingError

pytestmark = pytest.mark.draws_nothing_random  # conftest does not reseed before each test

WINDOW = 0.5  # seconds (batch_timeout_micros 500000), a power of two so that the clock's sums are exact


def options(**fields):
    return BatchingOptions(**{"max_batch_size": 16, "batch_timeout_micros": int(WINDOW * 1e6),
                              "num_batch_threads": 1, **fields})


class EchoModel:
    """A model that returns its sentences as "translations" and records each batch it ran (a list of sentences)."""

    def __init__(self, before_answering=lambda: None):
        self.batches = []
        self._before_answering = before_answering

    def __call__(self, inputs):
        self.batches.append([s.decode() for s in inputs["sentences"]])
        self._before_answering()
        return {"translations": inputs["sentences"]}


def sentences(*texts):
    return {"sentences": np.array([t.encode() for t in texts], dtype=object)}


@pytest.fixture
def make_batcher():
    """Batchers built with a manual clock and a queue hook, closed after the test (their waiting requests answered)."""
    made = []

    def make(model, batching_options, key_inputs=()):
        clock, queued = ManualClock(), QueuedRequests()
        batcher = Batcher(model, batching_options, ["sentences"], list(key_inputs), name="test",
                          clock=clock, on_queued=queued)
        made.append(batcher)
        return batcher, clock, queued

    yield make
    for batcher in made:
        batcher.close(60)


def submitter(batcher):
    return Requests(lambda inputs: batcher.submit(inputs, len(inputs["sentences"]))["translations"].tolist())


def test_requests_wait_for_the_window_and_are_merged_when_it_closes(make_batcher):
    model = EchoModel()
    batcher, clock, queued = make_batcher(model, options())
    requests = submitter(batcher)
    for index, text in enumerate(["a", "b c", "d"]):
        requests.start(index, sentences(*text.split()))
    queued.wait_for(3)
    clock.advance(WINDOW / 2)  # half the window: still open
    assert model.batches == [] and not any(requests.done(i) for i in range(3))
    clock.advance(WINDOW / 2)
    answers = requests.join()
    assert answers == {0: [b"a"], 1: [b"b", b"c"], 2: [b"d"]}  # each request gets its own rows back
    assert len(model.batches) == 1 and sorted(model.batches[0]) == ["a", "b", "c", "d"]
    assert batcher.stats == {"requests": 3, "batches": 1, "sentences": 4, "largest_batch": 4}


def test_a_full_batch_runs_without_waiting_for_the_window(make_batcher):
    model = EchoModel()
    batcher, _, queued = make_batcher(model, options(max_batch_size=4))
    requests = submitter(batcher)
    requests.start(0, sentences("a", "b"))
    requests.start(1, sentences("c"))
    queued.wait_for(2)
    assert model.batches == [] and not requests.done(0)  # 3 sentences of 4: the window is open
    requests.start(2, sentences("d"))  # the fourth: the batch is full and runs, though the clock never moved
    assert requests.join(0, 1, 2) == {0: [b"a", b"b"], 1: [b"c"], 2: [b"d"]}
    assert len(model.batches) == 1 and sorted(model.batches[0]) == ["a", "b", "c", "d"]
    requests.start(3, sentences("e"))  # a batch of its own, which waits for the window again
    queued.wait_for(4)
    assert not requests.done(3)
    batcher.flush()
    assert requests.join(3) == {3: [b"e"]}
    assert model.batches[1:] == [["e"]]


def test_flush_runs_waiting_requests_at_once_and_every_later_one(make_batcher):
    """What a draining server does: no request waits for its window any more."""
    model = EchoModel()
    batcher, _, queued = make_batcher(model, options(batch_timeout_micros=3600 * 10**6))
    requests = submitter(batcher)
    requests.start("waiting", sentences("a"))
    queued.wait_for(1)
    assert not requests.done("waiting")
    batcher.flush()
    assert requests.join() == {"waiting": [b"a"]}
    later = submitter(batcher)
    later.start("later", sentences("b"))
    assert later.join() == {"later": [b"b"]}
    assert model.batches == [["a"], ["b"]]


def test_a_full_queue_is_unavailable_until_it_drains(make_batcher):
    """Room for max_enqueued_batches x batch size sentences: a request that does not fit gets UNAVAILABLE at once,
    without being queued; once the queue has drained the same request is taken."""
    gate = Gate()
    model = EchoModel(gate.pass_through)
    batcher, clock, queued = make_batcher(model, options(max_batch_size=2, max_enqueued_batches=1))
    requests = submitter(batcher)
    requests.start("running", sentences("a", "b"))  # a full batch: runs, and the gate holds it in the model
    gate.wait_entered()
    requests.start("queued", sentences("c", "d"))  # fills the queue (the only batch thread is busy)
    queued.wait_for(2)
    with pytest.raises(ServingError) as refused:
        batcher.submit(sentences("e"), 1)
    assert refused.value.code == "UNAVAILABLE" and refused.value.http_status == 503
    assert refused.value.message == (
        "The batch scheduling queue to which this task was submitted is full (2 sentences waiting, room for 2: "
        "max_enqueued_batches 1 x batch size 2); retry later")
    assert batcher.stats["requests"] == 2  # the refused one was never queued
    gate.open()
    assert requests.join() == {"running": [b"a", b"b"], "queued": [b"c", b"d"]}
    retried = submitter(batcher)
    retried.start("retried", sentences("e"))
    queued.wait_for(3)
    clock.advance(WINDOW)
    assert retried.join() == {"retried": [b"e"]}


def test_a_closed_batcher_answers_what_it_holds_then_is_unavailable(make_batcher):
    """A version being unloaded: its queued requests still run, a new one gets UNAVAILABLE (the client retries)."""
    model = EchoModel()
    batcher, _, queued = make_batcher(model, options())
    requests = submitter(batcher)
    requests.start("queued", sentences("a"))
    queued.wait_for(1)
    batcher.close(60)
    assert requests.join() == {"queued": [b"a"]}
    with pytest.raises(ServingError) as refused:
        batcher.submit(sentences("b"), 1)
    assert (refused.value.code, refused.value.message) == ("UNAVAILABLE", "test is being unloaded; retry")
    assert model.batches == [["a"]]


def test_a_failure_inside_the_model_is_internal_for_its_batch_and_the_batcher_goes_on(make_batcher):
    calls = []

    def model(inputs):
        calls.append(len(inputs["sentences"]))
        if len(calls) == 1:
            raise RuntimeError("the model broke")
        return {"translations": inputs["sentences"]}

    batcher, clock, queued = make_batcher(model, options())
    requests = submitter(batcher)
    requests.start(0, sentences("a"))
    requests.start(1, sentences("b", "c"))
    queued.wait_for(2)
    clock.advance(WINDOW)
    answers = requests.join()
    for error in answers.values():  # every request of the failed batch gets the error: none hangs
        assert isinstance(error, ServingError)
        assert (error.code, error.http_status, error.message) == ("INTERNAL", 500, "RuntimeError: the model broke")
    after = submitter(batcher)
    after.start(2, sentences("d"))
    queued.wait_for(3)
    clock.advance(WINDOW)
    assert after.join() == {2: [b"d"]} and calls == [3, 1]


def test_outputs_that_cannot_be_split_per_request_are_internal(make_batcher):
    batcher, clock, queued = make_batcher(lambda inputs: {"translations": np.array([b"x"] * 3, dtype=object)},
                                          options())
    requests = submitter(batcher)
    requests.start(0, sentences("a", "b"))
    queued.wait_for(1)
    clock.advance(WINDOW)
    error = requests.join()[0]
    assert (error.code, error.message) == (
        "INTERNAL", "output 'translations' of a batch of 2 has shape [3]; cannot split it per request")


def test_requests_with_other_scalars_are_not_merged_and_a_failing_one_fails_alone(make_batcher):
    """Even if a bad option reached the batcher (the server checks them first; TF Serving relies on the
    graph), it is not merged with requests of other options: scalar inputs key the batches. Here the model
    refuses alpha < 0 as the graph does; the good requests waiting with it are answered."""
    runs = []

    def model(inputs):
        runs.append((float(inputs["alpha"]), sorted(s.decode() for s in inputs["sentences"])))
        if inputs["alpha"] < 0:
            raise tf.errors.InvalidArgumentError(None, None, "assertion failed: [alpha must be ...]")
        return {"translations": inputs["sentences"]}

    batcher, clock, queued = make_batcher(model, options(), key_inputs=["alpha"])
    requests = submitter(batcher)
    for index in range(6):
        alpha = -1.0 if index in (1, 4) else 0.5
        requests.start(index, dict(sentences(f"s{index}"), alpha=np.array(alpha, np.float32)))
    queued.wait_for(6)
    clock.advance(WINDOW)
    answers = requests.join()
    assert {i: a if isinstance(a, list) else a.code for i, a in answers.items()} == {
        0: [b"s0"], 1: "INVALID_ARGUMENT", 2: [b"s2"], 3: [b"s3"], 4: "INVALID_ARGUMENT", 5: [b"s5"]}
    assert answers[1].message == "assertion failed: [alpha must be ...]"
    assert sorted(runs) == [(-1.0, ["s1", "s4"]), (0.5, ["s0", "s2", "s3", "s5"])]  # one batch per alpha


def test_a_request_over_max_batch_size_is_refused_and_with_splitting_runs_in_pieces(make_batcher):
    model = EchoModel()
    batcher, _, _ = make_batcher(model, options(max_batch_size=4))
    with pytest.raises(ServingError) as refused:
        batcher.submit(sentences(*"abcde"), 5)
    assert (refused.value.code, refused.value.message) == (
        "INVALID_ARGUMENT", "Task size 5 is larger than maximum input batch size 4 (batching parameter "
        "max_batch_size; send fewer sentences per request)")
    split, _, _ = make_batcher(model, options(max_batch_size=8, enable_large_batch_splitting=True,
                                              max_execution_batch_size=2))
    requests = submitter(split)
    requests.start(0, sentences(*"abcde"))
    split.flush()  # the last piece ("e") is not a full batch
    assert requests.join() == {0: [b"a", b"b", b"c", b"d", b"e"]}  # put back together in order
    assert sorted(map(sorted, model.batches)) == [["a", "b"], ["c", "d"], ["e"]]
