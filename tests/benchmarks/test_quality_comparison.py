"""benchmarks/quality_benchmark.py: settings, equal tuning effort, the three splits, and the summary's rules
(chosen on dev, reported on test, a lead only outside the runs' spread)."""

import pytest

from helpers import load_benchmark


@pytest.fixture(scope="module")
def tool():
    return load_benchmark("quality_benchmark")


def test_a_setting_is_a_label_with_its_key_value_pairs(tool):
    assert tool.parse_trial("ours", "default") == tool.Trial("ours", "default", {})
    assert tool.parse_trial("lstm", "lr0.002:LR=0.002,DROPOUT=0.3") == tool.Trial(
        "lstm", "lr0.002", {"LR": "0.002", "DROPOUT": "0.3"})
    assert tool.parse_trial("ours", "d:model.dropout=0.2").settings == {"model.dropout": "0.2"}
    for bad in ("a b", "x:LR", "x:=1"):
        with pytest.raises(ValueError):
            tool.parse_trial("lstm", bad)


def test_every_system_gets_as_many_settings_and_the_sitting_alternates_them(tool):
    ours = [tool.Trial("ours", label, {}) for label in ("a", "b")]
    lstm = [tool.Trial("lstm", label, {}) for label in ("x", "y")]
    order = tool.interleaved({"ours": ours, "lstm": lstm, "transformer": []})
    assert [trial.label for trial in order] == ["a", "x", "b", "y"]
    tool.check_equal_effort(order)
    with pytest.raises(ValueError, match="same tuning effort"):
        tool.check_equal_effort(order[:3])


def _run(system, setting, dev, test, run=1, interval=None):
    scores = lambda bleu: {"beam": {"whole": {"bleu": bleu, "bleu_95": interval}}}  # noqa: E731
    return {"system": system, "setting": setting, "run": run, "dev": scores(dev), "test": scores(test)}


def test_the_summary_chooses_on_dev_and_reports_test_and_its_spread(tool):
    runs = [
        _run("ours", "a", dev=40.0, test=30.0), _run("ours", "b", dev=42.0, test=20.0),  # b wins on dev
        _run("ours", "a", dev=41.0, test=31.0, run=2), _run("ours", "b", dev=43.0, test=22.0, run=2),
        _run("lstm", "x", dev=30.0, test=18.0), _run("lstm", "x", dev=31.0, test=19.0, run=2),
    ]
    result = tool.summary(runs)
    ours = result["chosen_on_dev"]["ours"]
    # b is chosen by its dev mean (42.5 > 40.5) although a scores higher on test: test chooses nothing.
    assert (ours["setting"], ours["test_bleu_mean"], ours["test_bleu_lowest"], ours["test_bleu_highest"]) == (
        "b", 21.0, 20.0, 22.0)
    assert result["ours_against"]["lstm"] == "+2.50 BLEU"  # 20..22 is above 18..19 in every run


def test_overlapping_runs_are_no_difference(tool):
    runs = [_run("ours", "a", 40.0, 25.0), _run("ours", "a", 40.0, 21.0, run=2),
            _run("lstm", "x", 30.0, 22.0), _run("lstm", "x", 30.0, 23.0, run=2)]
    assert tool.summary(runs)["ours_against"]["lstm"].startswith("no difference (+0.50 BLEU")


def test_a_single_run_is_judged_by_its_bootstrap_interval(tool):
    apart = [_run("ours", "a", 40.0, 30.0, interval=[28.5, 31.5]), _run("lstm", "x", 30.0, 25.0, interval=[23.0, 27.0])]
    assert tool.summary(apart)["ours_against"]["lstm"] == "+5.00 BLEU"
    assert tool.summary(apart)["chosen_on_dev"]["ours"]["spread"] == "bootstrap 95%"
    close = [_run("ours", "a", 40.0, 30.0, interval=[28.0, 32.0]), _run("lstm", "x", 30.0, 29.0, interval=[27.0, 31.0])]
    assert tool.summary(close)["ours_against"]["lstm"].startswith("no difference")


def test_the_bootstrap_interval_holds_the_corpus_bleu_and_narrows_with_more_sentences(tool):
    from sacrebleu.metrics import BLEU

    references = [f"le chat {i} est sur le tapis rouge" for i in range(400)]
    hypotheses = [ref if i % 3 else f"un chien {i} dort" for i, ref in enumerate(references)]
    low, high = tool.bootstrap_interval(hypotheses, references, resamples=300)
    corpus = BLEU().corpus_score(hypotheses, [references]).score
    assert low < corpus < high
    small_low, small_high = tool.bootstrap_interval(hypotheses[:40], references[:40], resamples=300)
    assert small_high - small_low > high - low
    assert tool.bootstrap_interval(references, references, resamples=50) == [100.0, 100.0]


def test_the_splits_are_the_trainers_three_way_split_of_the_pairs(tool, tmp_path):
    from gnmt_tf.config import load_config
    from gnmt_tf.data import split_held_out

    pairs = [(f"_Source {i % 900} of  a pair", f"cible {i}") for i in range(1800)]  # each source twice
    pairs += [(f"&source {i % 900} of a pair…", f"autre {i}") for i in range(900)]  # and a variant of it
    path = tmp_path / "pairs.tsv"
    path.write_text("".join(f"{s}\t{t}\n" for s, t in pairs), encoding="utf-8")
    paths = tool.write_splits(str(tmp_path / "work"), str(path))
    written = {name: tool.read_pairs(paths[name]) for name in ("train", "dev", "test")}
    config = load_config("small")
    folded = [(" ".join(s.split()), t) for s, t in pairs]
    expected = split_held_out(folded, config.data.dev_fraction, config.data.dev_max_pairs,
                              config.data.test_fraction, config.data.test_max_pairs, config.training.seed)
    assert [written[name] for name in ("train", "dev", "test")] == [list(split) for split in expected]
    assert written["dev"] and written["test"]
    number = lambda source: source.split()[1]  # noqa: E731  the string a source is a variant of
    sides = [{number(s) for s, _ in written[name]} for name in ("train", "dev", "test")]
    assert not sides[0] & sides[1] and not sides[0] & sides[2] and not sides[1] & sides[2]


def test_the_peer_s_unscored_steps_come_from_its_log(tool, tmp_path):
    log = tmp_path / "train.log"
    log.write_text("[info] Step 50/10000000; acc: 3; 1200/ 1300 tok/s\n[info] Step 100/10000000; ...\n"
                   "[info] Saving checkpoint model_step_100.pt\n[info] Step 150/10000000; ...\n", encoding="utf-8")
    assert tool.last_peer_step(str(log)) == 150
    log.write_text("nothing trained\n", encoding="utf-8")
    assert tool.last_peer_step(str(log)) is None


def test_cpu_description_names_the_model_and_the_instructions_that_set_a_step_s_speed(tmp_path):
    harness = load_benchmark("harness")
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nmodel name\t: AMD EPYC 7B13\nflags\t\t: fpu sse avx2 fma avx512f "
                       "avx512_bf16 avx512vl\n\nprocessor\t: 1\nmodel name\t: AMD EPYC 7B13\n")
    assert harness.cpu_description(str(cpuinfo)) == {"model": "AMD EPYC 7B13",
                                                     "flags": ["avx2", "avx512f", "avx512_bf16"]}
    assert harness.cpu_description(str(tmp_path / "absent")) == {"model": None, "flags": None}
