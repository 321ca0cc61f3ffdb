"""Corpus BLEU (gnmt_tf.metrics.bleu) against sacrebleu's own API and a hand computation."""

import math

import pytest
import sacrebleu

from gnmt_tf.metrics.bleu import corpus_bleu

CASES = {
    "partial overlap": (["the cat sat on the mat", "a b"], ["the cat sat on a mat", "a b c"]),
    "identical": (["Open the file.", "Save as..."], ["Open the file.", "Save as..."]),
    "no 4-gram matches (smoothed)": (["one two three four five", "six"], ["one two four three five", "six seven"]),
    "punctuation and case (13a)": (
        ["Hello, world! It's done.", "the file couldn't be saved"],
        ["hello, World! It's done.", "The file could not be saved."],
    ),
    "nothing in common": (["un deux trois", "quatre"], ["cinq six sept huit", "neuf"]),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_corpus_bleu_agrees_with_sacrebleu(name):
    hypotheses, references = CASES[name]
    ours = corpus_bleu(hypotheses, references)
    theirs = sacrebleu.corpus_bleu(hypotheses, [references])
    assert ours.score == pytest.approx(theirs.score, abs=1e-9)
    assert ours.text == str(theirs)
    assert ours.signature.startswith("nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:")


def test_corpus_bleu_by_hand():
    # Modified n-gram precisions over the corpus: 7/8, 4/6, 2/4, 1/3; brevity penalty exp(1 - 9/8).
    hypotheses, references = CASES["partial overlap"]
    expected = 100 * math.exp(1 - 9 / 8) * (7 / 8 * 4 / 6 * 2 / 4 * 1 / 3) ** 0.25
    assert corpus_bleu(hypotheses, references).score == pytest.approx(expected, rel=1e-9)
    assert corpus_bleu(*CASES["identical"]).score == pytest.approx(100.0)
    assert corpus_bleu(*CASES["nothing in common"]).score == 0.0
    with pytest.raises(ValueError, match="2 hypotheses but 1 references"):
        corpus_bleu(["a", "b"], ["a"])
