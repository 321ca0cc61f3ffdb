"""python -m gnmt_tf.train with localization.placeholders: the vocabulary holds the slot tokens, the model trains
on masked pairs (and the dev loss reads masked dev pairs), the splits kept with the model stay as they are; a
vocabulary without the slot tokens is refused; with the option off nothing changes."""

import os
import sys

from gnmt_tf import model_files
from gnmt_tf.config import load_config
from gnmt_tf.data.tokenizer import WORD_MARK, WordpieceTokenizer
from gnmt_tf.localization.placeholders import SLOT_TOKENS, mask_pair, slot_token
from gnmt_tf.training.masked_pairs import pairs_as_trained
from helpers import SHALLOW_CLI_ARGS, number_word_pairs, run_in_process


def with_placeholders(pairs):
    """Number pairs, two in three of them with placeholders: "%s: ..." and a reordered "... %s of %d"."""
    marked = []
    for index, (source, target) in enumerate(pairs):
        if index % 3 == 0:
            source, target = f"%s: {source}", f"%s : {target}"
        elif index % 3 == 1:
            source, target = f"{source} %s of %d", f"{target} %d de %s"
        marked.append((source, target))
    return marked


def write_tsv(path, pairs):
    with open(path, "w", encoding="utf-8") as handle:
        handle.writelines(f"{source}\t{target}\n" for source, target in pairs)
    return str(path)


def train_command(model_dir, train_tsv, dev_tsv, *extra):
    return [sys.executable, "-m", "gnmt_tf.train", "--model-dir", model_dir, "--quiet", "--train", train_tsv,
            "--dev", dev_tsv, "--config", "tiny", *SHALLOW_CLI_ARGS, "--set", "model.vocab_size=160",
            "--set", "training.eval_every=100000", "--set", "training.checkpoint_every=2", *extra]


def slot_ids(tokenizer):
    return {tokenizer.pieces.index(WORD_MARK + token) for token in SLOT_TOKENS}


def ids_of(batches):
    """The source ids and the target output ids of ``batches``, each as one set."""
    sources, targets = set(), set()
    for (source_ids, _), target_ids in batches:
        sources.update(source_ids.numpy().ravel().tolist())
        targets.update(target_ids.numpy().ravel().tolist())
    return sources, targets


def test_a_run_with_placeholders_learns_the_slot_tokens_and_trains_on_masked_pairs(tmp_path):
    from gnmt_tf.training.trainer import Trainer

    train = with_placeholders(number_word_pairs(300, seed=1))
    dev = with_placeholders(number_word_pairs(8, seed=2))
    model_dir = str(tmp_path / "model")
    result = run_in_process(train_command(model_dir, write_tsv(tmp_path / "train.tsv", train),
                                          write_tsv(tmp_path / "dev.tsv", dev),
                                          "--set", "localization.placeholders=true", "--max-steps", "2"))
    assert result.returncode == 0, result.stderr[-3000:]
    assert "the 16 placeholder slot tokens among them" in result.stdout
    assert "placeholders: 200 of 300 training pairs hold placeholders" in result.stdout

    with open(model_files.wordpieces_path(model_dir), encoding="utf-8") as handle:
        pieces = handle.read().split("\n")
    assert all(WORD_MARK + token in pieces and token in pieces for token in SLOT_TOKENS)
    # The dev split is kept as read: dev BLEU translates its raw sources (the translator masks them).
    assert model_files.read_dev_split(model_dir) == [model_files.folded(pair) for pair in dev]

    # What the run trains on and scores its dev loss on, as its Trainer builds them from the same pairs.
    config, tokenizer = model_files.load_metadata(model_dir)
    trainer = Trainer(config, model_dir, train, dev, tokenizer, log=lambda message: None, verbose=0)
    assert trainer.batches.pairs == [tuple(masked.text for masked in mask_pair(*pair)) for pair in train]
    slots = slot_ids(tokenizer)
    for sources, targets in (ids_of(trainer.batches.for_fit(0).take(3)), ids_of(trainer.dev.dev_data)):
        assert len(sources & slots) == 2 and sources & slots == targets & slots  # slots 1 and 2 on both sides


def test_a_vocabulary_without_the_slot_tokens_is_refused(tmp_path, capsys):
    from gnmt_tf.cli.train import main

    pairs = with_placeholders(number_word_pairs(30, seed=3))
    model_dir = str(tmp_path / "model")
    config = load_config("tiny", overrides={"model.vocab_size": 160})
    plain = WordpieceTokenizer.learn([side for pair in pairs for side in pair], 160, reserved_characters=())
    config.model.vocab_size = plain.vocab_size
    model_files.save_metadata(model_dir, config, plain)  # a model trained without placeholders

    train_tsv = write_tsv(tmp_path / "train.tsv", pairs)
    code = main(train_command(model_dir, train_tsv, train_tsv, "--set", "localization.placeholders=true")[3:])
    errors = capsys.readouterr().err
    assert code == 2
    assert "wordpieces.txt: the vocabulary has no wordpiece for 16 of the 16 placeholder slot tokens" in errors
    assert "localization.placeholders" in errors and "new --model-dir" in errors
    assert not os.path.exists(model_files.checkpoint_dir(model_dir))  # nothing was started


def test_without_placeholders_pairs_and_vocabulary_are_as_before(tmp_path, capsys):
    from gnmt_tf.cli.train import _tokenizer

    pairs = with_placeholders(number_word_pairs(30, seed=4))
    config = load_config("tiny", overrides={"model.vocab_size": 160})
    as_trained = pairs_as_trained(config.localization, pairs)
    assert as_trained.pairs == pairs and as_trained.note() == ""
    tokenizer = _tokenizer(str(tmp_path / "model"), config, pairs, resuming=False)
    assert tokenizer.pieces == WordpieceTokenizer.learn([side for pair in pairs for side in pair], 160,
                                                        config.data.max_characters).pieces
    assert "placeholder" not in capsys.readouterr().out


def test_a_pair_holding_a_slot_character_is_left_out_and_counted():
    config = load_config("tiny", overrides={"localization.placeholders": True})
    pairs = [("Copy %s", "Copier %s"), ("Open " + slot_token(1), "Ouvrir"), ("Open", "Ouvrir " + slot_token(3)),
             ("Quit", "Quitter")]
    as_trained = pairs_as_trained(config.localization, pairs)
    assert as_trained.pairs == [("Copy " + slot_token(1), "Copier " + slot_token(1)), ("Quit", "Quitter")]
    assert as_trained.note() == (
        "placeholders: 1 of 4 training pairs hold placeholders, masked as slot tokens (localization.placeholders); "
        "2 holding a character reserved for the slot tokens (U+F0011..U+F0020) are left out")
