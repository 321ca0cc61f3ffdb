"""The one configuration system: dataclasses loaded from YAML and validated.

A config file has up to seven sections, each a dataclass below::

    model:         the network (paper sections 3, 6, 8)
    training:      the optimisation recipe (section 8.3) and the delta schedule (section 6)
    decoding:      beam search (section 7)
    data:          wordpieces and batching (sections 4.1, 8.3)
    parallel:      model parallelism and the hybrid scheme (section 3.3)
    rl:            refinement with the GLEU reward (section 5)
    localization:  software messages: format placeholders and markup kept through translation

Every field has a default and a docstring (``field_doc``).  Loading is strict:
an unknown key, a value of the wrong type or a value outside its allowed range
raises :class:`ConfigError` with the dotted name of the field, what was given
and what is allowed.  ``--set section.field=value`` overrides go through the
same validation.
"""

from __future__ import annotations

import dataclasses
import difflib
import os
import typing
from dataclasses import dataclass, field
from typing import Any, Dict, List, Literal, Optional, Tuple

import yaml

from gnmt_tf.decoding.options import SEARCH_OPTIONS, search_option_problem
from gnmt_tf.localization.automaton import automaton_problem
from gnmt_tf.localization.placeholders import EXTRA_FIELD, extra_pattern_problem


class ConfigError(ValueError):
    """A configuration value is missing, unknown, of the wrong type or out of range."""


def _doc(text: str, **kwargs) -> Any:
    """A dataclass field with a docstring kept in its metadata."""
    return field(metadata={"doc": text}, **kwargs)


# --------------------------------------------------------------------------------------
# Sections
# --------------------------------------------------------------------------------------
@dataclass
class ModelConfig:
    """The GNMT network (paper sections 3 and 6)."""

    vocab_size: int = _doc(
        "Size of the shared wordpiece vocabulary, special tokens included (section 4.1: "
        "8k-32k). When a vocabulary is learned this is the target size; the saved model "
        "records the size actually learned.",
        default=8000,
    )
    units: int = _doc("LSTM units per layer and width of the residual stream (paper: 1024).", default=1024)
    embedding_dim: Optional[int] = _doc(
        "Width of the source and target wordpiece embeddings, the inputs of the bottom encoder and "
        "decoder layers; null means equal to `units`.",
        default=None,
    )
    encoder_layers: int = _doc(
        "Encoder depth counting the bi-directional bottom layer as one (paper: 8).", default=8
    )
    decoder_layers: int = _doc(
        "Decoder depth (paper: 8). One layer needs `input_feeding: true`: fig. 1 sends the attention "
        "context only to the layers above the bottom one, so a lone layer without it never reads the source.",
        default=8,
    )
    residual_start: int = _doc(
        "First layer (1-based) whose output is added to its input, x^i = m^i + x^(i-1) "
        "(eq. 6; paper: 3, i.e. 'from the third layer up').",
        default=3,
    )
    bidirectional_units: Optional[int] = _doc(
        "Units of each direction (forward, backward) of the bi-directional bottom encoder layer, whose "
        "two outputs are concatenated as the input of encoder layer 2 (fig. 1); null means units/2 so the "
        "concatenation has `units` features (a CHOICE the paper leaves open).",
        default=None,
    )
    attention_units: int = _doc(
        "Hidden layer width of the additive attention network (eq. 4; paper: 1024).", default=1024
    )
    input_feeding: bool = _doc(
        "If true the bottom decoder layer also receives the previous step's attention "
        "context (tensorflow/nmt's 'gnmt' variant). The paper (fig. 1 caption) sends the "
        "context 'to all the remaining decoder layers', so the default is false, which also "
        "lets the bottom layer and the attention run over whole sequences in training and is "
        "what the hybrid data/model-parallel scheme requires.",
        default=False,
    )
    cell: Literal["paper", "standard"] = _doc(
        "LSTM cell form. 'paper': eq. 11 exactly, no biases and m = c*o. 'standard': biases, "
        "m = o*tanh(c), and `forget_bias` added to the forget gate.",
        default="paper",
    )
    forget_bias: float = _doc(
        "Constant added to the forget-gate pre-activation of the 'standard' cell, so that a new cell "
        "starts out keeping its state (tensorflow/nmt's convention, where it is 1.0); the 'paper' cell "
        "has no bias (eq. 11) and must leave this at 0.",
        default=0.0,
    )
    dropout: float = _doc(
        "Dropout on the non-recurrent connections (each layer's input and the softmax input), "
        "as in Zaremba et al. (section 8.3: 0.2 En->Fr, 0.3 En->De).",
        default=0.2,
    )
    logit_clip: float = _doc("gamma: softmax logits are clipped to [-gamma, gamma] (eq. 13; paper: 25).", default=25.0)
    init_scale: float = _doc(
        "All trainable parameters start uniform in [-init_scale, init_scale] (section 8.3: 0.04).",
        default=0.04,
    )
    clip_delta: float = _doc(
        "delta at inference (section 6: 1.0): LSTM cell states and residual sums are clipped "
        "to [-delta, delta] (eq. 10). Held in a non-trainable variable; training anneals it "
        "from training.delta_start down to this value.",
        default=1.0,
    )
    tied_embeddings: bool = _doc(
        "If true, one table serves as the source embeddings, the target embeddings and the softmax "
        "weights (Press & Wolf 2017; Marian's tied-embeddings-all): the vocabulary is one set of shared "
        "wordpieces (section 4.1), so the three can be one, 2 x vocab_size x units fewer parameters. "
        "The table is the softmax kernel, [units, vocab_size], whose column of a wordpiece is its "
        "embedding; it needs an embedding width equal to `units`. false: three tables, as in the paper.",
        default=False,
    )

    def validate(self, where: str) -> None:
        _positive(self, where, "vocab_size", "units", "encoder_layers", "decoder_layers", "attention_units")
        if self.vocab_size < 5:
            raise ConfigError(f"{where}.vocab_size: must be at least 5 (4 special tokens + 1), got {self.vocab_size}")
        if self.embedding_dim is not None and self.embedding_dim <= 0:
            raise ConfigError(f"{where}.embedding_dim: must be positive or null, got {self.embedding_dim}")
        if self.bidirectional_units is None:
            if self.units % 2:
                raise ConfigError(
                    f"{where}.units: must be even when bidirectional_units is null (each direction "
                    f"gets units/2), got {self.units}"
                )
        elif self.bidirectional_units <= 0:
            raise ConfigError(f"{where}.bidirectional_units: must be positive or null, got {self.bidirectional_units}")
        if self.residual_start < 2:
            raise ConfigError(
                f"{where}.residual_start: must be >= 2 (layer 1 has no previous layer to add), "
                f"got {self.residual_start}"
            )
        if self.decoder_layers == 1 and not self.input_feeding:
            # Fig. 1: the context goes to the decoder layers above the bottom one, and the softmax reads
            # the top layer; with the bottom layer alone and no input feeding, nothing reads the source.
            raise ConfigError(
                f"{where}.decoder_layers: one decoder layer without input_feeding never reads the attention "
                f"context (it goes to the layers above the bottom one), so the model ignores its source; "
                f"use 2 or more decoder layers, or input_feeding: true"
            )
        if not 0.0 <= self.dropout < 1.0:
            raise ConfigError(f"{where}.dropout: must be in [0, 1), got {self.dropout}")
        _positive(self, where, "logit_clip", "init_scale", "clip_delta")
        if self.tied_embeddings and self.embedding_width != self.units:
            # The softmax reads the top decoder output, `units` wide: its kernel's columns are that wide too.
            raise ConfigError(
                f"{where}.tied_embeddings: the one table is the softmax kernel, whose columns are "
                f"units ({self.units}) wide, so the embeddings must be as wide; embedding_dim is "
                f"{self.embedding_dim}. Set embedding_dim: null (or {self.units}), or tied_embeddings: false"
            )
        if self.cell == "paper" and self.forget_bias != 0.0:
            raise ConfigError(
                f"{where}.forget_bias: the 'paper' cell has no biases (eq. 11); set cell: standard "
                f"or forget_bias: 0.0 (got {self.forget_bias})"
            )

    @property
    def embedding_width(self) -> int:
        return self.embedding_dim if self.embedding_dim is not None else self.units

    @property
    def direction_units(self) -> int:
        return self.bidirectional_units if self.bidirectional_units is not None else self.units // 2


@dataclass
class TrainingConfig:
    """The optimisation recipe (section 8.3) and the delta schedule (section 6)."""

    batch_size: int = _doc("Sentence pairs per step (section 8.3: 128).", default=128)
    batch_tokens: Optional[int] = _doc(
        "If set, training batches are sized by a budget of target wordpieces instead of batch_size "
        "pairs: each length bucket (data.bucket_width) takes as many pairs as keep pairs x its longest "
        "possible target (EOS included) within the budget, so batches of short sentences hold more "
        "pairs. At least data.max_length + 1. null: batch_size pairs per step.",
        default=None,
    )
    batch_cells: Optional[int] = _doc(
        "If set, a training batch holds no more pairs than keep pairs x its length bucket's widest "
        "possible source x widest possible target (EOS included) within this. Teacher forcing scores "
        "every target step against every source position at once (eq. 4: a [pairs, target, source, "
        "model.attention_units] tensor), so its memory grows with the square of the length: this bounds "
        "it when data.max_length is raised, long buckets taking fewer pairs. At least (data.max_length + "
        "1) ** 2. Dev batches are bounded by it too (null: by 64 pairs of the longest trained length). "
        "null: no bound beyond batch_size and batch_tokens.",
        default=None,
    )
    clip_norm: float = _doc("Gradients are scaled so that their global norm is at most this (5.0).", default=5.0)
    adam_learning_rate: float = _doc("Adam's learning rate for the first phase (0.0002).", default=0.0002)
    adam_steps: int = _doc("Steps trained with Adam before switching to plain SGD (60k).", default=60000)
    sgd_learning_rate: float = _doc("Plain SGD's learning rate after the switch (0.5).", default=0.5)
    decay_start: int = _doc("Step at which learning-rate halving begins (En->Fr: 1.2M).", default=1200000)
    decay_interval: int = _doc("Steps between halvings (200k).", default=200000)
    decay_count: int = _doc("Number of halvings (800k more steps / 200k = 4).", default=4)
    delta_start: float = _doc("delta at step 0 (section 6: 8.0); it anneals to model.clip_delta.", default=8.0)
    delta_anneal_steps: int = _doc(
        "Steps over which delta goes linearly from delta_start to model.clip_delta (the paper "
        "gives no number; CHOICE: the length of the whole ML run).",
        default=2000000,
    )
    delta_anneal_time_fraction: Optional[float] = _doc(
        "For a run bounded by max_minutes: delta also reaches model.clip_delta once this fraction "
        "of the time budget has passed, if that comes before delta_anneal_steps, so that a run "
        "stopped by its clock ends fully annealed (a model is always decoded at the delta it was "
        "trained at). null: by steps only. Not applied under a multi-replica --strategy.",
        default=None,
    )
    max_steps: int = _doc("Total maximum-likelihood steps (1.2M + 800k).", default=2000000)
    max_minutes: Optional[float] = _doc(
        "Stop training after this many minutes of wall-clock time (null: no limit). The run "
        "then ends normally: checkpoint, dev BLEU, samples.",
        default=None,
    )
    checkpoint_every: int = _doc(
        "Steps between checkpoints of the training state in the model directory's checkpoints/; "
        "training started again with the same --model-dir resumes from the latest.",
        default=1000,
    )
    keep_checkpoints: int = _doc("Most recent checkpoints kept (the best by dev score is kept besides).", default=5)
    eval_every: int = _doc("Steps between dev evaluations.", default=10000)
    log_every: int = _doc(
        "Steps between TensorBoard training scalars (loss, learning rate, delta, tokens/s) in the "
        "model directory's logs/train.",
        default=100,
    )
    seed: int = _doc("Seed for initialisation, shuffling and dropout.", default=1234)
    label_smoothing: float = _doc(
        "epsilon of label smoothing (Szegedy et al. 2016): training minimises (1 - epsilon) x the "
        "reference's negative log-likelihood + epsilon x the mean over the vocabulary of -log p. 0: "
        "eq. 7 as the paper writes it. Perplexity and dev loss are always the unsmoothed likelihood.",
        default=0.0,
    )
    average_decay: Optional[float] = _doc(
        "Keep an exponential moving average of the weights with this decay (Lingvo and tensor2tensor "
        "evaluate and export such an average; gnmt_tf.training.averaging): dev BLEU is measured on the "
        "average, best/ is chosen on it and holds it, and translate, evaluate, score and export use it "
        "(--checkpoint latest gives the raw weights). null: the raw weights are the model, as in the paper.",
        default=None,
    )
    final_decay_fraction: Optional[float] = _doc(
        "For a run bounded by max_steps or max_minutes: over the last fraction of that budget (steps or "
        "time, whichever runs out first) the learning rate falls linearly to 0, so that the run ends on "
        "small updates. null: the schedule of section 8.3 alone (Adam, then SGD with halvings), as the "
        "paper's configs keep it.",
        default=None,
    )
    product_precision: Literal["float32", "bfloat16", "auto"] = _doc(
        "Precision of the operands of the training step's large products (every LSTM layer's input "
        "projection, the softmax and each recurrent kernel's gradient; gnmt_tf.training.precision). "
        "'bfloat16' runs them at about twice "
        "the rate on CPUs with AVX-512 BF16 or AMX, and slower on others; weights, the recurrence of "
        "layers run over whole sequences, cell state, clips and loss stay float32 (layers stepped one "
        "time step at a time, as with input feeding or parallel.mode, multiply in bfloat16 throughout), "
        "and dev evaluation, translation and export compute in float32. 'auto': bfloat16 where the "
        "CPU has those instructions and no GPU is used, else float32. 'float32': the paper's numerics. "
        "Measured: benchmarks/README.md, \"The training step's levers\".",
        default="float32",
    )
    jit_compile: bool = _doc(
        "Compile the training step with XLA, which fuses its many small per-time-step ops. Each batch "
        "shape compiles once, so training batches then take one shape per length bucket (padded to the "
        "bucket's width; each epoch's partial batches dropped). Measured on a 2-core CPU: 1.10x the "
        "steps/s of `small` once compiled, but the compilations cost that gain in a 9-minute run "
        "(benchmarks/README.md, \"The training step's levers\"): for long runs. Only for "
        "maximum-likelihood training on one device (no --strategy, parallel.mode none).",
        default=False,
    )
    quantization_aware: bool = _doc(
        "Quantization-aware training: every LSTM kernel is fake-quantized to int8 with one "
        "scale per output unit (eq. 12, section 6) in every forward pass, the gradient passing "
        "straight through to the float weights (gnmt_tf.quantization.qat). Set by `gnmt-train --refine qat`, "
        "for a short fine-tune of a trained model before int8 export.",
        default=False,
    )
    objective: Literal["ml", "rl"] = _doc(
        "'ml': maximum likelihood (eq. 7). 'rl': refinement with the mixed objective of eq. 9, "
        "alpha * O_ML + O_RL with the expected GLEU reward (section 5; the `rl` section), dev BLEU "
        "checked every eval_every steps and the run stopped after rl.patience evaluations without "
        "improvement. Set by `gnmt-train --refine rl`.",
        default="ml",
    )

    def validate(self, where: str) -> None:
        _positive(
            self, where, "batch_size", "clip_norm", "adam_learning_rate", "sgd_learning_rate",
            "decay_interval", "delta_start", "max_steps", "checkpoint_every",
            "keep_checkpoints", "eval_every", "log_every",
        )
        _non_negative(self, where, "adam_steps", "decay_start", "decay_count", "delta_anneal_steps")
        if self.max_minutes is not None and self.max_minutes <= 0:
            raise ConfigError(f"{where}.max_minutes: must be positive or null, got {self.max_minutes}")
        if self.delta_anneal_time_fraction is not None and not 0.0 < self.delta_anneal_time_fraction <= 1.0:
            raise ConfigError(
                f"{where}.delta_anneal_time_fraction: must be in (0, 1] or null, got {self.delta_anneal_time_fraction}"
            )
        if self.batch_tokens is not None and self.batch_tokens <= 0:
            raise ConfigError(f"{where}.batch_tokens: must be positive or null, got {self.batch_tokens}")
        if self.batch_cells is not None and self.batch_cells <= 0:
            raise ConfigError(f"{where}.batch_cells: must be positive or null, got {self.batch_cells}")
        if not 0.0 <= self.label_smoothing < 1.0:
            raise ConfigError(f"{where}.label_smoothing: must be in [0, 1), got {self.label_smoothing}")
        if self.average_decay is not None and not 0.0 < self.average_decay < 1.0:
            raise ConfigError(f"{where}.average_decay: must be in (0, 1) or null, got {self.average_decay}")
        if self.jit_compile and self.objective != "ml":
            raise ConfigError(
                f"{where}.jit_compile: only maximum-likelihood training is compiled with XLA (RL refinement "
                f"samples translations of data-dependent length); set jit_compile: false for objective "
                f"{self.objective!r}"
            )
        if self.final_decay_fraction is not None and not 0.0 < self.final_decay_fraction <= 1.0:
            raise ConfigError(
                f"{where}.final_decay_fraction: must be in (0, 1] or null, got {self.final_decay_fraction}"
            )


@dataclass
class DecodingConfig:
    """Beam search (section 7, eq. 14)."""

    beam_width: int = _doc("Hypotheses kept per sentence (paper: 8-12; 4 nearly as good).", default=4)
    alpha: float = _doc("Length normalisation strength in lp(Y) = (5+|Y|)^alpha / 6^alpha (0.2).", default=0.2)
    beta: float = _doc("Coverage penalty strength in cp(X;Y) (0.2).", default=0.2)
    beamsize: float = _doc(
        "Pruning margin in log-probability for both pruning rules of section 7 (3.0); 0 keeps only "
        "what ties with the best, 1e9 never prunes. alpha, beta and beamsize must be finite and >= 0.",
        default=3.0,
    )
    max_length_ratio: float = _doc(
        "A translation has at most ceil(max_length_ratio x source length) wordpieces, the source length "
        "counting its wordpieces and EOS; at that length only EOS may follow (2.0).",
        default=2.0,
    )
    max_input_length: int = _doc(
        "Source wordpieces a translator keeps per sentence (EOS excluded). A longer sentence is "
        "truncated to its first max_input_length wordpieces, and its Translation says so "
        "(truncated=True; the command lines warn with a count); the Python API can refuse it instead.",
        default=250,
    )
    n_best: int = _doc(
        "Translations per sentence of an n-best request that names no number (at most beam_width); "
        "an export's n-best signature returns max(n_best, min(4, beam_width)). gnmt-translate "
        "gives one unless --n-best says more.",
        default=1,
    )
    eos_rule: Literal["top_k", "every_beam"] = _doc(
        "Which end-of-sentence extensions finish a hypothesis. 'top_k': only one that ranks among "
        "the beam_width best extensions of its sentence at that step (OpenNMT, fairseq, "
        "tensor2tensor). 'every_beam': every live hypothesis' EOS extension enters the finished "
        "pool, however unlikely. Section 7 does not say; 'every_beam' favours outputs that are "
        "too short (measured on the dev split: docs/decoding.md).",
        default="top_k",
    )
    use_shortlist: bool = _doc(
        "Decode with the model directory's vocabulary shortlist (shortlist.npz, built by python -m "
        "gnmt_tf.shortlist) when it has one: each batch's softmax covers only the likely translations "
        "of its source wordpieces, the most frequent target pieces and EOS (Marian's lexical "
        "shortlist). Without a shortlist the full softmax is used. Off by default; benchmarks/README.md "
        "has what it costs in BLEU and gains in speed.",
        default=False,
    )

    def validate(self, where: str) -> None:
        _positive(self, where, "beam_width", "max_length_ratio", "n_best", "max_input_length")
        for name in SEARCH_OPTIONS:  # the rule every entry point applies to the per-request options
            problem = search_option_problem(name, getattr(self, name))
            if problem is not None:
                raise ConfigError(f"{where}.{name}: {problem}")
        if self.n_best > self.beam_width:
            raise ConfigError(f"{where}.n_best: must not exceed beam_width ({self.beam_width}), got {self.n_best}")


@dataclass
class DataConfig:
    """Wordpieces (section 4.1) and the input pipeline."""

    max_characters: int = _doc(
        "Basic characters kept in the wordpiece alphabet; rarer ones map to the unknown "
        "character (section 4.1: ~500 for Western languages).",
        default=500,
    )
    max_length: int = _doc("Pairs with more wordpieces than this on either side are skipped in training.", default=50)
    bucket_width: int = _doc(
        "Width, in wordpieces of a pair's longer side, of the length buckets training batches are "
        "drawn from: a batch holds pairs of similar length, so little of it is padding. 1: pairs whose "
        "longer sides are equally long, the least padding. With training.jit_compile every bucket "
        "compiles once, so there a wider bucket means fewer compilations.",
        default=5,
    )
    shuffle_buffer: int = _doc(
        "Training pairs held in the shuffle buffer (reshuffled every pass over the data); as many as "
        "the training pairs gives a full shuffle.",
        default=100000,
    )
    dev_fraction: float = _doc(
        "When gnmt-train gets no --dev: the share of the training pairs (--train or the built-in data) "
        "held out as the dev split, which chooses the best checkpoint.",
        default=0.02,
    )
    dev_max_pairs: int = _doc(
        "At most this many pairs in a held-out dev split (see dev_fraction).", default=1000
    )
    test_fraction: float = _doc(
        "When gnmt-train holds out a dev split: the share of the pairs held out first as a test split, "
        "written to the model directory as test.tsv and used by nothing in training (score it with "
        "gnmt-evaluate --test). No variant of a source is in two splits.",
        default=0.02,
    )
    test_max_pairs: int = _doc(
        "At most this many pairs in the held-out test split (see test_fraction).", default=1000
    )

    def validate(self, where: str) -> None:
        _positive(self, where, "max_characters", "max_length", "bucket_width", "shuffle_buffer", "dev_max_pairs",
                  "test_max_pairs")
        for name in ("dev_fraction", "test_fraction"):
            if not 0.0 < getattr(self, name) < 1.0:
                raise ConfigError(f"{where}.{name}: must be in (0, 1), got {getattr(self, name)}")
        if self.dev_fraction + self.test_fraction >= 1.0:
            raise ConfigError(f"{where}.dev_fraction + test_fraction: must leave pairs to train on, got "
                              f"{self.dev_fraction} + {self.test_fraction}")


@dataclass
class ParallelConfig:
    """Model parallelism (section 3.3) and the hybrid data/model-parallel scheme (Ono et al. 2019).

    Independent of the data-parallel ``--strategy``: these settings place one
    model replica's layers on several devices of one machine.
    """

    mode: Literal["none", "model", "hybrid"] = _doc(
        "'none': the whole model on one device. 'model': each LSTM layer on its configured "
        "device, run as a wavefront so that layer i+1 works on time step t while layer i works "
        "on step t+1 (section 3.3); the softmax split over the vocabulary into softmax_shards. "
        "'hybrid': the LSTM stacks model-parallel as in 'model', then attention and softmax "
        "data-parallel over the gathered hidden states, the batch split across the devices "
        "(needs model.input_feeding: false).",
        default="none",
    )
    devices: List[str] = _doc(
        "Devices the layers are placed on, e.g. ['/device:CPU:0', '/device:CPU:1'] or GPUs; "
        "empty means every local device of the accelerator type (GPU, else CPU).",
        default_factory=list,
    )
    encoder_layer_devices: Optional[List[int]] = _doc(
        "For each encoder layer (the bi-directional bottom one first), the index in `devices` "
        "it runs on; null spreads the layers over the devices in contiguous blocks.",
        default=None,
    )
    decoder_layer_devices: Optional[List[int]] = _doc(
        "For each decoder layer, the index in `devices` it runs on (the attention runs with "
        "the bottom layer); null spreads the layers in contiguous blocks.",
        default=None,
    )
    softmax_shards: int = _doc(
        "The softmax projection is split over the vocabulary into this many slices, one per "
        "device in turn (section 3.3: 'the softmax layer is also partitioned'). 1: no split.",
        default=1,
    )

    def validate(self, where: str) -> None:
        _positive(self, where, "softmax_shards")
        for name in ("encoder_layer_devices", "decoder_layer_devices"):
            indices = getattr(self, name)
            if indices is None:
                continue
            bad = [i for i in indices if i < 0 or (self.devices and i >= len(self.devices))]
            if bad:
                raise ConfigError(
                    f"{where}.{name}: device indices must be in [0, {len(self.devices) or 'len(devices)'}), got {bad}"
                )


@dataclass
class RLConfig:
    """Refinement with the expected GLEU reward (section 5, eq. 8-9): ``--refine rl``."""

    samples: int = _doc(
        "m: outputs sampled from the model per source sentence; their mean reward is the "
        "baseline subtracted from each sample's reward (section 5: 15).",
        default=15,
    )
    ml_weight: float = _doc(
        "alpha of eq. 9, O_mixed = alpha * O_ML + O_RL, with O_ML the summed log-likelihood of "
        "each reference sentence (section 5: 0.017).",
        default=0.017,
    )
    reward_units: Literal["wordpieces", "words"] = _doc(
        "What GLEU counts n-grams of. The paper's 'sub-sequences of 1, 2, 3 or 4 tokens in output "
        "and target sequence' are over the model's output tokens, the wordpieces; 'words' joins "
        "wordpieces into words first (as BLEU sees them).",
        default="wordpieces",
    )
    max_order: int = _doc("Longest n-gram GLEU counts (section 5: 4).", default=4)
    max_length_ratio: float = _doc(
        "Sampled outputs stop after this many times the source length in wordpieces (as "
        "decoding.max_length_ratio), if no end-of-sentence was sampled before.",
        default=2.0,
    )
    patience: int = _doc(
        "Refinement stops after this many dev evaluations in a row without a better dev BLEU "
        "('until BLEU score on a dev set does not change'); the best checkpoint is kept.",
        default=3,
    )

    def validate(self, where: str) -> None:
        _positive(self, where, "samples", "max_order", "max_length_ratio", "patience")
        _non_negative(self, where, "ml_weight")
        if self.samples < 2:
            raise ConfigError(
                f"{where}.samples: must be at least 2 (the baseline is the mean reward of the samples), "
                f"got {self.samples}"
            )


@dataclass
class LocalizationConfig:
    """Software messages: format placeholders and markup kept exactly through translation.

    The pattern set, the masking and the restoring are gnmt_tf.localization.placeholders."""

    placeholders: bool = _doc(
        "If true, the placeholders of a message (printf's %s and %1$d, Python's %(name)s and {0}, ${var}, "
        "HTML/XML tags, character entities) are replaced by reserved slot tokens before translation and put "
        "back after it, so that the translation keeps each exactly (gnmt_tf.localization.placeholders). Training "
        "learns the vocabulary from masked pairs with the 16 slot tokens always in it, and trains on pairs masked on "
        "both sides: a placeholder of the reference translation takes the slot of its counterpart in the source "
        "(pairs holding a slot token's character are left out). The dev loss reads masked dev pairs; the dev and "
        "test splits are kept as they are, and dev BLEU translates the raw dev sources through the translator. Set "
        "it when a model is first trained: a vocabulary learned without the slot tokens is refused. Translation "
        "(the Python API, translate, evaluate, dev BLEU) and every exported artifact mask and restore inside the "
        "graph (gnmt_tf.localization.in_graph), and the beam search writes each slot token of a source exactly as "
        "often as the source holds it.",
        default=False,
    )
    extra_placeholder_patterns: List[str] = _doc(
        "More placeholder classes, Python regular expressions matched after the built-in ones (e.g. "
        "'%[0-9]+' for Qt's %1); each must compile, must not match the empty string and must use no lookaround, "
        "backreference or anchor (the exported model runs the patterns as one automaton over bytes, which takes "
        "each class's longest match: gnmt_tf.localization.automaton). Used only with placeholders: true.",
        default_factory=list,
    )

    def validate(self, where: str) -> None:
        for index, pattern in enumerate(self.extra_placeholder_patterns):
            problem = extra_pattern_problem(pattern) or automaton_problem(pattern)
            if problem is not None:
                raise ConfigError(f"{where}.{EXTRA_FIELD}[{index}]: {pattern!r} {problem}")


@dataclass
class GNMTConfig:
    """A whole run: model, training recipe, decoding and data settings."""

    model: ModelConfig = field(default_factory=ModelConfig)
    training: TrainingConfig = field(default_factory=TrainingConfig)
    decoding: DecodingConfig = field(default_factory=DecodingConfig)
    data: DataConfig = field(default_factory=DataConfig)
    parallel: ParallelConfig = field(default_factory=ParallelConfig)
    rl: RLConfig = field(default_factory=RLConfig)
    localization: LocalizationConfig = field(default_factory=LocalizationConfig)

    def validate(self) -> "GNMTConfig":
        for f in dataclasses.fields(self):
            getattr(self, f.name).validate(f.name)
        if self.parallel.mode == "hybrid" and self.model.input_feeding:
            raise ConfigError(
                "parallel.mode: 'hybrid' computes attention for all target positions at once after "
                "the bottom decoder layer, which input feeding forbids; set model.input_feeding: false"
            )
        if self.training.jit_compile and self.parallel.mode != "none":
            raise ConfigError(
                f"training.jit_compile: XLA compiles the step for one device; parallel.mode "
                f"{self.parallel.mode!r} places it on several. Set one of them off"
            )
        longest = self.data.max_length + 1  # wordpieces and EOS of the longest pair trained on
        if self.training.batch_tokens is not None and self.training.batch_tokens < longest:
            raise ConfigError(
                f"training.batch_tokens: must be at least data.max_length + 1 ({longest}) so that one pair "
                f"of the longest length fits in a batch; got {self.training.batch_tokens}"
            )
        if self.training.batch_cells is not None and self.training.batch_cells < longest * longest:
            raise ConfigError(
                f"training.batch_cells: must be at least (data.max_length + 1) ** 2 ({longest * longest}) so "
                f"that one pair of the longest length fits in a batch; got {self.training.batch_cells}"
            )
        if self.training.delta_start < self.model.clip_delta:
            raise ConfigError(
                f"training.delta_start: must be >= model.clip_delta ({self.model.clip_delta}), "
                f"since delta anneals down to it; got {self.training.delta_start}"
            )
        return self

    def to_dict(self) -> Dict[str, Any]:
        return dataclasses.asdict(self)

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.to_dict(), sort_keys=False)

    def save(self, path: str) -> None:
        """Write the config as YAML (atomically: a crash never leaves half a file)."""
        tmp = f"{path}.tmp"
        with open(tmp, "w", encoding="utf-8") as handle:
            handle.write(self.to_yaml())
        os.replace(tmp, path)

    def replace(self, **overrides: Any) -> "GNMTConfig":
        """A copy with dotted-key overrides applied, e.g. ``replace(**{"model.units": 64})``."""
        return from_dict(self.to_dict(), overrides=overrides)


# --------------------------------------------------------------------------------------
# Loading
# --------------------------------------------------------------------------------------
def builtin_config_names() -> List[str]:
    """Names of the configs shipped in ``configs/`` (e.g. "small", "gnmt_wmt14_enfr")."""
    return sorted(name[: -len(".yaml")] for name in os.listdir(_builtin_config_dir()) if name.endswith(".yaml"))


def resolve_config_path(name_or_path: str) -> str:
    """A YAML path, or the name of a shipped config ("tiny", "small", "gnmt_wmt14_enfr", ...)."""
    if os.path.exists(name_or_path) or name_or_path.endswith((".yaml", ".yml")) or os.sep in name_or_path:
        return name_or_path
    path = os.path.join(_builtin_config_dir(), f"{name_or_path}.yaml")
    if not os.path.exists(path):
        raise ConfigError(
            f"no config file or shipped config named {name_or_path!r} "
            f"(shipped: {', '.join(builtin_config_names())})"
        )
    return path


def _builtin_config_dir() -> str:
    # An installed copy carries the configs as the package data gnmt_tf/configs (see
    # setup.py); in a source checkout they sit beside the package.
    here = os.path.dirname(os.path.abspath(__file__))
    for candidate in (os.path.join(here, "configs"), os.path.join(os.path.dirname(here), "configs")):
        if os.path.isdir(candidate):
            return candidate
    raise ConfigError("the shipped configs are missing from this installation of gnmt_tf")


def load_config(path: str, overrides: Optional[Dict[str, Any]] = None) -> GNMTConfig:
    """Load and validate a YAML config (a path or a shipped config's name).

    A file may start from another config with a top-level ``base:`` (a shipped config's name, or a
    path, relative to the file's folder): the fields it sets replace the base's, one by one.
    ``overrides`` maps dotted keys to values, e.g. ``{"model.units": 512}``.
    """
    path = resolve_config_path(path)
    raw = _read_config_file(path, chain=())
    try:
        return from_dict(raw, overrides=overrides)
    except ConfigError as err:
        raise ConfigError(f"{path}: {err}") from None


def _read_config_file(path: str, chain: Tuple[str, ...]) -> Dict[str, Any]:
    """The sections of the YAML file at ``path``, with its ``base:`` chain merged in, field by field.

    ``chain``: the files that named this one as their base, to refuse a loop."""
    if os.path.abspath(path) in chain:
        names = [os.path.basename(link) for link in (*chain, os.path.abspath(path))]
        raise ConfigError(f"{path}: its base: chain comes back to itself ({' -> '.join(names)})")
    try:
        with open(path, encoding="utf-8") as handle:
            raw = yaml.safe_load(handle)
    except FileNotFoundError:
        raise ConfigError(f"config file not found: {path}") from None
    except yaml.YAMLError as err:
        raise ConfigError(f"{path}: not valid YAML: {err}") from None
    if raw is None:
        raw = {}
    if not isinstance(raw, dict) or "base" not in raw:
        return raw
    raw = dict(raw)
    base = raw.pop("base")
    if not isinstance(base, str) or not base:
        raise ConfigError(f"{path}: base: must name a shipped config or a YAML file, got {base!r}")
    beside = os.path.join(os.path.dirname(path), base)
    try:
        base_path = resolve_config_path(beside if os.path.exists(beside) else base)
        merged = _read_config_file(base_path, chain + (os.path.abspath(path),))
    except ConfigError as err:
        raise ConfigError(f"{path}: base: {err}") from None
    if not isinstance(merged, dict):
        raise ConfigError(f"{path}: base: {base_path}: a config must be a mapping of sections")
    merged = _copy_sections(merged)
    for section, values in raw.items():
        if isinstance(values, dict) and isinstance(merged.get(section), dict):
            merged[section].update(values)
        else:
            merged[section] = values
    return merged


def _copy_sections(raw: Dict[str, Any]) -> Dict[str, Any]:
    """A copy of a config's sections that a merge or an override can change without touching ``raw``."""
    return {key: (dict(value) if isinstance(value, dict) else value) for key, value in raw.items()}


def from_dict(raw: Any, overrides: Optional[Dict[str, Any]] = None) -> GNMTConfig:
    """Build a validated :class:`GNMTConfig` from nested dicts (as read from YAML)."""
    if not isinstance(raw, dict):
        raise ConfigError(f"a config must be a mapping of sections, got {type(raw).__name__}")
    raw = _copy_sections(raw)
    for dotted, value in (overrides or {}).items():
        section, _, name = dotted.partition(".")
        if not name:
            raise ConfigError(f"override {dotted!r}: expected section.field=value, e.g. model.units=512")
        raw.setdefault(section, {})
        if not isinstance(raw[section], dict):
            raise ConfigError(f"{section}: must be a mapping, got {type(raw[section]).__name__}")
        raw[section][name] = value
    config = _build(GNMTConfig, raw, where="")
    return config.validate()


def parse_overrides(pairs: List[str]) -> Dict[str, Any]:
    """Parse ``["model.units=512", ...]`` (values as YAML scalars) for :func:`load_config`."""
    overrides: Dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--set {pair!r}: expected section.field=value, e.g. model.units=512")
        try:
            overrides[key.strip()] = yaml.safe_load(value)
        except yaml.YAMLError as err:
            raise ConfigError(f"--set {pair!r}: value is not a YAML scalar: {err}") from None
    return overrides


def field_doc(section: str, name: str) -> str:
    """The docstring of ``section.name``."""
    cls = _SECTIONS[section]
    return {f.name: f.metadata.get("doc", "") for f in dataclasses.fields(cls)}[name]


_SECTIONS = {f.name: f.default_factory for f in dataclasses.fields(GNMTConfig)}  # type: ignore[misc]


def _build(cls: type, raw: Any, where: str) -> Any:
    if not isinstance(raw, dict):
        raise ConfigError(f"{where or 'config'}: must be a mapping, got {type(raw).__name__}")
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    for key in raw:
        if key not in names:
            guess = difflib.get_close_matches(str(key), names, n=1)
            hint = f"; did you mean {guess[0]!r}?" if guess else ""
            label = f"{where}.{key}" if where else str(key)
            raise ConfigError(f"unknown key {label!r}{hint} (allowed: {', '.join(names)})")
    values = {}
    for name in names:
        if name not in raw:
            continue
        label = f"{where}.{name}" if where else name
        hint = hints[name]
        if dataclasses.is_dataclass(hint):
            values[name] = _build(hint, raw[name] if raw[name] is not None else {}, label)
        else:
            values[name] = _coerce(raw[name], hint, label)
    return cls(**values)


def _coerce(value: Any, hint: Any, label: str) -> Any:
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin is typing.Union:  # Optional[X]
        if value is None:
            return None
        inner = [a for a in args if a is not type(None)]
        return _coerce(value, inner[0], label)
    if origin is Literal:
        if value not in args:
            raise ConfigError(f"{label}: {value!r} is not one of {', '.join(repr(a) for a in args)}")
        return value
    if hint is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{label}: expected true or false, got {value!r}")
        return value
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{label}: expected an integer, got {value!r}")
        return value
    if hint is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{label}: expected a number, got {value!r}")
        return float(value)
    if origin in (list, List):
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{label}: expected a list, got {value!r}")
        return [_coerce(item, args[0], f"{label}[{i}]") for i, item in enumerate(value)]
    if hint is str:
        if not isinstance(value, str):
            raise ConfigError(f"{label}: expected a string, got {value!r}")
        return value
    raise TypeError(f"unsupported config type {hint} for {label}")  # a bug in this module


def _positive(obj: Any, where: str, *names: str) -> None:
    for name in names:
        value = getattr(obj, name)
        if value <= 0:
            raise ConfigError(f"{where}.{name}: must be positive, got {value}")


def _non_negative(obj: Any, where: str, *names: str) -> None:
    for name in names:
        value = getattr(obj, name)
        if value < 0:
            raise ConfigError(f"{where}.{name}: must be >= 0, got {value}")


def model_config_from_dict(raw: Dict[str, Any]) -> ModelConfig:
    """A validated :class:`ModelConfig` from its dict form (as stored in a saved model)."""
    return from_dict({"model": raw}).model
