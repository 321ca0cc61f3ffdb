"""benchmarks/round_robin_benchmark.py: usage errors, and the round robin itself on stand-in translators."""

import pytest

from helpers import load_benchmark


@pytest.fixture(scope="module")
def tool():
    return load_benchmark("round_robin_benchmark")


@pytest.mark.parametrize("models", [["only=/tmp"], ["a=/tmp", "/tmp"], ["a=/no/such/export", "b=/tmp"]])
def test_bad_model_lists_are_usage_errors(tool, tmp_path, models):
    with pytest.raises(SystemExit) as stopped:
        tool.main(models + ["--sentences", str(tmp_path / "dev.tsv"), "--output", str(tmp_path / "out.json")])
    assert stopped.value.code == 2
    assert not (tmp_path / "out.json").exists()


def test_round_robin_times_every_translator_and_compares_their_outputs(tool):
    calls = []

    def translator(name, texts):
        def translate(batch):
            calls.append((name, len(batch)))
            return [texts.get(sentence, sentence.upper()) for sentence in batch]
        return translate

    sources = ["a", "b", "c", "d", "e", "f", "g", "h"]
    translators = {"first": translator("first", {}), "second": translator("second", {}),
                   "other": translator("other", {"c": "different"})}
    results = tool.measure(translators, sources, [1, 4], rounds=2)
    assert [(r["model"], r["batch"], r["sentences"]) for r in results] == [
        ("first", 1, 2), ("second", 1, 2), ("other", 1, 2), ("first", 4, 8), ("second", 4, 8), ("other", 4, 8)]
    # Batch 1 covers a quarter of the sentences ("a", "b"), where "other" agrees; batch 4 reaches "c".
    assert [r["identical_to"] for r in results] == [
        ["second", "other"], ["first", "other"], ["first", "second"], ["second"], ["first"], []]
    assert all(r["sentences_per_second"] > 0 for r in results)
    # One untimed pass and two rounds, each translator in turn within a round.
    assert calls[:2 * 3] == [("first", 1), ("first", 1), ("second", 1), ("second", 1), ("other", 1), ("other", 1)]
    assert len(calls) == 3 * 3 * 2 + 3 * 3 * 2  # batch 1: 2 batches, batch 4: 2 batches; 3 passes each
