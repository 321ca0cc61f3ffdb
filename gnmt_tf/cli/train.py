"""Train a GNMT: ``python -m gnmt_tf.train``.

With no arguments it trains the ``small`` config on the built-in default data
(the English->French gettext catalogs of this machine) for about ten minutes,
then prints dev BLEU and sample translations and leaves a self-contained model
directory. With ``--config configs/gnmt_wmt14_enfr.yaml --train ... --dev ...``
it runs the paper's recipe. Run it again with the same ``--model-dir`` to resume.

``--refine qat|rl --init-from MODEL_DIR --model-dir OUT`` fine-tunes an already
trained model instead. ``qat``: quantization-aware training (section 6, eq. 12; see
gnmt_tf.quantization.qat), a short run in which every LSTM kernel is fake-quantized to int8, so
that the int8 export loses as little as possible. ``rl``: refinement with the
expected GLEU reward (section 5, eq. 8-9; see gnmt_tf.training.reinforce), plain SGD without
dropout until dev BLEU stops improving. OUT gets the model's config (training
section: the fine-tuning recipe), vocabulary and dev split, and is a normal model
directory (translate, evaluate, export). Give the data the model was trained on
with --train (default: the built-in data, as for training).
"""

from __future__ import annotations

import dataclasses
import os
import sys
import time
from typing import List, NamedTuple, Tuple

from gnmt_tf import model_files
from gnmt_tf.cli.common import (
    add_training_data_arguments,
    check_new_directory,
    config_help,
    load_training_pairs,
)
from gnmt_tf.cli.commands import defined_in
from gnmt_tf.cli.scaffold import Command

DEFAULT_CONFIG = "small"
STRATEGIES = ("default", "mirrored", "multi_worker", "parameter_server", "tpu")
REFINEMENTS = ("qat", "rl")  # fine-tunes of a trained model (--refine)


def add_arguments(parser) -> None:
    parser.add_argument(
        "--config", default=None,
        help=config_help(f"{DEFAULT_CONFIG}, or the config saved in --model-dir when resuming"),
    )
    parser.add_argument(
        "--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
        help="override one config field, e.g. --set training.batch_size=32 (repeatable)",
    )
    add_training_data_arguments(parser)
    parser.add_argument("--dev", default=None, metavar="DATA", help="dev pairs, same forms (default: held out from --train)")
    parser.add_argument("--model-dir", default=None, help="output directory (default: runs/<source>-<target>)")
    parser.add_argument("--max-steps", type=int, default=None, help="stop at this global step (training.max_steps)")
    parser.add_argument(
        "--max-minutes", type=float, default=None, help="stop after this many minutes (training.max_minutes)"
    )
    parser.add_argument(
        "--strategy", choices=STRATEGIES, default="default",
        help="data parallelism (section 3.3; docs/distributed.md): mirrored = this machine's devices; "
        "multi_worker = synchronous workers, parameter_server = asynchronous replicas (both from "
        "TF_CONFIG; a parameter_server worker or ps process just serves); tpu = TPUStrategy (TPU_NAME). "
        "training.batch_size is the batch of one update, split across synchronous replicas "
        "(default: %(default)s)",
    )
    parser.add_argument(
        "--logical-cpus", type=int, default=None, metavar="N",
        help="split this machine's CPU into N logical devices, so that --strategy mirrored can be "
        "tried without GPUs (for trying, not for speed)",
    )
    parser.add_argument(
        "--refine", choices=REFINEMENTS, default=None,
        help="fine-tune the trained model of --init-from instead of training from scratch: "
        "qat = quantization-aware training for int8 inference (section 6); "
        "rl = refinement with the expected GLEU reward (section 5)",
    )
    parser.add_argument(
        "--init-from", default=None, metavar="MODEL_DIR",
        help="the trained model directory --refine starts from (its best checkpoint, else its latest); "
        "it is only read",
    )
    parser.add_argument(
        "--vocab-and-splits-from", default=None, metavar="MODEL_DIR",
        help="use MODEL_DIR's wordpiece vocabulary and its dev and test splits (left out of the training "
        "pairs): for another model of an ensemble with it, or a student of it, scored on the same test split",
    )
    parser.add_argument(
        "--pause-after-step", nargs=2, action="append", default=[], metavar=("STEP", "FILE"),
        help="for tests and scripts: after step STEP (and its checkpoint, if it is one) create FILE and wait "
        "until FILE is deleted, so that the run can be killed or looked at at a known step "
        "(gnmt_tf.training.callbacks.PauseAfterStep; repeatable)",
    )
    parser.add_argument(
        "--quiet", action="store_true",
        help="no live progress line: a progress line every 30 seconds instead (the default when output "
        "is not a terminal)",
    )


def check(parser, args) -> None:
    if args.refine and not args.init_from:
        parser.error(f"--refine {args.refine} needs --init-from MODEL_DIR, the trained model to fine-tune")
    if args.init_from and not args.refine:
        parser.error(f"--init-from needs --refine ({', '.join(REFINEMENTS)}): it says what fine-tune to run")
    if args.refine and args.config is not None:
        parser.error("--config cannot be combined with --refine: the model's own config is used "
                     "(change fields with --set)")
    if args.refine and not args.model_dir:
        parser.error(f"--refine {args.refine} needs --model-dir OUT, a new directory for the fine-tuned model")
    if args.vocab_and_splits_from and (args.refine or args.dev):
        parser.error("--vocab-and-splits-from cannot be combined with --dev or --refine: it gives the dev split "
                     "(and --refine uses --init-from's)")
    check_new_directory("--model-dir", args.model_dir)
    for step, _ in args.pause_after_step:
        if not step.isdigit():
            parser.error(f"--pause-after-step STEP FILE: STEP must be a step number, got {step!r}")


def train(args) -> int:
    if args.logical_cpus is not None:  # before anything initializes TensorFlow's devices
        from gnmt_tf.parallel.distribute import split_cpu

        split_cpu(args.logical_cpus)
    return _run_refine(args) if args.refine else _run(args)


def _exit_statuses():
    from gnmt_tf.parallel.distribute import WorkerLost
    from gnmt_tf.training.trainer import TrainingDiverged

    return {TrainingDiverged: 1, WorkerLost: 3}


def _cli_overrides(args) -> dict:
    """``--set`` pairs plus the flags that are shortcuts for config fields."""
    from gnmt_tf.config import parse_overrides

    overrides = parse_overrides(args.overrides)
    if args.max_steps is not None:
        overrides["training.max_steps"] = args.max_steps
    if args.max_minutes is not None:
        overrides["training.max_minutes"] = args.max_minutes
    return overrides


def _run(args) -> int:
    from gnmt_tf.config import ConfigError, load_config

    model_dir = args.model_dir or os.path.join("runs", f"{args.source_lang}-{args.target_lang}")
    overrides = _cli_overrides(args)
    strategy = _strategy(args)  # a parameter-server worker or ps process serves in here

    resuming = model_files.has_config(model_dir)
    if resuming:
        config = load_config(os.path.join(model_dir, model_files.CONFIG_FILE), overrides=overrides)
        if args.config is not None:
            requested = load_config(args.config, overrides=overrides)
            requested.model.vocab_size = config.model.vocab_size
            if requested.model != config.model:
                raise ConfigError(
                    f"{model_dir} holds a model built from a different config than {args.config}; "
                    f"use a new --model-dir, or leave out --config to resume with the saved one"
                )
        print(f"model directory {model_dir} exists: resuming with its config.yaml")
    else:
        config = load_config(args.config or DEFAULT_CONFIG, overrides=overrides)

    if args.vocab_and_splits_from:  # another model of the same vocabulary and held-out splits
        data = _held_out_of(args.vocab_and_splits_from, load_training_pairs(args))
        tokenizer = _read_vocabulary(args.vocab_and_splits_from, config)
        print(f"using the vocabulary of {args.vocab_and_splits_from}: {tokenizer.vocab_size:,} wordpieces")
    else:
        data = _load_data(args, config)
        tokenizer = _tokenizer(model_dir, config, data.train, resuming)
    config.model.vocab_size = tokenizer.vocab_size
    if _is_chief(strategy):  # one writer: a cluster's other workers share the directory
        model_files.save_metadata(model_dir, config, tokenizer)
        _write_held_out(model_dir, data)

    from gnmt_tf.training.trainer import Trainer

    trainer = Trainer(
        config, model_dir, data.train, data.dev, tokenizer, verbose=_verbosity(args), strategy=strategy
    )
    return _train_and_report(trainer, model_dir, _extra_callbacks(args))


def _extra_callbacks(args) -> list:
    """The callbacks the command line adds to the run's own (--pause-after-step)."""
    from gnmt_tf.training.callbacks import PauseAfterStep

    return [PauseAfterStep(int(step), hold) for step, hold in args.pause_after_step]


def _strategy(args):
    """The tf.distribute strategy of --strategy (None: default); see gnmt_tf.parallel.distribute."""
    from gnmt_tf.parallel.distribute import strategy_for

    return strategy_for(args.strategy)


def _is_chief(strategy) -> bool:
    from gnmt_tf.parallel.distribute import is_chief

    return is_chief(strategy)


def _refinement_config(refine, init_config, overrides):
    """The fine-tune's config: the model's own, with the training recipe of ``refine``."""
    if refine == "qat":
        from gnmt_tf.quantization.qat import quantization_aware_config

        return quantization_aware_config(init_config, overrides)
    from gnmt_tf.training.reinforce import refinement_config

    return refinement_config(init_config, overrides)


def _is_refinement(refine, config) -> bool:
    if refine == "qat":
        return config.training.quantization_aware
    return config.training.objective == "rl"


def _describe_refinement(refine, config, init_checkpoint) -> str:
    t = config.training
    if refine == "qat":
        return (
            f"quantization-aware fine-tune of {init_checkpoint}: every LSTM kernel fake-quantized to int8 "
            f"(eq. 12), plain SGD at {t.sgd_learning_rate:g} for {t.max_steps} steps, delta fixed at "
            f"{config.model.clip_delta:g}"
        )
    rl = config.rl
    return (
        f"RL refinement of {init_checkpoint} (section 5): O_mixed = {rl.ml_weight:g} * O_ML + O_RL, "
        f"expected GLEU over {rl.reward_units} from {rl.samples} samples per sentence; plain SGD at "
        f"{t.sgd_learning_rate:g}, dropout {config.model.dropout:g}; dev BLEU every {t.eval_every} steps, "
        f"stopping after {rl.patience} without improvement (or at step {t.max_steps})"
    )


def _run_refine(args) -> int:
    """``--refine qat|rl``: fine-tune the model of ``--init-from`` into ``--model-dir``."""
    from gnmt_tf.config import ConfigError, load_config

    init_dir, model_dir = args.init_from, args.model_dir
    init_config, tokenizer = model_files.load_metadata(init_dir)
    init_checkpoint = model_files.find_checkpoint(init_dir, "best")
    if init_checkpoint is None:
        raise model_files.ModelDirError(f"{init_dir} has no checkpoint to fine-tune (no best/ or checkpoints/)")
    if os.path.realpath(model_dir) == os.path.realpath(init_dir):
        raise model_files.ModelDirError(
            f"--model-dir must be a new directory, not the --init-from model itself ({init_dir}): "
            f"the fine-tune would overwrite the model it starts from"
        )
    strategy = _strategy(args)
    overrides = _cli_overrides(args)

    resuming = model_files.has_config(model_dir)
    if resuming:  # an interrupted fine-tune: its saved recipe, and its own checkpoints
        config = load_config(os.path.join(model_dir, model_files.CONFIG_FILE), overrides=overrides)
        if not _is_refinement(args.refine, config):
            raise ConfigError(
                f"{model_dir} holds a model that is not a --refine {args.refine} fine-tune; use a new --model-dir"
            )
        print(f"model directory {model_dir} exists: resuming the fine-tune with its config.yaml")
    else:
        config = _refinement_config(args.refine, init_config, overrides)
    _check_vocabulary(tokenizer, config, init_dir)
    # The network is the checkpoint's; only dropout may differ in the fine-tune.
    if dataclasses.replace(config.model, dropout=init_config.model.dropout) != init_config.model:
        raise ConfigError(
            f"the model section must be that of {init_dir} (the checkpoint's network); "
            f"only model.dropout may be changed for the fine-tune"
        )

    if not args.dev and model_files.has_dev_split(init_dir):  # the model's own splits: its BLEU stays comparable
        data = _held_out_of(init_dir, load_training_pairs(args))
    else:
        data = _load_data(args, config)
    if not args.train:
        print(f"note: fine-tuning on the built-in data (no --train given); if {init_dir} was trained "
              f"on other data, pass that with --train")
    if _is_chief(strategy):
        model_files.save_metadata(model_dir, config, tokenizer)
        _write_held_out(model_dir, data)

    from gnmt_tf.training.trainer import Trainer

    print(_describe_refinement(args.refine, config, init_checkpoint))
    trainer = Trainer(
        config, model_dir, data.train, data.dev, tokenizer, verbose=_verbosity(args),
        init_checkpoint=init_checkpoint, strategy=strategy,
    )
    return _train_and_report(trainer, model_dir, _extra_callbacks(args))


def _verbosity(args) -> int:
    # A live progress line on a terminal; a line every 30 seconds in logs and pipes.
    return 1 if sys.stdout.isatty() and not args.quiet else 2


def _train_and_report(trainer, model_dir, callbacks) -> int:
    result = trainer.train(callbacks=callbacks)  # TrainingDiverged and WorkerLost end the command (_exit_statuses)
    print()
    print(f"stopped at step {result.step}: {result.stop_reason}")
    if not trainer.is_chief:
        print("this worker is done; the chief evaluates and writes the model directory")
        return 0
    final_delta = trainer.config.model.clip_delta
    if result.delta is not None and not model_files.anneal_finished(result.delta, final_delta):
        print(f"delta: {result.delta:.3g} (the anneal to {final_delta:g} ends at step "
              f"{trainer.config.training.delta_anneal_steps:,}); the model is evaluated and decoded at "
              f"delta {result.delta:.3g}, the value it was trained at")
    print(f"dev perplexity: {result.dev_perplexity:.2f}")
    # The figure of the checkpoint translate, evaluate and export use by default, by evaluate's own code.
    print(f"dev {result.dev.bleu.text} ({result.dev.search}; {result.dev_checkpoint})")
    print(f"  signature: {result.dev.bleu.signature}")
    print("sample translations (dev):")
    for source, reference, translation in result.samples:
        source, reference = " ".join(source.split()), " ".join(reference.split())  # catalog strings hold newlines
        print(f"  source:      {source}\n  reference:   {reference}\n  translation: {translation}\n")
    print(f"model directory: {model_dir} (config.yaml, wordpieces.txt, checkpoints/, best/, logs/)")
    if model_files.has_test_split(model_dir):
        print(f"held-out test split: python -m gnmt_tf.evaluate --model-dir {model_dir} "
              f"--test {model_files.test_split_path(model_dir)}")
    return 0


class HeldOutData(NamedTuple):
    """The pairs of a run: those it trains on, its dev split, and its test split ([] when the run was given
    a --dev of its own: the user then holds their own test set)."""

    train: List[Tuple[str, str]]
    dev: List[Tuple[str, str]]
    test: List[Tuple[str, str]]


def _load_data(args, config) -> HeldOutData:
    from gnmt_tf.data import DataError, read_parallel, split_held_out

    d = config.data
    train_pairs = load_training_pairs(args)
    if args.dev:
        dev_pairs, report = read_parallel(args.dev, split="validation", source_lang=args.source_lang,
                                          target_lang=args.target_lang)
        print(report.summary())
        data = HeldOutData(train_pairs, dev_pairs, [])
    else:
        data = HeldOutData(*split_held_out(train_pairs, d.dev_fraction, d.dev_max_pairs, d.test_fraction,
                                           d.test_max_pairs, config.training.seed))
        print(f"held out {len(data.dev):,} pairs as the dev split (data.dev_fraction, data.dev_max_pairs) and "
              f"{len(data.test):,} as the test split, which nothing in training reads (data.test_fraction, "
              f"data.test_max_pairs)")
        if not data.train or not data.dev:
            raise DataError(f"{len(train_pairs):,} pairs are too few to hold out a dev and a test split from: "
                            f"give more pairs, or a dev set of your own with --dev")
    print(f"training on {len(data.train):,} pairs, evaluating on {len(data.dev):,}")
    return data


def _held_out_of(init_dir: str, train_pairs) -> HeldOutData:
    """A fine-tune's pairs: the dev and test splits of the model it starts from, none of them trained on."""
    dev, test = model_files.read_dev_split(init_dir), model_files.read_test_split(init_dir)
    kept = model_files.without_dev_pairs(train_pairs, dev + test)
    print(f"dev split: the {len(dev):,} pairs of {model_files.dev_split_path(init_dir)}"
          + (f", test split: the {len(test):,} of {model_files.test_split_path(init_dir)}" if test else "")
          + f"; {len(train_pairs) - len(kept):,} training pairs found in them are left out")
    print(f"training on {len(kept):,} pairs, evaluating on {len(dev):,}")
    return HeldOutData(kept, dev, test)


def _write_held_out(model_dir: str, data: HeldOutData) -> None:
    model_files.write_dev_split(model_dir, data.dev)
    if data.test:
        model_files.write_test_split(model_dir, data.test)


def _tokenizer(model_dir, config, train_pairs, resuming):
    from gnmt_tf import model_files
    from gnmt_tf.config import ConfigError
    from gnmt_tf.data.tokenizer import WordpieceTokenizer
    from gnmt_tf.training.masked_pairs import pairs_as_trained, reserved_characters

    if model_files.has_wordpieces(model_dir):
        tokenizer = _read_vocabulary(model_dir, config)
        print(f"using the vocabulary in {model_dir}: {tokenizer.vocab_size:,} wordpieces")
        return tokenizer
    if resuming:
        print(f"warning: {model_dir} has a config but no vocabulary; learning one", file=sys.stderr)
    started = time.monotonic()
    # Learned from the pairs as the model will read them: masked, with localization.placeholders.
    as_trained = pairs_as_trained(config.localization, train_pairs).pairs
    sentences = [side for pair in as_trained for side in pair]  # one vocabulary for both languages
    reserved = reserved_characters(config.localization)
    try:
        tokenizer = WordpieceTokenizer.learn(sentences, config.model.vocab_size, config.data.max_characters,
                                             reserved_characters=reserved)
    except ValueError as err:  # a vocabulary too small for the alphabet: a config problem
        raise ConfigError(f"model.vocab_size / data.max_characters: {err}") from None
    slots = f", the {len(reserved)} placeholder slot tokens among them" if reserved else ""
    print(
        f"learned a shared wordpiece vocabulary of {tokenizer.vocab_size:,} pieces "
        f"({len(tokenizer.alphabet)} basic characters{slots}) in {time.monotonic() - started:.1f} s"
    )
    return tokenizer


def _read_vocabulary(model_dir, config):
    """The wordpiece vocabulary of ``model_dir``, if it can serve a model of ``config``."""
    tokenizer = model_files.read_tokenizer(model_dir)
    _check_vocabulary(tokenizer, config, model_dir)
    return tokenizer


def _check_vocabulary(tokenizer, config, model_dir) -> None:
    """Refuses the vocabulary of ``model_dir`` for a model of ``config`` when it lacks the placeholder slot
    tokens that localization.placeholders needs (it was learned from unmasked text)."""
    from gnmt_tf.training.masked_pairs import slot_vocabulary_problem

    problem = slot_vocabulary_problem(config.localization, tokenizer.pieces)
    if problem is not None:
        raise model_files.ModelDirError(
            f"{model_files.wordpieces_path(model_dir)}: {problem}. Train with localization.placeholders in a "
            f"new --model-dir (its vocabulary is learned with them), or leave localization.placeholders false"
        )


COMMAND = Command(
    defined_in(__spec__.name), __doc__, add_arguments, train, check=check, exit_statuses=_exit_statuses,
    examples=("", "--config gnmt_wmt14_enfr --train train.tsv.gz --dev newstest2013.tsv",
              "--refine qat --init-from runs/en-fr --model-dir runs/en-fr-qat"),
)
main, build_parser = COMMAND.main, COMMAND.build_parser
