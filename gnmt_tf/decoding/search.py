"""The one decoding loop over ``GNMT.step``; strategies decide what it does with each step.

:func:`decode` owns the only ``tf.while_loop`` of decoding. Each iteration it

1. calls ``step_fn(state, tokens) -> (logits [rows, V], attention [rows, S], state)``
   (:meth:`gnmt_tf.models.gnmt.GNMT.step`) on the rows of the searches still running;
2. takes the log-softmax of the logits;
3. for a strategy that generates, bans tokens: PAD and BOS are never generated, and,
   if the strategy asks for it (``eos_at_limit``), only EOS may be chosen at a search's
   last allowed step;
4. hands the step to the strategy, which picks the tokens to feed next, which row each
   new row continues (beam reordering) and which searches are done;
5. reorders the decoder state by those rows and gathers the rows of done searches
   away, so they stop costing compute (for a strategy that does not reorder rows,
   only at the steps where a search ended); a generating search is done at its
   length limit whatever the strategy says.

The loop ends when no search is running. The length limit of a search is
``ceil(max_length_ratio * source length)`` output tokens (section 7: at most twice
the source), at least 1, where the source length counts the real source tokens,
the EOS every source ends with included.

A strategy (:class:`DecodingStrategy`; OpenNMT-tf's ``DecodingStrategy``, keras-hub's
``Sampler``) supplies ``initialize`` / ``step`` / ``finalize``:

* :class:`gnmt_tf.decoding.beam.BeamSearch`: section 7's beam search with eq. 14;
* :class:`gnmt_tf.decoding.greedy.GreedySearch`: the most probable token each step;
* :class:`gnmt_tf.decoding.sampling.RandomSampling`: samples from the softmax (RL, section 5);
* :class:`gnmt_tf.decoding.scoring.ForcedScoring`: log P and eq. 14 of given translations.

A sentence may be searched several times independently (``searches_per_sentence``:
RL's samples); search ``b * n + k`` is the k-th search of sentence b. A search has
``rows_per_search`` decoder rows (the beam width); rows of one search are adjacent.
A part of the decoder state whose type says ``one_row_per_search`` (the attention
memory) is shared by a search's rows: it is repeated per search, not per row, and
gathered only when searches end (:func:`gnmt_tf.decoding.rows.map_rows`).

How the running searches' rows are laid out for ``step_fn`` is the ``layout``'s business
(:class:`gnmt_tf.decoding.rows.RowLayout`), called at fixed points of the loop: as they
are, or padded to shape buckets for a compiled step
(:class:`gnmt_tf.decoding.buckets.BucketedRows`), whose padded rows' outputs the
strategy never sees.

What a strategy keeps is split in two nests of tensors:

* ``live``: leading dimension = running searches; the driver gathers away the rows
  of done searches, so only what the running searches need belongs here;
* ``results``: leading dimension = every search; the strategy writes the running
  searches' rows (``StepInputs.active`` says which) and they outlive the search.

The search state is graph-only and TFLite-convertible (the beam search runs in
the exported TFLite model): no TensorArrays and no ``x[:, None]`` indexing. Output
histories are allocated at their final length (the longest length limit) before the
loop and written one step at a time (:func:`write_step`), so the loop's tensors keep
their shapes from step to step and change only when searches end: TFLite's ``WHILE``
re-plans its body's memory whenever a loop variable changes shape, which a history
growing by one token per step made it do at every step.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple, Optional, Tuple

import tensorflow as tf

from gnmt_tf.decoding.rows import UNPADDED, RowLayout, gather_rows, map_rows, repeat_rows
from gnmt_tf.vocab import BOS_ID, EOS_ID, PAD_ID

NEG_INF = float("-inf")


class StepInputs(NamedTuple):
    """What a strategy sees of one step, for the A searches still running."""

    step: tf.Tensor  # int32 []: t, this step chooses output token t + 1 (1-based)
    log_probs: tf.Tensor  # float32 [A, rows_per_search, V]: log-softmax, banned tokens -inf
    attention: tf.Tensor  # float32 [A, rows_per_search, S]: this step's attention probabilities
    active: tf.Tensor  # int32 [A]: which searches these are (indices into ``results``)
    source_mask: tf.Tensor  # bool [A, S]: real source positions
    limits: tf.Tensor  # int32 [A]: output length limits (tokens, EOS included)


class StepOutput(NamedTuple):
    """A strategy's decision for one step."""

    tokens: tf.Tensor  # int32 [A, rows_per_search]: the tokens fed at the next step
    parents: Optional[tf.Tensor]  # int32 [A, rows_per_search]: the row (within its search) each
    # new row continues, or None when every row continues itself
    done: tf.Tensor  # bool [A]: searches that stop here
    live: Any  # the strategy's live nest, still with A rows
    results: Any  # the strategy's results nest, every search


class SearchState(NamedTuple):
    """The loop variables of :func:`decode`."""

    step: tf.Tensor  # int32 []
    active: tf.Tensor  # int32 [A]: the searches still running
    tokens: tf.Tensor  # int32 [A * rows_per_search]: fed at the next step
    decoder_state: Any  # ``step_fn``'s state nest, [A * rows_per_search, ...]
    live: Any  # the strategy's live nest, [A, ...]
    results: Any  # the strategy's results nest, [searches, ...]


class DecodingStrategy:
    """What :func:`decode` does with each step. Subclasses override the methods below.

    Class attributes (Python values, fixed when the graph is built):

    * ``searches_per_sentence``: independent searches of each sentence;
    * ``rows_per_search``: decoder rows of one search (hypotheses; the beam width);
    * ``generates``: the strategy chooses tokens, so the bans and the length limit apply.
      False for a strategy that feeds given tokens (forced scoring);
    * ``eos_at_limit``: at a search's last allowed step only EOS may be chosen.
    """

    searches_per_sentence: int = 1
    rows_per_search: int = 1
    generates: bool = True
    eos_at_limit: bool = True

    def initialize(self, source_mask: tf.Tensor, limits: tf.Tensor) -> Tuple[Any, Any]:
        """``(live, results)`` before the first step; ``source_mask`` bool [searches, S],
        ``limits`` int32 [searches]: the most tokens a search may generate (a history of
        ``reduce_max(limits)`` steps holds every generated output)."""
        raise NotImplementedError

    def shape_invariants(self, live, results) -> Tuple[Any, Any]:
        """Shape invariants of ``(live, results)``; by default every dimension may change."""
        return tf.nest.map_structure(_any_shape, live), tf.nest.map_structure(_any_shape, results)

    def step(self, inputs: StepInputs, live, results) -> StepOutput:
        raise NotImplementedError

    def finalize(self, results, source_mask: tf.Tensor):
        """The strategy's output from the final ``results``; ``source_mask`` as in initialize."""
        raise NotImplementedError


def output_length_limits(source_mask, max_length_ratio) -> tf.Tensor:
    """``ceil(max_length_ratio * real source length)``, at least 1, per sentence [batch] (section 7)."""
    real_lengths = tf.reduce_sum(tf.cast(source_mask, tf.int32), axis=1)
    limits = tf.math.ceil(tf.cast(real_lengths, tf.float32) * max_length_ratio)
    return tf.maximum(tf.cast(limits, tf.int32), 1)


def ban_special_tokens(
    scores: tf.Tensor, eos_only: Optional[tf.Tensor] = None, banned_value=NEG_INF
) -> tf.Tensor:
    """``scores`` [..., V] (logits or log-probabilities) with PAD and BOS set to ``banned_value``.

    With ``eos_only`` (bool, broadcastable to ``scores``, e.g. [A, 1, 1]) every token but
    EOS is banned too where it is True: at its length limit an output may only end.
    """
    token_ids = tf.range(static_or_dynamic_size(scores, -1))
    allowed = tf.logical_and(tf.not_equal(token_ids, PAD_ID), tf.not_equal(token_ids, BOS_ID))
    if eos_only is not None:
        allowed = tf.logical_and(allowed, tf.logical_or(~eos_only, tf.equal(token_ids, EOS_ID)))
    return tf.where(allowed, scores, tf.constant(banned_value, scores.dtype))


def decode(
    step_fn: Callable,
    initial_state,
    source_mask,
    strategy: DecodingStrategy,
    max_length_ratio: float = 2.0,
    layout: RowLayout = UNPADDED,
):
    """Run ``strategy`` over ``step_fn`` for a batch of sentences (see the module docstring).

    Args:
        step_fn: ``(state, tokens [rows]) -> (logits [rows, V], attention [rows, S], state)``.
        initial_state: a nest of tensors with leading dimension ``batch`` (one row per sentence).
        source_mask: bool [batch, S], True at real source positions (EOS included).
        strategy: a :class:`DecodingStrategy`.
        max_length_ratio: a generated output has at most ``ceil(ratio * source length)`` tokens.
        layout: how the running searches' decoder rows are laid out for ``step_fn``
            (:class:`gnmt_tf.decoding.rows.RowLayout`): as they are, or padded to shape buckets so
            that a compiled step sees few distinct shapes
            (:class:`gnmt_tf.decoding.buckets.BucketedRows`).

    Returns:
        ``strategy.finalize(...)``: the strategy's output type.
    """
    copies, width = strategy.searches_per_sentence, strategy.rows_per_search
    source_mask = repeat_rows(tf.convert_to_tensor(source_mask, tf.bool), copies)
    limits = output_length_limits(source_mask, max_length_ratio)
    live, results = strategy.initialize(source_mask, limits)
    initial = _initial_search_state(initial_state, source_mask, layout, copies, width, live, results)
    body = _loop_body(layout.wrap(step_fn), strategy, layout, source_mask, limits)
    invariants = SearchState(tf.TensorShape([]), tf.TensorShape([None]), tf.TensorShape([None]),
                             tf.nest.map_structure(_any_shape, initial.decoder_state),
                             *strategy.shape_invariants(live, results))
    (final,) = tf.while_loop(lambda state: tf.shape(state.active)[0] > 0, body, (initial,),
                             shape_invariants=(invariants,))
    return strategy.finalize(final.results, source_mask)


def _initial_search_state(initial_state, source_mask, layout: RowLayout, copies: int, width: int, live,
                          results) -> SearchState:
    """Every search active, each of its ``width`` rows starting from BOS with its sentence's decoder state."""
    every_search = tf.range(tf.shape(source_mask)[0])
    slots = layout.pad(every_search)  # the searches the loop keeps decoder rows for
    decoder_state = map_rows(initial_state, lambda s: repeat_rows(s, copies * width),
                             lambda s: repeat_rows(s, copies))
    return SearchState(
        step=tf.constant(0),
        active=every_search,
        tokens=tf.fill([tf.shape(slots)[0] * width], BOS_ID),
        decoder_state=layout.pad_state(decoder_state, slots, width),
        live=live,
        results=results,
    )


def _loop_body(step_fn: Callable, strategy: DecodingStrategy, layout: RowLayout, source_mask, limits):
    """One step of every active search: the model's step, the strategy's choice, done searches dropped."""
    width, source_len = strategy.rows_per_search, tf.shape(source_mask)[1]

    def body(state: SearchState):
        t, n_active = state.step, tf.shape(state.active)[0]
        logits, attention, decoder_state = step_fn(state.decoder_state, state.tokens, n_active * width)
        vocab = static_or_dynamic_size(logits, -1)
        log_probs = tf.reshape(tf.nn.log_softmax(logits), [n_active, width, vocab])
        limit = tf.gather(limits, state.active)
        if strategy.generates:
            last_step = t + 1 >= limit  # [A]
            eos_only = tf.reshape(last_step, [n_active, 1, 1]) if strategy.eos_at_limit else None
            log_probs = ban_special_tokens(log_probs, eos_only)
        attention = tf.reshape(attention, [n_active, width, source_len])
        inputs = StepInputs(step=t, log_probs=log_probs, attention=attention, active=state.active,
                            source_mask=tf.gather(source_mask, state.active), limits=limit)
        output = strategy.step(inputs, state.live, state.results)
        done = tf.logical_or(output.done, last_step) if strategy.generates else output.done
        active, tokens, decoder_state, live = _next_rows(state, output, done, decoder_state, layout, width)
        return (SearchState(t + 1, active, tokens, decoder_state, live, output.results),)

    return body


def _next_rows(state: SearchState, output, done, decoder_state, layout: RowLayout, width: int):
    """The searches, tokens, decoder rows and live state of the next step: rows reordered by the
    strategy's parents, the rows of searches that are done dropped (Marian's batch pruning)."""
    n_active = tf.shape(state.active)[0]

    def remove_done():
        """Reorder the decoder state by the rows kept, then drop the done searches' rows."""
        keep = tf.reshape(tf.where(~done), [-1])
        slots = layout.pad(keep)
        parents = output.parents if output.parents is not None else tf.range(width)
        rows = tf.expand_dims(tf.range(n_active) * width, 1) + parents  # [A, width]
        return (
            tf.gather(state.active, keep),
            tf.reshape(tf.gather(output.tokens, slots), [-1]),
            gather_rows(decoder_state, slots, tf.gather(rows, slots)),
            tf.nest.map_structure(lambda s: tf.gather(s, keep), output.live),
        )

    def keep_all():
        return state.active, tf.reshape(layout.pad(output.tokens), [-1]), decoder_state, output.live

    if output.parents is not None:  # the rows are reordered every step anyway
        return remove_done()
    # rows stay in place: gather only at the steps where a search ended
    return tf.cond(tf.reduce_any(done), remove_done, keep_all)


def write_step(history: tf.Tensor, active: tf.Tensor, step, values: tf.Tensor) -> tf.Tensor:
    """``history`` [searches, T, ...] with ``values`` [A, ...] written at time ``step`` for the
    searches ``active``; the other searches' entries (done ones) keep what they hold."""
    where = tf.stack([active, tf.fill(tf.shape(active), step)], axis=1)  # [A, 2]
    return tf.tensor_scatter_nd_update(history, where, values)


def static_or_dynamic_size(tensor: tf.Tensor, axis: int):
    """The size of ``tensor`` along ``axis``: a Python int when the graph knows it (the
    vocabulary, from the softmax layer), else a scalar tensor."""
    size = tensor.shape[axis]
    return size if size is not None else tf.shape(tensor)[axis]


def _any_shape(tensor) -> tf.TensorShape:
    return tf.TensorShape([None] * len(tensor.shape))
