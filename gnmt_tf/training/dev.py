"""The chief's dev evaluation of a training run: dev loss and perplexity, dev BLEU through the translator,
the best score so far and the checkpoints of the shipped weights (best/, and averaged/ with a weight average).

What is evaluated is what the run ships (:mod:`gnmt_tf.training.averaging`), in a model of its own
when that is not the trained model itself (the weight average, or a one-device copy of distributed
weights). Dev BLEU is measured with the config's beam search through
:func:`gnmt_tf.inference.evaluation.evaluate`, as ``python -m gnmt_tf.evaluate`` measures it.
"""

from __future__ import annotations

import math
import os
from typing import Callable, List, Optional, Sequence, Tuple

import tensorflow as tf

from gnmt_tf import model_files
from gnmt_tf.config import GNMTConfig
from gnmt_tf.data import make_dataset
from gnmt_tf.data.tokenizer import WordpieceTokenizer
from gnmt_tf.inference.evaluation import Evaluation, evaluate, load_translator
from gnmt_tf.inference.translator import Translator
from gnmt_tf.layers.weights import FLOAT_WEIGHTS, WeightReader
from gnmt_tf.localization.in_graph import text_masking
from gnmt_tf.models.gnmt import unpack_batch
from gnmt_tf.models.losses import SequenceCrossEntropy
from gnmt_tf.models.objectives import MaximumLikelihood
from gnmt_tf.training.callbacks import BestScore
from gnmt_tf.training.masked_pairs import pairs_as_trained
from gnmt_tf.training.state import Cluster, TrainingState, quantization_aware

Pair = Tuple[str, str]


class DevEvaluator:
    """Evaluates the weights a run ships on the dev pairs, and keeps the best of them in best/.

    Args:
        dev_pairs: (source, target) sentences, folded as the model directory keeps them (dev.tsv).
        state: the run's :class:`~gnmt_tf.training.state.TrainingState`, whose shipped weights are evaluated.
        log: where each evaluation's line goes.
    """

    def __init__(self, config: GNMTConfig, model_dir: str, dev_pairs: Sequence[Pair], tokenizer: WordpieceTokenizer,
                 state: TrainingState, cluster: Cluster, log: Callable[[str], None]):
        self.model_dir, self.dev_pairs, self.state, self.log = model_dir, list(dev_pairs), state, log
        self.dev_model = state.model
        # What the dev loss and translations read: the weights as the shipped model reads them (the
        # training step's bfloat16 products, if any, are how it computes, not what the model is).
        self.dev_weights = WeightReader(state.qat_transform)
        if cluster.distributed or state.shipped.needs_own_model():
            # model.evaluate would need every worker (collectives, or the parameter-server
            # coordinator); and the average is not the training weights.
            self.dev_model = model_files.build_model(config)
            self.dev_weights = WeightReader(quantization_aware(config, self.dev_model))
        shipped = tf.train.Checkpoint(model=self.dev_model)
        self.best_manager = tf.train.CheckpointManager(shipped, model_files.best_dir(model_dir), max_to_keep=1)
        self.shipped_managers = [tf.train.CheckpointManager(shipped, directory, max_to_keep=1)
                                 for directory in state.shipped.checkpoint_dirs(model_dir)]
        self.summaries = tf.summary.create_file_writer(model_files.dev_log_dir(model_dir))
        self.translator = Translator(self.dev_model, tokenizer, config.decoding,
                                     weight_transform=self.dev_weights.transform,
                                     text=text_masking(config.localization, tokenizer))
        # Dev pairs are not length-filtered: a batch is bounded to the cells of a training batch
        # (training.batch_cells, or 64 of the longest pairs trained on), so that a long dev pair cannot
        # exhaust memory (make_dataset). The dev loss reads them as training reads its pairs (masked, with
        # localization.placeholders); dev BLEU translates them as they are.
        longest = config.data.max_length + 1
        self.dev_data = make_dataset(
            pairs_as_trained(config.localization, self.dev_pairs).pairs, tokenizer.tokenize, batch_size=64,
            max_length=config.data.max_length,
            bucket_width=config.data.bucket_width, shuffle_buffer=1, seed=0, training=False,
            batch_cells=config.training.batch_cells or 64 * longest * longest,
        )
        self.dev_loss = DevLoss(self.dev_model, self.dev_weights)
        best = model_files.read_best_bleu(model_dir) if self.best_manager.latest_checkpoint else None
        # The dev BLEU to beat: a resumed run keeps comparing against its old best.
        self.record = BestScore(best.score if best is not None else None)
        self.last_evaluation: Optional[Evaluation] = None
        self.last_perplexity: Optional[float] = None
        self.evaluated_step: Optional[int] = None
        self._best_evaluation: Optional[Tuple[str, Evaluation]] = None  # (best/ checkpoint, its figure)

    def shipped_model(self):
        """The dev model, holding the weights the run ships."""
        self.state.shipped.copy(self.state.model, self.dev_model)
        return self.dev_model

    def writers(self) -> List["ShippedCheckpoint"]:
        """What saves the shipped weights whenever the run checkpoints (averaged/ with a weight average)."""
        return [ShippedCheckpoint(self, manager) for manager in self.shipped_managers]

    def evaluate(self, step: int) -> Tuple[float, Evaluation]:
        """Dev perplexity (teacher forcing) and BLEU (the config's beam search) of the shipped weights;
        keeps them in best/ when their BLEU is the best so far."""
        # Evaluated at the delta of this step, which is the delta this checkpoint is saved
        # with and will be decoded at (gnmt_tf.model_files), so "best" means best as used.
        model = self.shipped_model()
        loss = self.dev_loss(self.dev_data)
        perplexity = float(math.exp(min(loss, 50.0)))
        evaluation = evaluate(self.translator, self.dev_pairs, warm_up=False)
        delta = model_files.model_delta(model)
        with self.summaries.as_default(step=step):
            for name, value in (("perplexity", perplexity), ("loss", loss), ("bleu", evaluation.bleu.score),
                                ("delta", delta)):
                tf.summary.scalar(name, value)
        self.summaries.flush()
        self.last_evaluation, self.last_perplexity, self.evaluated_step = evaluation, perplexity, step
        kept = self.record.add(evaluation.bleu.score)
        if kept:
            self._best_evaluation = (os.path.abspath(self.best_manager.save(checkpoint_number=step)), evaluation)
            model_files.write_best_bleu(self.model_dir, model_files.BestBleu(
                evaluation.bleu.score, step, evaluation.bleu.signature))
        self.log(
            f"step {step}: dev perplexity {perplexity:.2f}, dev BLEU {evaluation.bleu.score:.2f} "
            f"({self.state.shipped.description}, {evaluation.search}, delta {delta:.3g}) ({self._standing(kept)})"
        )
        return perplexity, evaluation

    def _standing(self, kept: bool) -> str:
        if not kept:
            return f"best {self.record.best:.2f}"
        return "best so far" if self.record.evaluations_since_best == 0 else "equals the best: now best/"

    def final_figure(self, step: int) -> Tuple[Evaluation, str]:
        """Dev BLEU of the checkpoint translate and evaluate load by default, and its path: the figure of
        python -m gnmt_tf.evaluate --model-dir DIR --test DIR/dev.tsv. The weights of ``step`` are
        evaluated first unless they were.

        When that checkpoint is the best/ this run saved, its figure is the one measured when it was
        saved: the same evaluate() on the same weights, decoded as load_translator decodes them
        (float weights, no shortlist). Otherwise (best/ from before a restart, quantization-aware dev
        translations, a shortlist) the checkpoint is loaded and evaluated.
        """
        if self.evaluated_step != step:
            self.evaluate(step)
        checkpoint = model_files.find_checkpoint(self.model_dir)
        if (self._best_evaluation is not None and self._best_evaluation[0] == os.path.abspath(checkpoint)
                and self.dev_weights.transform is FLOAT_WEIGHTS and not model_files.has_shortlist(self.model_dir)):
            return self._best_evaluation[1], checkpoint
        translator, _, checkpoint = load_translator(self.model_dir)
        return evaluate(translator, self.dev_pairs), checkpoint

    def samples(self, evaluation: Evaluation, count: int = 5) -> List[Tuple[str, str, str]]:
        """(source, reference, translation) of ``count`` dev pairs spread over the dev set."""
        chosen = list(range(0, len(self.dev_pairs), max(1, len(self.dev_pairs) // count)))[:count]
        return [(*self.dev_pairs[i], evaluation.hypotheses[i]) for i in chosen]


class ShippedCheckpoint:
    """Saves the shipped weights to a directory of their own (averaged/): a writer for
    :class:`~gnmt_tf.training.callbacks.PeriodicCheckpoint`."""

    def __init__(self, evaluator: DevEvaluator, manager: tf.train.CheckpointManager):
        self.evaluator, self.manager = evaluator, manager

    def save(self, checkpoint_number: int) -> str:
        self.evaluator.shipped_model()
        return self.manager.save(checkpoint_number=checkpoint_number)


class DevLoss:
    """A model's per-token negative log-likelihood (unsmoothed) of dev batches, averaged per pair.

    Computed by a function of its own rather than ``model.evaluate``: inside a strategy's
    ``fit``, Keras would run ``evaluate`` through the strategy even for a model built outside it.
    """

    def __init__(self, model, weights: WeightReader):
        objective = MaximumLikelihood(SequenceCrossEntropy())  # as GNMT.test_step
        ids = tf.TensorSpec([None, None], tf.int32)  # any batch and lengths: traced once
        self._batch_loss = tf.function(  # autograph off: as GNMT.test_step
            lambda x, y: objective.loss(model, unpack_batch((x, y)), training=False, weights=weights)[0],
            input_signature=[(ids, ids), ids], autograph=False,
        )

    def __call__(self, dev_data) -> float:
        total = pairs = 0.0
        for x, y in dev_data:
            count = float(tf.shape(y)[0])
            total += float(self._batch_loss(x, y)) * count
            pairs += count
        return total / max(pairs, 1.0)
