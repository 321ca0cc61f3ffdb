"""Maximum-likelihood training with the paper's recipe (section 8.3), on Keras ``fit``.

The training step is ``GNMT.train_step``; the :class:`Trainer` wires the pieces of a run into a model
directory and reports how it ended:

* :mod:`~gnmt_tf.training.state`: the model, its optimizer and objective, the weights the run ships
  (:mod:`~gnmt_tf.training.averaging`), compiled into the step; the checkpoints and the restore.
* :mod:`~gnmt_tf.training.dev`: the chief's dev evaluation (dev loss, BLEU, best/).
* :mod:`~gnmt_tf.training.run`: ``fit`` with the callbacks of :mod:`gnmt_tf.training.callbacks`
  (stopping, checkpoints, summaries, dev evaluation), on the batches of :mod:`~gnmt_tf.training.batches`.
"""

from __future__ import annotations

from typing import Callable, Optional, Sequence, Tuple

import tensorflow as tf
import tf_keras as keras

from gnmt_tf import model_files
from gnmt_tf.config import GNMTConfig
from gnmt_tf.data.tokenizer import WordpieceTokenizer
from gnmt_tf.training.batches import TrainingBatches
from gnmt_tf.training.dev import DevEvaluator
from gnmt_tf.training.masked_pairs import slot_vocabulary_problem
from gnmt_tf.training.precision import PROC_CPUINFO
from gnmt_tf.training.run import TrainingDiverged, TrainingRun, TrainResult
from gnmt_tf.training.state import Cluster, RunCheckpoints, TrainingState, training_objective

__all__ = ["Trainer", "TrainResult", "TrainingDiverged"]

Pair = Tuple[str, str]


class Trainer:
    """Trains a GNMT on sentence pairs into a self-contained model directory.

    Args:
        config: the run's config (``config.model.vocab_size`` must equal the tokenizer's).
        model_dir: where checkpoints, logs, config and vocabulary go.
        train_pairs, dev_pairs: (source, target) sentences, as read. With ``localization.placeholders``
            the model learns from them masked (:mod:`gnmt_tf.training.masked_pairs`): the training pairs
            and the dev pairs of the dev loss; dev BLEU translates the dev sources as they are.
        tokenizer: the shared wordpiece tokenizer.
        log: where progress messages go (``print`` by default).
        verbose: progress while training (:class:`~gnmt_tf.training.callbacks.Progress`): 1, a line
            rewritten after every step (a terminal); 2, a line every 30 seconds; 0, none.
        strategy: the ``tf.distribute`` strategy (:mod:`gnmt_tf.parallel.distribute`); default: one device.
        init_checkpoint: weights to start from when ``model_dir`` has no checkpoint yet
            (a fine-tune of another model; only the model is restored, not its optimizer).
        cpuinfo: the CPU that ``training.product_precision: auto`` is resolved for, an object with
            ``text()`` (:class:`~gnmt_tf.training.precision.CpuInfoFile`); default: this machine's.

    The weights a run ships: with ``training.average_decay`` an exponential moving average of
    the weights (:mod:`gnmt_tf.training.averaging`), else the raw weights. Dev BLEU is measured
    on them with the config's beam search through :func:`gnmt_tf.inference.evaluation.evaluate`,
    ``best/`` is chosen on it and holds them, and ``averaged/`` holds the average at every checkpoint.
    The final figure is ``python -m gnmt_tf.evaluate``'s on the checkpoint ``translate`` uses by
    default, computed by the same code.

    With ``training.quantization_aware`` every LSTM kernel is fake-quantized (eq. 12) in
    training and in dev evaluation (:mod:`gnmt_tf.quantization.qat`); checkpoints hold the float weights.
    With ``training.objective: rl`` each step is the mixed objective of eq. 9 with the GLEU
    reward (:mod:`gnmt_tf.training.reinforce`), and the run stops once dev BLEU has not improved for
    ``rl.patience`` evaluations.
    """

    def __init__(
        self,
        config: GNMTConfig,
        model_dir: str,
        train_pairs: Sequence[Pair],
        dev_pairs: Sequence[Pair],
        tokenizer: WordpieceTokenizer,
        log: Callable[[str], None] = print,
        verbose: int = 1,
        strategy: Optional[tf.distribute.Strategy] = None,
        init_checkpoint: Optional[str] = None,
        cpuinfo=PROC_CPUINFO,
    ):
        if config.model.vocab_size != tokenizer.vocab_size:
            raise ValueError(
                f"model.vocab_size ({config.model.vocab_size}) must equal the tokenizer's "
                f"vocabulary size ({tokenizer.vocab_size})"
            )
        problem = slot_vocabulary_problem(config.localization, tokenizer.pieces)
        if problem is not None:
            raise ValueError(problem)
        self.config = config
        self.cluster = Cluster.of(strategy)
        self.state = TrainingState(config, training_objective(config, tokenizer), self.cluster, cpuinfo)
        self.checkpoints = RunCheckpoints(self.state, model_dir, self.cluster, config.training.keep_checkpoints)
        self.dev: Optional[DevEvaluator] = None  # the chief's alone
        if self.cluster.is_chief:
            # As the model directory keeps them (dev.tsv), so that evaluate on dev.tsv sees the same sentences.
            folded = [model_files.folded(pair) for pair in dev_pairs]
            self.dev = DevEvaluator(config, model_dir, folded, tokenizer, self.state, self.cluster, log)
        self.checkpoints.restore(config, init_checkpoint, log)
        self.batches = TrainingBatches(config, train_pairs, tokenizer, self.cluster)
        self.run = TrainingRun(config, model_dir, self.state, self.checkpoints, self.dev, self.cluster, log, verbose)

    def train(self, max_steps: Optional[int] = None, max_minutes: Optional[float] = None,
              callbacks: Sequence[keras.callbacks.Callback] = ()) -> TrainResult:
        """Train until ``max_steps`` (default: the config's), the time limit, or a signal.

        ``callbacks``: Keras callbacks to run after the run's own at every step (after its checkpoint
        and dev evaluation), e.g. :class:`~gnmt_tf.training.callbacks.PauseAfterStep`.
        """
        t = self.config.training
        return self.run.train(self.batches, max_steps if max_steps is not None else t.max_steps,
                              max_minutes if max_minutes is not None else t.max_minutes, callbacks)

    # What callers read of the run: the model, its step, and the chief's dev evaluation.
    @property
    def model(self) -> keras.Model:
        return self.state.model

    @property
    def step(self) -> int:
        return self.state.step

    @property
    def is_chief(self) -> bool:
        return self.cluster.is_chief

    @property
    def product_precision(self) -> str:
        return self.state.product_precision

    @property
    def best_bleu(self) -> Optional[float]:
        return self.dev.record.best

    @property
    def dev_model(self) -> keras.Model:
        return self.dev.dev_model

    @property
    def dev_weights(self):
        return self.dev.dev_weights

    @property
    def translator(self):
        return self.dev.translator
