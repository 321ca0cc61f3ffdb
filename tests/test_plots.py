"""Pictures: attention matrices (gnmt_tf.plots, translate --plot-attention) and training curves (report)."""

import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
from matplotlib.image import imread

from gnmt_tf import model_files
from gnmt_tf import plots
from helpers import ROOT, run_in_process
from gnmt_tf.inference.translator import Translator

pytestmark = pytest.mark.draws_nothing_random  # conftest does not reseed before each test

MARK = "\u2581"  # the wordpieces' word-beginning mark


def run(args, stdin=None):
    return run_in_process([sys.executable, *args], stdin)


@pytest.fixture(scope="module")
def translator(trained_number_model):
    model_dir, _ = trained_number_model
    model, tokenizer, config = model_files.load_model_dir(model_dir)
    return Translator(model, tokenizer, config.decoding)


def word_indices(pieces):
    """The word each wordpiece belongs to (a piece starting with "▁" begins a word; "</s>" is its own)."""
    indices, word = [], -1
    for piece in pieces:
        if piece.startswith(MARK) or piece == "</s>" or word < 0:
            word += 1
        indices.append(word)
    return indices


def cell_luminance(image, axes, rows, columns):
    """The luminance at the centre of every heat-map cell of a saved picture, [rows, columns]."""
    height = image.shape[0]
    box = axes.get_window_extent()  # display pixels, origin at the bottom left
    luminance = image[..., :3] @ np.array([0.299, 0.587, 0.114])
    out = np.empty((rows, columns))
    for i in range(rows):  # row 0 of the matrix is drawn at the top (origin="upper")
        y = box.y1 - (i + 0.5) * box.height / rows
        for j in range(columns):
            x = box.x0 + (j + 0.5) * box.width / columns
            out[i, j] = luminance[int(height - y), int(x)]
    return out


def test_attention_pictures_draw_the_attention_cell_by_cell(translator, tmp_path):
    """Each picture shows the attention matrix of the translation it is of, cell by cell."""
    sentences = ["three one four", "", "two five eight nine", "seven six"]
    directory = tmp_path / "attention"
    paths = plots.plot_attention(translator, sentences, str(directory))
    assert [os.path.basename(p) for p in paths] == ["0001.png", "0002.png", "0003.png", "0004.png"]
    assert sorted(os.listdir(directory)) == ["0001.png", "0002.png", "0003.png", "0004.png"]
    assert imread(paths[1]).shape[:2] == (150, 500)  # the blank line: a 5 x 1.5 inch note

    results = translator.translate_nbest(sentences, n_best=1, return_attention=True)  # what plot_attention drew
    for sentence, nbest, path in zip(sentences, results, paths):
        if not sentence:
            assert nbest == []
            continue
        best = nbest[0]
        attention = best.attention
        rows, columns = attention.shape
        assert (rows, columns) == (len(best.target_pieces) + 1, len(best.source_pieces))
        # Drawing the same record again gives the same pixels, and its figure tells where the heat map is.
        figure = plots.save_attention_picture(best, str(tmp_path / "again.png"), title=plots.attention_title(sentence, best))
        image = imread(path)
        np.testing.assert_array_equal(image, imread(str(tmp_path / "again.png")))
        # save_figure's promise: a PNG of exactly the figure's size x DPI pixels (the sizes: next test)
        assert image.shape[:2] == (round(figure.get_figheight() * plots.DPI), round(figure.get_figwidth() * plots.DPI))
        # grey colour map on a fixed [0, 1] scale: a cell's brightness is its weight (to 8-bit precision);
        # a row or column off by one, or a transposed matrix, fails here
        np.testing.assert_allclose(cell_luminance(image, figure.axes[0], rows, columns), attention, atol=0.01)


def test_attention_follows_the_word_diagonal(translator, trained_number_model):
    """The number task translates word k as word k: attention, summed per word, shows it.

    Over the held-out sentences it translates right, the row of each target word's first piece (where the model decides
    which word comes next) puts its largest word-level weight on source word k, or within 0.05 of it
    (a model may split a piece's attention between the word it translates and the next), in at least
    80% of the rows; and the weight there averages over 0.5. An attention matrix read off by one row or
    column, or transposed, puts the weight elsewhere. Per-row thresholds would pin one model's numbers:
    a trained model's attention is sharp on most rows, not on every one.
    """
    model_dir, _ = trained_number_model
    with open(os.path.join(model_dir, "test.tsv"), encoding="utf-8") as handle:
        pairs = [line.rstrip("\n").split("\t") for line in handle][:40]
    sentences = [source for source, _ in pairs]
    on_diagonal, weights = [], []
    for (sentence, reference), nbest in zip(pairs, translator.translate_nbest(sentences, n_best=1,
                                                                               return_attention=True)):
        best = nbest[0]
        if best.text != reference:
            continue
        source_words, target_words = word_indices(best.source_pieces), word_indices(best.target_pieces)
        word_starts = [i for i, piece in enumerate(best.target_pieces) if piece.startswith(MARK)]
        assert len(word_starts) == len(sentence.split()), (sentence, best.text)  # word for word
        for i in word_starts:
            per_word = np.bincount(source_words, weights=best.attention[i])
            weight = per_word[target_words[i]]
            on_diagonal.append(weight >= per_word.max() - 0.05)
            weights.append(weight)
    assert len(on_diagonal) > 60  # the fixture model translates at least 97% of them right (number_model.py)
    assert np.mean(on_diagonal) >= 0.8, np.mean(on_diagonal)
    assert np.mean(weights) > 0.5, np.mean(weights)


def heat_map(rows, columns, title=None, draw=False):
    """attention_figure of a uniform [rows, columns] matrix with distinct labels (laid out if ``draw``)."""
    figure = plots.attention_figure([f"s{j}" for j in range(columns)], [f"t{i}" for i in range(rows - 1)],
                                    np.full((rows, columns), 1.0 / columns), title=title)
    if draw:
        figure.canvas.draw()  # constrained layout places the axes when drawing
    return figure


def test_attention_figure_sizes_follow_the_matrix_within_the_documented_bounds():
    """attention_figure's docstring: about 0.3 inch a cell, within 4-24 inches wide and 3-24 high."""
    pieces = [1, 2, 3, 5, 8, 13, 20, 30, 45, 60, 80, 120, 200]
    widths = [tuple(heat_map(4, n).get_size_inches())[0] for n in pieces]
    heights = [tuple(heat_map(n, 4).get_size_inches())[1] for n in pieces]
    for sizes, low, high in ((widths, 4.0, 24.0), (heights, 3.0, 24.0)):
        assert all(low <= size <= high for size in sizes)
        assert sizes[0] == low and sizes[-1] == high  # a one-piece matrix and a 200-piece one reach the bounds
        assert all(a <= b for a, b in zip(sizes, sizes[1:]))  # more pieces never make a smaller picture
        inside = [(n, size) for n, size in zip(pieces, sizes) if low < size < high]
        assert len(inside) >= 4
        for (n1, s1), (n2, s2) in zip(inside, inside[1:]):  # between the bounds each piece adds ~0.3 inch
            assert (s2 - s1) / (n2 - n1) == pytest.approx(0.3, rel=0.2)
    # Width follows the source pieces only, height the target pieces only.
    assert heat_map(3, 20).get_size_inches()[1] == heat_map(3, 2).get_size_inches()[1]
    assert heat_map(20, 3).get_size_inches()[0] == heat_map(2, 3).get_size_inches()[0]

    # The heat map's aspect follows the matrix: cells are about square while no bound is reached, so a
    # matrix with more columns than rows is drawn wider than tall, and its transpose taller than wide.
    for rows, columns in ((5, 10), (10, 5), (12, 12), (20, 8), (8, 20), (40, 60)):
        box = heat_map(rows, columns, draw=True).axes[0].get_window_extent()
        cell_aspect = (box.width / columns) / (box.height / rows)
        assert 2 / 3 < cell_aspect < 3 / 2, (rows, columns, cell_aspect)
        assert (box.width > box.height) == (columns > rows) or rows == columns
    # A title takes room of its own: the figure grows, the cells keep their size.
    plain, titled = heat_map(10, 10, draw=True), heat_map(10, 10, title="three one four -> trois un quatre", draw=True)
    assert titled.get_size_inches()[1] > plain.get_size_inches()[1]
    assert titled.get_size_inches()[0] == plain.get_size_inches()[0]
    assert titled.axes[0].get_window_extent().height >= plain.axes[0].get_window_extent().height
    # Past the size bounds the cells shrink, and their labels with them, but stay readable.
    fonts = [heat_map(n, n).axes[0].get_xticklabels()[0].get_fontsize() for n in (3, 60, 120, 300)]
    assert all(a >= b for a, b in zip(fonts, fonts[1:])) and fonts[-1] < fonts[0] and fonts[-1] >= 4


def test_attention_figure_labels_and_errors(tmp_path):
    pieces = ["\u2581a", "b", "</s>"]
    attention = np.full((3, 3), 1 / 3)
    with_eos = plots.attention_figure(pieces, ["\u2581x", "y", "</s>"], attention)
    without_eos = plots.attention_figure(pieces, ["\u2581x", "y"], attention, title="t")
    assert [t.get_text() for t in with_eos.axes[0].get_yticklabels()] == ["\u2581x", "y", "</s>"]
    assert [t.get_text() for t in without_eos.axes[0].get_yticklabels()] == ["\u2581x", "y", "</s>"]
    assert [t.get_text() for t in with_eos.axes[0].get_xticklabels()] == pieces
    assert len(with_eos.axes) == 2  # the heat map and its colour bar
    with pytest.raises(ValueError, match="attention has shape"):
        plots.attention_figure(pieces, ["\u2581x"], attention)
    with pytest.raises(ValueError, match="no attention matrix"):
        plots.save_attention_picture(plots_translation(None), str(tmp_path / "x.png"))
    (tmp_path / "file").write_text("")
    with pytest.raises(NotADirectoryError):
        plots.write_attention_pictures([[]], str(tmp_path / "file"))
    # Drawing needs neither pyplot (the user's backend stays untouched) nor TensorFlow.
    probe = subprocess.run(  # a fresh interpreter: what a plain import loads
        [sys.executable, "-c", "import sys, gnmt_tf.plots; assert 'matplotlib.pyplot' not in sys.modules, 'pyplot'; "
         "assert 'tensorflow' not in sys.modules, 'tensorflow'"],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )
    assert probe.returncode == 0, probe.stderr[-2000:]


def plots_translation(attention):
    from gnmt_tf.inference.results import Translation

    return Translation("x", score=0.0, log_prob=0.0, target_pieces=["\u2581x"], source_pieces=["\u2581a", "</s>"],
                       attention=attention)


def test_translate_cli_plots_attention_per_line(trained_number_model, tmp_path, capsys):
    model_dir, _ = trained_number_model
    directory = tmp_path / "new" / "pictures"
    result = run(["-m", "gnmt_tf.translate", "--model-dir", model_dir, "--plot-attention", str(directory),
                  "--chunk-size", "2"], stdin="one two\n\nfive five five\nnine\nseven\n")
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout == "un deux\n\ncinq cinq cinq\nneuf\nsept\n"  # translations printed as without the option
    names = sorted(os.listdir(directory))
    assert names == ["0001.png", "0002.png", "0003.png", "0004.png", "0005.png"]  # numbering spans the chunks
    shapes = [imread(str(directory / name)).shape for name in names]
    assert shapes[1][:2] == (150, 500)  # the blank line's note
    assert shapes[2][1] > shapes[3][1]  # "five five five" has more source pieces than "nine": a wider picture

    from gnmt_tf.cli import translate

    (tmp_path / "taken").write_text("")
    assert translate.main(["--model-dir", model_dir, "--plot-attention", str(tmp_path / "taken")]) == 2
    assert "exists and is not a directory" in capsys.readouterr().err
    assert "--plot-attention DIR" in translate.build_parser().format_help()


def test_read_training_scalars_of_a_real_run(trained_number_model):
    model_dir, result = trained_number_model
    scalars = plots.read_training_scalars(model_dir)
    for key in ("train/loss", "dev/bleu", "train/delta", "train/learning_rate"):
        steps = [step for step, _ in scalars[key]]
        assert steps and all(a < b for a, b in zip(steps, steps[1:])), key
    loss = [value for _, value in scalars["train/loss"]]
    assert len(loss) == result.step // 20 and scalars["train/loss"][-1][0] == result.step  # log_every 20
    assert np.mean(loss[-5:]) < 0.5 * np.mean(loss[:5]) and loss[-1] < loss[0]
    delta = [value for _, value in scalars["train/delta"]]
    assert all(1.0 - 1e-6 <= d <= 8.0 + 1e-6 for d in delta)
    assert delta[0] > 7.0 and delta[-1] == pytest.approx(1.0)  # annealed 8 -> 1 by step 500 (section 6)
    # Section 8.3's schedule: Adam's rate, then SGD's once adam_steps are done (the fixture trains on
    # past them until it meets its quality); no halving starts this early.
    t = model_files.load_metadata(model_dir)[0].training
    assert t.decay_start > result.step
    assert [v for _, v in scalars["train/learning_rate"]] == [
        pytest.approx(t.adam_learning_rate if step <= t.adam_steps else t.sgd_learning_rate)
        for step, _ in scalars["train/learning_rate"]]
    assert scalars["dev/bleu"][-1] == (result.step, pytest.approx(result.dev_bleu, abs=1e-3))


def test_report_cli_writes_the_curves(trained_number_model, tmp_path):
    model_dir, result = trained_number_model
    run_dir = tmp_path / "run"
    shutil.copytree(os.path.join(model_dir, "logs"), run_dir / "logs")  # keep the shared model dir untouched
    out = run(["-m", "gnmt_tf.report", "--model-dir", str(run_dir)])
    assert out.returncode == 0, out.stderr[-2000:]
    picture = run_dir / "training_curves.png"
    assert f"wrote {picture}" in out.stdout
    best = model_files.read_best_bleu(model_dir)
    assert f"last step {result.step}" in out.stdout
    assert f"best dev BLEU {best.score:.2f} (step {best.step})" in out.stdout
    assert imread(str(picture)).shape[:2] == (750, 1100)

    from gnmt_tf.cli import report

    elsewhere = tmp_path / "a" / "b" / "curves.png"
    assert report.main(["--model-dir", str(run_dir), "--output", str(elsewhere)]) == 0
    assert imread(str(elsewhere)).shape[:2] == (750, 1100)


def test_report_errors_without_event_files(tmp_path, capsys):
    from gnmt_tf.cli import report

    (tmp_path / "logs").mkdir()
    with pytest.raises(plots.NoTrainingLogs, match="no TensorBoard event files"):
        plots.read_training_scalars(str(tmp_path))
    assert report.main(["--model-dir", str(tmp_path)]) == 2
    assert "no TensorBoard event files" in capsys.readouterr().err
    assert report.main(["--model-dir", str(tmp_path / "missing")]) == 2
    assert "directory not found" in capsys.readouterr().err
    assert not os.path.exists(tmp_path / "training_curves.png")


def test_resumed_runs_and_missing_series(tmp_path):
    import tensorflow as tf

    logs = tmp_path / "logs" / "train"
    for points in ([(10, 3.0), (20, 2.0), (30, 1.0)], [(20, 5.0), (30, 6.0), (40, 7.0)]):  # resumed at step 20
        writer = tf.summary.create_file_writer(str(logs))
        with writer.as_default():
            for step, value in points:
                tf.summary.scalar("loss", value, step=step)
                tf.summary.text("note", "not a scalar", step=step)
        writer.close()
    scalars = plots.read_training_scalars(str(tmp_path))
    assert scalars == {"train/loss": [(10, 3.0), (20, 5.0), (30, 6.0), (40, 7.0)]}  # the later run wins

    figure = plots.training_curves_figure(scalars)
    notes = [" ".join(t.get_text() for t in axes.texts) for axes in figure.axes[:4]]
    assert notes[0] == "" and all("no data" in note for note in notes[1:])
    assert "dev/bleu" in notes[1] and "train/delta" in notes[2] and "train/learning_rate" in notes[3]
    plots.save_figure(plots.training_curves_figure({}), str(tmp_path / "empty.png"))  # all empty: still a picture
    assert imread(str(tmp_path / "empty.png")).shape[:2] == (750, 1100)
