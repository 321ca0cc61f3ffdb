"""One figure for one thing: the dev BLEU a run ends with is evaluate's, on the checkpoint translate uses.

That it equals evaluate's on a real run: tests/training/test_training.py (its short run).
"""

from gnmt_tf import model_files


def test_the_final_figure_reloads_the_checkpoint_only_when_this_run_did_not_measure_it(tmp_path, monkeypatch):
    """A run that saved best/ itself gives the figure it measured then; a resumed run whose best/ is from
    before the restart loads that checkpoint and evaluates it (as python -m gnmt_tf.evaluate would)."""
    from gnmt_tf.config import load_config
    from gnmt_tf.data.tokenizer import WordpieceTokenizer
    from gnmt_tf.inference import evaluation
    from gnmt_tf.training import dev
    from gnmt_tf.training.trainer import Trainer
    from helpers import SHALLOW, number_word_pairs

    train_pairs = number_word_pairs(200, seed=1, min_len=1)
    # Greek references, which the number task's vocabulary cannot write: every dev BLEU is 0.
    dev_pairs = [(source, "μηδέν ένα δύο") for source, _ in number_word_pairs(4, seed=2)]
    tokenizer = WordpieceTokenizer.learn([s for p in train_pairs for s in p], vocab_size=64, max_characters=60)
    config = load_config("tiny", overrides={
        "model.vocab_size": tokenizer.vocab_size, "model.units": 8, "model.attention_units": 4,
        **SHALLOW, "training.batch_size": 4,
        "training.eval_every": 100, "training.checkpoint_every": 2})
    model_dir = str(tmp_path / "model")
    model_files.save_metadata(model_dir, config, tokenizer)
    loads = []

    def counted_load_translator(*args, **kwargs):
        loads.append(args)
        return evaluation.load_translator(*args, **kwargs)

    monkeypatch.setattr(dev, "load_translator", counted_load_translator)
    first = Trainer(config, model_dir, train_pairs, dev_pairs, tokenizer, log=lambda m: None,
                    verbose=0).train(max_steps=2)
    assert loads == [] and first.dev_checkpoint == model_files.find_checkpoint(model_dir, "best")
    # Resumed, with best/ recorded at a dev BLEU the resumed run will not reach (a tie would take best/,
    # callbacks.BestScore): its dev BLEU (0 again) is no new best, so best/ stays the first run's
    # checkpoint, which this Trainer never evaluated. The resumed run is already at its max_steps, so it
    # ends at once (the figure is chosen in the end of every run, TrainingRun.result, trained or not): training on
    # would trace the training step a second time and change nothing here.
    model_files.write_best_bleu(model_dir, model_files.read_best_bleu(model_dir)._replace(score=5.0))
    resumed = Trainer(config, model_dir, train_pairs, dev_pairs, tokenizer, log=lambda m: None,
                      verbose=0)
    assert resumed.step == 2 and resumed.best_bleu == 5.0
    result = resumed.train(max_steps=2)
    assert loads == [(model_dir,)] and result.dev_checkpoint == model_files.find_checkpoint(model_dir, "best")
    assert result.dev_checkpoint.endswith("-2")
