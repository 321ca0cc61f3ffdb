"""The Translator API and the translate / evaluate command lines, on a model that really translates."""

import json
import sys

import numpy as np
import pytest

from gnmt_tf import model_files
from gnmt_tf.decoding.options import no_pruning
from gnmt_tf.inference.translator import Translator
from helpers import run_each_in_process, shortlist_excluding

pytestmark = pytest.mark.draws_nothing_random  # conftest does not reseed before each test


@pytest.fixture(scope="module")
def translator(trained_number_model):
    model_dir, _ = trained_number_model
    model, tokenizer, config = model_files.load_model_dir(model_dir)
    return Translator(model, tokenizer, config.decoding, max_input_length=12)


def test_beam_search_translates(translator):
    translations = translator.translate(["three one four", "nine nine"])
    assert [t.text for t in translations] == ["trois un quatre", "neuf neuf"]


def test_edges_empty_single_token_and_too_long(translator):
    out = translator.translate(["", "   ", "seven", "one two three four five six seven eight nine zero one two three"])
    assert out[0].text == "" and out[1].text == "" and out[0].score == 0.0  # empty in, empty out
    assert out[2].text == "sept"  # a single token translates
    # Truncated to max_input_length (12) wordpieces, still translated, and the result says so.
    assert [t.truncated for t in out] == [False, False, False, True] and out[3].text
    assert len(out[3].source_pieces) == 12 + 1  # EOS
    long = "one two three four five six seven eight nine zero one two three"
    [cut] = translator.translate_nbest([long])
    assert cut[0].truncated and cut[0].text == out[3].text
    assert [t.truncated for t in translator.greedy(["seven", long])] == [False, True]
    strict = Translator(translator.model, translator.tokenizer, translator.decoding, max_input_length=12,
                        truncate_long_inputs=False)
    with pytest.raises(ValueError, match="sentence 0 has .* wordpieces, more than max_input_length"):
        strict.translate(["one two three four five six seven eight nine zero one two three"])


def test_nbest_lists_are_sorted_and_carry_attention(translator):
    [nbest] = translator.translate_nbest(["two five eight"], n_best=3, beam_width=4, return_attention=True,
                                         beamsize=no_pruning())
    assert len(nbest) == 3 and nbest[0].text == "deux cinq huit"
    # With the paper's pruning (beamsize 3) this confident model's alternatives are all pruned.
    [pruned] = translator.translate_nbest(["two five eight"], n_best=3, beam_width=4)
    assert len(pruned) < 3 and pruned[0].text == "deux cinq huit"
    scores = [h.score for h in nbest]
    assert scores == sorted(scores, reverse=True)
    best = nbest[0]
    assert best.attention.shape == (len(best.target_pieces) + 1, len(best.source_pieces))
    np.testing.assert_allclose(best.attention.sum(axis=1), 1.0, rtol=1e-5)  # each target row is a distribution


def test_batching_does_not_change_translations(translator):
    sentences = ["one", "two three four five", "six seven", "eight nine zero one two", "three"]
    together = [t.text for t in translator.translate(sentences)]
    one_by_one = [translator.translate([s])[0].text for s in sentences]
    assert together == one_by_one


def test_each_compiled_piece_traces_once_whatever_the_batch_and_sentence_lengths(translator):
    """Batches of other sizes and lengths reuse the traces (their signatures leave both dimensions
    free). A new Translator on new weights traces its own once: that is what TensorFlow's "frequent
    retracing" notice counts when one process scores several checkpoints, not a trace per batch."""
    for batch in (["one"], ["two three four five six", "seven"], ["eight nine"] * 7, ["zero"] * 3):
        translator.translate(batch)
        translator.greedy(batch)
    compiled = translator.module._compiled
    assert ("preprocess",) in compiled and len(compiled) >= 3
    assert {key: function.experimental_get_tracing_count() for key, function in compiled.items()} == {
        key: 1 for key in compiled}


def test_concurrent_batches_translate_as_one_batch_after_another(translator):
    """Batches in flight together give each sentence what the sequential loop gives it, in input order.

    Small batches of unequal lengths, so that several run at once and finish out of order. Both
    translators share the module's traced searches (Translator.with_batching).
    """
    from helpers import number_word_pairs

    sentences = [source for source, _ in number_word_pairs(40, seed=11, min_len=1)] + ["", "seven"]
    outputs = {}
    for concurrent in (1, 3):
        each = translator.with_batching(batch_size=4, concurrent_batches=concurrent)
        assert each.module is translator.module and translator.batch_size == 32  # this one's own is unchanged
        nbest = each.translate_nbest(sentences, n_best=2, return_attention=True)
        scores = each.score(sentences, [hypotheses[0].text if hypotheses else "" for hypotheses in nbest])
        outputs[concurrent] = (nbest, each.greedy(sentences), scores)
    (nbest_1, greedy_1, scores_1), (nbest_3, greedy_3, scores_3) = outputs[1], outputs[3]
    assert greedy_3 == greedy_1 and len(set(greedy_1)) > 30
    assert [len(n) for n in nbest_3] == [len(n) for n in nbest_1] and nbest_1[-2] == []
    for many, one in zip([h for n in nbest_3 for h in n], [h for n in nbest_1 for h in n]):
        assert (many.text, many.score, many.target_pieces) == (one.text, one.score, one.target_pieces)
        np.testing.assert_array_equal(many.attention, one.attention)
    assert scores_1[-2] is None and scores_3[-2] is None
    assert [s.score for s in scores_3 if s] == [s.score for s in scores_1 if s]


@pytest.mark.parametrize("name, value", [("concurrent_batches", 0), ("batch_size", 0), ("concurrent_batches", 1.5)])
def test_batching_arguments_must_be_positive_integers(translator, name, value):
    with pytest.raises(ValueError, match=f"{name} must be an integer >= 1, got {value!r}"):
        Translator(translator.model, translator.tokenizer, **{name: value})
    with pytest.raises(ValueError, match=f"{name} must be an integer >= 1, got {value!r}"):
        translator.with_batching(**dict(dict(batch_size=4, concurrent_batches=2), **{name: value}))


SHORTLIST_SENTENCES = ["three one four", "nine nine", "", "one two three four five six seven", "five", "one"]


def test_a_shortlist_left_off_changes_nothing_and_one_turned_on_is_obeyed(translator):
    """Off (decoding.use_shortlist's default), a translator holding a shortlist decodes exactly as one
    without; on, a shortlist without "▁un" never outputs it, and one with every id changes no translation."""
    tokenizer = translator.tokenizer
    un = tokenizer.pieces.index("\u2581un")
    shortlisted = Translator(translator.model, tokenizer, translator.decoding, max_input_length=12,
                             shortlist=shortlist_excluding(tokenizer.vocab_size, [un]))
    assert not translator.decoding.use_shortlist
    settings = dict(n_best=2, beamsize=no_pruning(), return_attention=True)

    def without_attention(lists):
        return [[h._replace(attention=None) for h in nbest] for nbest in lists]

    plain = translator.translate_nbest(SHORTLIST_SENTENCES, **settings)
    off = shortlisted.translate_nbest(SHORTLIST_SENTENCES, **settings)
    # Identical (the same graph: no shortlist op in it), scores and attention to the last bit.
    assert without_attention(off) == without_attention(plain)
    for plain_list, off_list in zip(plain, off):
        for a, b in zip(plain_list, off_list):
            np.testing.assert_array_equal(a.attention, b.attention)
    explicitly_off = shortlisted.translate_nbest(SHORTLIST_SENTENCES, use_shortlist=False, **settings)
    assert without_attention(explicitly_off) == without_attention(plain)
    assert any("\u2581un" in h.target_pieces for nbest in plain for h in nbest)  # the model does output it

    on = shortlisted.translate_nbest(SHORTLIST_SENTENCES, use_shortlist=True, **settings)
    assert [len(nbest) for nbest in on] == [len(nbest) for nbest in plain]
    assert not any("\u2581un" in h.target_pieces for nbest in on for h in nbest)

    everything = Translator(translator.model, tokenizer, translator.decoding, max_input_length=12,
                            shortlist=shortlist_excluding(tokenizer.vocab_size, []))
    assert everything.translate(SHORTLIST_SENTENCES, use_shortlist=True) == \
        translator.translate(SHORTLIST_SENTENCES)  # texts and scores
    with pytest.raises(ValueError, match="no vocabulary shortlist"):
        translator.translate(["one"], use_shortlist=True)


def test_translate_cli_keeps_order_and_blank_lines(trained_number_model, tmp_path):
    model_dir, _ = trained_number_model
    source, output = tmp_path / "in.txt", tmp_path / "out.txt"
    source.write_text("zero\nsix seven\n", encoding="utf-8")
    result, nbest = run_each_in_process(
        ([sys.executable, "-m", "gnmt_tf.translate", "--model-dir", model_dir, "--beam-width", "3"],
         "one two\n\nfive five five\nnine\n"),
        ([sys.executable, "-m", "gnmt_tf.translate", "--model-dir", model_dir, "--input", str(source),
          "--output", str(output), "--n-best", "2", "--alpha", "0", "--beta", "0", "--beamsize", "1e9"], None),
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout == "un deux\n\ncinq cinq cinq\nneuf\n"
    assert nbest.returncode == 0, nbest.stderr[-2000:]
    lines = output.read_text(encoding="utf-8").splitlines()
    assert len(lines) == 4 and lines[0].startswith("0 ||| zéro ||| ") and lines[2].startswith("1 ||| six sept ||| ")


def test_translate_cli_errors(tmp_path, capsys):
    from gnmt_tf.cli.translate import main

    assert main(["--model-dir", str(tmp_path / "nothing")]) == 2  # in-process: fails before reading input
    assert "model directory not found" in capsys.readouterr().err


def test_evaluate_cli_reports_bleu_and_speed(trained_number_model):
    """The --json report (the printed form of the same figures: tests/cli/test_evaluate_cli.py)."""
    model_dir, result = trained_number_model
    evaluate = [sys.executable, "-m", "gnmt_tf.evaluate", "--model-dir", model_dir, "--test", f"{model_dir}/test.tsv"]
    [out] = run_each_in_process((evaluate + ["--json"], None))
    assert out.returncode == 0, out.stderr[-2000:]
    report = json.loads(out.stdout)
    assert report["bleu"] > 70 and report["signature"].startswith("nrefs:1")
    assert report["sentences"] == 100 and report["sentences_per_second"] > 0 and report["words_per_second"] > 0
