"""benchmarks/quality_benchmark.py: the leads it derives from one run's scores."""

import os
import re

import pytest

from helpers import load_benchmark


def _scores(whole, long=None):
    return {"whole": {"bleu": whole}, "long": None if long is None else {"bleu": long}}


def test_leads_are_ours_shipped_beam_minus_each_peer_on_each_part_and_beam_minus_greedy():
    tool = load_benchmark("quality_benchmark")
    entry = {"ours": {"decodings": {"shipped_beam": _scores(36.42, 17.9), "shipped_greedy": _scores(33.86, 15.18),
                                    "raw_beam": _scores(35.0, 17.0), "raw_greedy": _scores(1.0, 1.0)}},
             "peers": {"lstm": {"beam": _scores(27.34, 12.27)}, "transformer": {"beam": _scores(40.0, None)}}}
    assert tool.comparison(entry) == {
        "beam_over_greedy": 2.56,
        "whole_lead_over_lstm": 9.08, "long_lead_over_lstm": 5.63,
        "whole_lead_over_lstm_raw_weights": 7.66, "long_lead_over_lstm_raw_weights": 4.73,
        "whole_lead_over_transformer": -3.58,  # a peer ahead gives a negative lead; no long part, no long lead
        "whole_lead_over_transformer_raw_weights": -5.0,
    }


def _run(tag, ours=None, peers=None, minutes=60.0, threads=2):
    run = {"tag": tag, "minutes": minutes, "threads": threads}
    if ours is not None:
        run["ours"] = {"decodings": {"shipped_beam": _scores(*ours[0]), "shipped_greedy": _scores(*ours[1])}}
    if peers is not None:
        run["peers"] = {peer: {"beam": _scores(*value)} for peer, value in peers.items()}
    return run


def test_a_peer_run_alone_is_compared_with_ours_of_another_tag_and_only_with_its_own_peer():
    tool = load_benchmark("quality_benchmark")
    ours_day1 = _run("day1", ours=((50.0, 30.0), (48.0, 27.0)), peers={"lstm": (47.0, 29.0)})
    transformer_day2 = _run("day2", peers={"transformer": (43.5, 23.25)})
    other_minutes = _run("day1", ours=((1.0, 1.0), (1.0, 1.0)), minutes=30.0)
    results = {"runs": [ours_day1, other_minutes, transformer_day2]}
    # The lstm leads and beam-over-greedy belong to day1's own entry: not repeated in day2's.
    assert tool.cross_comparison(transformer_day2, results, ["day1"]) == {
        "whole_lead_over_transformer": 6.5, "long_lead_over_transformer": 6.75}


def test_ours_alone_is_compared_with_the_peers_of_every_tag_given_first_tag_first():
    tool = load_benchmark("quality_benchmark")
    results = {"runs": [_run("a", peers={"lstm": (40.0, 20.0)}), _run("b", peers={"lstm": (1.0, 1.0),
                                                                                "transformer": (30.0, 10.0)})]}
    ours = _run("mine", ours=((45.0, 25.0), (44.0, 24.0)))
    assert tool.cross_comparison(ours, results, ["a", "b"]) == {
        "beam_over_greedy": 1.0, "whole_lead_over_lstm": 5.0, "long_lead_over_lstm": 5.0,
        "whole_lead_over_transformer": 15.0, "long_lead_over_transformer": 15.0}


def test_a_tag_recorded_twice_or_not_at_all_or_with_nothing_to_compare_stops_with_a_message():
    tool = load_benchmark("quality_benchmark")
    peer = _run("p", peers={"lstm": (40.0, 20.0)})
    twice = {"runs": [peer, _run("x", ours=((1.0, 1.0), (1.0, 1.0))), _run("x", ours=((2.0, 2.0), (2.0, 2.0)))]}
    for results, tags, message in ((twice, ["x"], "2 recorded runs of tag 'x'"),
                                   ({"runs": [peer]}, ["y"], "0 recorded runs of tag 'y'"),
                                   ({"runs": [peer, _run("q", peers={"lstm": (1.0, 1.0)})]}, ["q"], "no ours")):
        try:
            tool.cross_comparison(peer, results, tags)
        except SystemExit as stop:
            assert message in str(stop), stop
        else:
            raise AssertionError(f"compared {tags} without stopping")


def test_runs_on_other_pairs_are_kept_apart_from_built_in_ones_and_do_not_compare_with_them():
    tool = load_benchmark("quality_benchmark")
    built_in = _run("x", ours=((45.0, 25.0), (44.0, 24.0)))
    held_out = dict(_run("x", ours=((30.0, 20.0), (29.0, 19.0))), pairs={"file": "runs/heldout/catalogs_en_fr.tsv"})
    assert tool._key(built_in) != tool._key(held_out)  # the same tag on other data does not replace the run
    results = {"runs": [_run("peer", peers={"lstm": (40.0, 20.0)})]}
    with pytest.raises(SystemExit) as stop:  # a held-out run does not compare with a built-in one
        tool.cross_comparison(held_out, results, ["peer"])
    assert "runs/heldout/catalogs_en_fr.tsv" in str(stop.value) and "the built-in data" in str(stop.value)


def test_runs_on_two_different_cpus_do_not_compare_and_runs_without_a_recorded_cpu_still_do():
    tool = load_benchmark("quality_benchmark")
    fast = {"model": "AMD EPYC", "flags": ["avx2", "avx512f", "avx512_bf16"]}
    slow = {"model": "AMD EPYC", "flags": ["avx2"]}
    ours = dict(_run("mine", ours=((45.0, 25.0), (44.0, 24.0))), cpu=slow)
    results = {"runs": [dict(_run("peer", peers={"lstm": (40.0, 20.0)}), cpu=fast),
                        _run("older", peers={"lstm": (41.0, 21.0)}),
                        dict(_run("here", peers={"lstm": (42.0, 22.0)}), cpu=dict(slow))]}
    with pytest.raises(SystemExit) as stop:  # a run on one CPU does not compare with a run on another
        tool.cross_comparison(ours, results, ["peer"])
    assert "another CPU" in str(stop.value) and "avx512_bf16" in str(stop.value)
    assert tool.cross_comparison(ours, results, ["here"])["whole_lead_over_lstm"] == 3.0
    assert tool.cross_comparison(ours, results, ["older"])["whole_lead_over_lstm"] == 4.0


def test_cpu_description_names_the_model_and_the_instructions_that_set_a_step_s_speed(tmp_path):
    harness = load_benchmark("harness")
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nmodel name\t: AMD EPYC 7B13\nflags\t\t: fpu sse avx2 fma avx512f "
                       "avx512_bf16 avx512vl\n\nprocessor\t: 1\nmodel name\t: AMD EPYC 7B13\n")
    assert harness.cpu_description(str(cpuinfo)) == {"model": "AMD EPYC 7B13",
                                                     "flags": ["avx2", "avx512f", "avx512_bf16"]}
    assert harness.cpu_description(str(tmp_path / "absent")) == {"model": None, "flags": None}


def test_other_pairs_are_split_by_source_sentence_as_the_trainer_splits_them(tmp_path):
    from gnmt_tf.config import load_config
    from gnmt_tf.data import split_dev

    tool = load_benchmark("quality_benchmark")
    pairs = [(f"source {i % 700} of  a pair", f"cible {i}") for i in range(1400)]  # each source twice
    path = tmp_path / "other pairs.tsv"
    path.write_text("".join(f"{s}\t{t}\n" for s, t in pairs), encoding="utf-8")
    train_path, dev_path = tool.write_split(str(tmp_path / "work"), [], str(path))
    folder = os.path.basename(os.path.dirname(train_path))
    assert os.path.dirname(os.path.dirname(train_path)) == str(tmp_path / "work")
    assert re.fullmatch(r"other-pairs\.tsv-[0-9a-f]{8}\.split", folder), folder
    # A file of the same name in another folder is split into a folder of its own.
    (tmp_path / "elsewhere").mkdir()
    other = tmp_path / "elsewhere" / "other pairs.tsv"
    other.write_text("".join(f"{s}\t{t}\n" for s, t in pairs[:700]), encoding="utf-8")
    other_train, _ = tool.write_split(str(tmp_path / "work"), [], str(other))
    assert os.path.dirname(other_train) != os.path.dirname(train_path)
    read = lambda p: [tuple(line.split("\t")) for line in open(p, encoding="utf-8").read().splitlines()]
    train, dev = read(train_path), read(dev_path)
    config = load_config("small")
    expected_train, expected_dev = split_dev(pairs, config.data.dev_fraction, config.data.dev_max_pairs,
                                             config.training.seed)
    fold = lambda chosen: [(" ".join(s.split()), t) for s, t in chosen]
    assert (train, dev) == (fold(expected_train), fold(expected_dev)) and dev
    assert not {s for s, _ in train} & {s for s, _ in dev}  # a source's two translations on one side
