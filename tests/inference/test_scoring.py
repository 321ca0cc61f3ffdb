"""Scoring given translations (forced decoding) through the Translator and python -m gnmt_tf.score."""

import sys

import numpy as np
import pytest

from gnmt_tf import model_files
from gnmt_tf.cli import score as score_cli
from gnmt_tf.decoding.options import no_pruning
from gnmt_tf.inference.translator import Translator
from helpers import run_in_process

pytestmark = pytest.mark.draws_nothing_random  # conftest does not reseed before each test

SOURCES = ["three one four", "nine nine", "zero five two eight six"]


@pytest.fixture(scope="module")
def translator(trained_number_model):
    model_dir, _ = trained_number_model
    model, tokenizer, config = model_files.load_model_dir(model_dir)
    return Translator(model, tokenizer, config.decoding)


def test_scoring_the_searchs_own_translations_gives_back_its_scores(translator):
    """Forced decoding of each n-best hypothesis returns the log P and eq. 14 score the beam search reported."""
    for alpha, beta in ((0.6, 0.2), (0.0, 0.0), (1.0, 0.5)):
        nbest = translator.translate_nbest(SOURCES, n_best=3, beam_width=4, alpha=alpha, beta=beta,
                                           beamsize=no_pruning())
        pairs = [(source, hypothesis) for source, hypotheses in zip(SOURCES, nbest) for hypothesis in hypotheses]
        assert len(pairs) > len(SOURCES)  # alternatives too, not only the best
        scored = translator.score([s for s, _ in pairs], [h.text for _, h in pairs], alpha=alpha, beta=beta)
        for (source, hypothesis), result in zip(pairs, scored):
            assert result.target_pieces == hypothesis.target_pieces, source
            assert result.length == len(hypothesis.target_pieces) + 1
            assert result.log_prob == pytest.approx(hypothesis.log_prob, abs=1e-4)
            assert result.score == pytest.approx(hypothesis.score, abs=1e-4)


def test_scores_rank_a_right_translation_above_wrong_ones(translator):
    scored = translator.score(["three one four"] * 3, ["trois un quatre", "trois un", "neuf neuf neuf"],
                              return_attention=True)
    assert scored[0].log_prob > scored[1].log_prob and scored[0].log_prob > scored[2].log_prob
    best = scored[0]
    assert best.attention.shape == (best.length, len(best.source_pieces))
    np.testing.assert_allclose(best.attention.sum(axis=1), 1.0, rtol=1e-5)
    assert best.source_pieces[-1] == "</s>" and best.text == "trois un quatre"


def test_empty_sides_score_nothing_and_lengths_must_match(translator):
    assert translator.score(["", "one"], ["un", ""]) == [None, None]
    with pytest.raises(ValueError, match="2 sources but 1 targets"):
        translator.score(["one", "two"], ["un"])


def test_score_cli_writes_one_line_per_pair(trained_number_model, translator, tmp_path):
    model_dir, _ = trained_number_model
    pairs = [("three one four", "trois un quatre"), ("", "un"), ("nine nine", "neuf")]
    result = run_in_process(
        [sys.executable, "-m", "gnmt_tf.score", "--model-dir", model_dir, "--alpha", "0.3"],
        "".join(f"{s}\t{t}\n" for s, t in pairs),
    )
    assert result.returncode == 0, result.stderr[-2000:]
    lines = result.stdout.splitlines()
    assert len(lines) == 3 and lines[1] == ""  # an empty side: an empty line, order kept
    expected = translator.score([s for s, _ in pairs], [t for _, t in pairs], alpha=0.3)
    for line, want in zip(lines, expected):
        if want is None:
            continue
        score, log_prob, length = line.split("\t")
        assert float(score) == pytest.approx(want.score, abs=1e-5)
        assert float(log_prob) == pytest.approx(want.log_prob, abs=1e-5)
        assert int(length) == want.length
    assert "scored 3 pairs" in result.stderr


def test_score_cli_usage_errors(tmp_path, capsys):
    bad = tmp_path / "bad.tsv"
    bad.write_text("one\tun\nno tab here\n", encoding="utf-8")
    assert score_cli.main(["--model-dir", str(tmp_path / "missing"), "--input", str(bad)]) == 2
    assert "line 2: expected SOURCE<TAB>TRANSLATION" in capsys.readouterr().err
    picture = tmp_path / "file.png"
    picture.write_text("x")
    assert score_cli.main(["--model-dir", str(tmp_path), "--plot-attention", str(picture)]) == 2
    assert "exists and is not a directory" in capsys.readouterr().err
