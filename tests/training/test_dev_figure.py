"""One figure for one thing: the dev BLEU a run ends with is evaluate's, on the checkpoint translate uses."""

import json
import sys

from gnmt_tf import model_files
from helpers import run_in_process


def test_the_final_dev_figure_is_what_evaluate_gives_on_the_default_checkpoint(trained_number_model):
    model_dir, result = trained_number_model
    out = run_in_process([sys.executable, "-m", "gnmt_tf.evaluate", "--model-dir", model_dir,
                          "--test", model_files.dev_split_path(model_dir), "--json"])
    assert out.returncode == 0, out.stderr[-2000:]
    report = json.loads(out.stdout)
    assert abs(report["bleu"] - result.dev.bleu.score) <= 0.01, (report["bleu"], result.dev)
    assert report["signature"] == result.dev.bleu.signature
    assert result.dev_checkpoint == model_files.find_checkpoint(model_dir, "best")
    # and it says how it was decoded: the config's beam search, as evaluate ran it
    assert result.dev.search == (f"beam {report['beam_width']}, alpha {report['alpha']:g}, beta {report['beta']:g}, "
                                 f"beamsize {report['beamsize']:g}")
