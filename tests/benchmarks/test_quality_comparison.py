"""benchmarks/quality_benchmark.py: the leads it derives from one run's scores."""

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
