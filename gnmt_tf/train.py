"""Train a GNMT: ``python -m gnmt_tf.train``.

With no arguments it trains the ``small`` config on the built-in default data
(the English->French gettext catalogs of this machine) for about ten minutes,
then prints dev BLEU and sample translations and leaves a self-contained model
directory. With ``--config configs/gnmt_wmt14_enfr.yaml --train ... --dev ...``
it runs the paper's recipe. Run it again with the same ``--model-dir`` to resume.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

DEFAULT_CONFIG = "small"
STRATEGIES = ("default", "mirrored", "multi_worker", "parameter_server", "tpu")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m gnmt_tf.train",
        description=__doc__.split("\n\n")[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--config", default=None,
        help=f"YAML file or shipped config name: tiny, small, gnmt_wmt14_enfr, gnmt_wmt14_ende "
        f"(default: {DEFAULT_CONFIG}, or the config saved in --model-dir when resuming)",
    )
    parser.add_argument(
        "--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
        help="override one config field, e.g. --set training.batch_size=32 (repeatable)",
    )
    parser.add_argument(
        "--train", default=None, metavar="DATA",
        help="training pairs: a TSV file (source<TAB>target, .gz accepted), 'SRC_FILE,TGT_FILE' "
        "(aligned files) or 'tfds:NAME'. Default: this machine's gettext catalogs",
    )
    parser.add_argument("--dev", default=None, metavar="DATA", help="dev pairs, same forms (default: held out from --train)")
    parser.add_argument("--source-lang", default="en", help="source language of the built-in data (default: en)")
    parser.add_argument("--target-lang", default="fr", help="target language of the built-in data (default: fr)")
    parser.add_argument("--model-dir", default=None, help="output directory (default: runs/<source>-<target>)")
    parser.add_argument("--max-steps", type=int, default=None, help="stop at this global step (training.max_steps)")
    parser.add_argument(
        "--max-minutes", type=float, default=None, help="stop after this many minutes (training.max_minutes)"
    )
    parser.add_argument(
        "--strategy", choices=STRATEGIES, default="default", help="tf.distribute strategy (default: %(default)s)"
    )
    parser.add_argument(
        "--quiet", action="store_true",
        help="no live progress bar, one line per segment (the default when output is not a terminal)",
    )
    return parser


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

    from gnmt_tf.config import ConfigError
    from gnmt_tf.data import DataError

    try:
        return _run(args)
    except (ConfigError, DataError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2


def _run(args) -> int:
    from gnmt_tf import model_dir as layout
    from gnmt_tf.config import ConfigError, load_config, parse_overrides

    model_dir = args.model_dir or os.path.join("runs", f"{args.source_lang}-{args.target_lang}")
    overrides = parse_overrides(args.overrides)
    if args.max_steps is not None:
        overrides["training.max_steps"] = args.max_steps
    if args.max_minutes is not None:
        overrides["training.max_minutes"] = args.max_minutes

    resuming = layout.has_config(model_dir)
    if resuming:
        config = load_config(os.path.join(model_dir, layout.CONFIG_FILE), overrides=overrides)
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
    if args.strategy != "default":
        raise ConfigError(f"--strategy {args.strategy} is not available yet; use --strategy default")

    train_pairs, dev_pairs = _load_data(args, config)
    tokenizer = _tokenizer(model_dir, config, train_pairs, resuming)
    config.model.vocab_size = tokenizer.vocab_size
    layout.save_metadata(model_dir, config, tokenizer)
    _write_dev(model_dir, dev_pairs)

    from gnmt_tf.training import Trainer, TrainingDiverged

    # A live progress bar on a terminal; one line per segment in logs and pipes.
    verbose = 1 if sys.stdout.isatty() and not args.quiet else 2
    trainer = Trainer(config, model_dir, train_pairs, dev_pairs, tokenizer, verbose=verbose)
    try:
        result = trainer.train()
    except TrainingDiverged as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    print()
    print(f"stopped at step {result.step}: {result.stop_reason}")
    print(f"dev perplexity: {result.dev_perplexity:.2f}")
    print(f"dev {result.dev_bleu}")
    if result.best_bleu is not None:
        print(f"best dev BLEU so far: {result.best_bleu:.2f} (checkpoint in {layout.best_dir(model_dir)})")
    print("sample translations (dev):")
    for source, reference, translation in result.samples:
        source, reference = " ".join(source.split()), " ".join(reference.split())  # catalog strings hold newlines
        print(f"  source:      {source}\n  reference:   {reference}\n  translation: {translation}\n")
    print(f"model directory: {model_dir} (config.yaml, wordpieces.txt, checkpoints/, best/, logs/)")
    return 0


def _load_data(args, config):
    from gnmt_tf.catalogs import load_catalog_pairs
    from gnmt_tf.data import read_parallel, split_dev

    d = config.data
    if args.train:
        train_pairs, report = read_parallel(args.train, source_lang=args.source_lang, target_lang=args.target_lang)
        print(report.summary())
    else:
        pairs, report = load_catalog_pairs(target_lang=args.target_lang, source_lang=args.source_lang)
        print(f"built-in data: {report.summary()}")
        train_pairs = pairs
    if args.dev:
        dev_pairs, report = read_parallel(args.dev, split="validation", source_lang=args.source_lang,
                                          target_lang=args.target_lang)
        print(report.summary())
    else:
        train_pairs, dev_pairs = split_dev(train_pairs, d.dev_fraction, d.dev_max_pairs, config.training.seed)
        print(f"held out {len(dev_pairs):,} pairs as the dev split (data.dev_fraction, data.dev_max_pairs)")
    print(f"training on {len(train_pairs):,} pairs, evaluating on {len(dev_pairs):,}")
    return train_pairs, dev_pairs


def _tokenizer(model_dir, config, train_pairs, resuming):
    from gnmt_tf.tokenizer import WordpieceTokenizer

    if os.path.exists(os.path.join(model_dir, WordpieceTokenizer.PIECES_FILE)):
        tokenizer = WordpieceTokenizer.load(model_dir)
        print(f"using the vocabulary in {model_dir}: {tokenizer.vocab_size:,} wordpieces")
        return tokenizer
    if resuming:
        print(f"warning: {model_dir} has a config but no vocabulary; learning one", file=sys.stderr)
    started = time.monotonic()
    sentences = [side for pair in train_pairs for side in pair]  # one vocabulary for both languages
    tokenizer = WordpieceTokenizer.learn(sentences, config.model.vocab_size, config.data.max_characters)
    print(
        f"learned a shared wordpiece vocabulary of {tokenizer.vocab_size:,} pieces "
        f"({len(tokenizer.alphabet)} basic characters) in {time.monotonic() - started:.1f} s"
    )
    return tokenizer


def _write_dev(model_dir, dev_pairs):
    """Keep the dev split with the model (whitespace folded: TSV cannot hold tabs or newlines)."""
    path = os.path.join(model_dir, "dev.tsv")
    with open(path + ".tmp", "w", encoding="utf-8") as handle:
        for source, target in dev_pairs:
            handle.write(f"{' '.join(source.split())}\t{' '.join(target.split())}\n")
    os.replace(path + ".tmp", path)


if __name__ == "__main__":
    sys.exit(main())
