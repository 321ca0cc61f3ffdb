"""Pictures of a trained model: attention alignments and training curves.

    from gnmt_tf.plots import plot_attention, read_training_scalars, training_curves_figure

    plot_attention(translator, ["three one four"], "attention/")     # attention/0001.png
    figure = training_curves_figure(read_training_scalars("model_dir"))
    figure.savefig("curves.png")

Everything is drawn on :class:`matplotlib.figure.Figure` objects with the Agg
canvas attached directly (``FigureCanvasAgg``); pyplot is never imported, so
neither its global figure list nor the user's (notebook) backend is touched.
A returned figure displays inline in Jupyter and saves with ``savefig``.

Two kinds of picture:

* the attention matrix of one translation (section 3, eq. 4-5: for every target
  wordpiece, the softmax weights over the source wordpieces that make up its
  context vector), drawn as Bahdanau et al. (2015, fig. 3) draw their
  alignments: source on the x axis, target on the y axis, one grey cell per
  (target, source) pair, white for weight 1 and black for weight 0;
* the training curves a run logs to TensorBoard (:class:`gnmt_tf.training.callbacks.TrainingSummaries`
  and the dev evaluation): training loss, dev BLEU, the clipping bound delta
  (section 6) and the learning rate (section 8.3), against the step.
"""

from __future__ import annotations

import os
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

DPI = 100  # pixels per inch of every saved picture: a PNG is figure size (inches) x DPI pixels
EOS_PIECE = "</s>"
MAX_TITLE_CHARACTERS = 90

# The four training-curve panels: (title, series drawn as lines, series drawn as points, y label).
# Tags are "<log subdirectory>/<scalar tag>" as written under MODEL_DIR/logs/ by gnmt_tf.training:
# TrainingSummaries writes logs/train/{loss, perplexity, learning_rate, delta, gradient_norm, ...}
# every training.log_every steps; DevEvaluator.evaluate writes logs/dev/{loss, perplexity, bleu}.
CURVE_PANELS = (
    ("loss", ("train/loss",), ("dev/loss",), "cross-entropy per target wordpiece"),
    ("dev BLEU (greedy decoding)", (), ("dev/bleu",), "BLEU"),
    ("delta: LSTM accumulator clipping bound (section 6)", ("train/delta",), (), "delta"),
    ("learning rate (section 8.3)", ("train/learning_rate",), (), "learning rate"),
)

SERIES_LABELS = {"train/loss": "training (train/loss)", "dev/loss": "dev, teacher forcing (dev/loss)"}

Series = List[Tuple[int, float]]


class NoTrainingLogs(FileNotFoundError):
    """A directory has no TensorBoard event files to read."""


def _new_figure(width: float, height: float) -> Figure:
    """A figure on its own Agg canvas (no pyplot), laid out with constrained layout."""
    figure = Figure(figsize=(width, height), dpi=DPI, layout="constrained")
    FigureCanvasAgg(figure)
    return figure


def _shorten(text: str, limit: int = MAX_TITLE_CHARACTERS) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "\u2026"


# ---------------------------------------------------------------------------------------- attention
def attention_figure(
    source_pieces: Sequence[str],
    target_pieces: Sequence[str],
    attention,
    title: Optional[str] = None,
    cmap: str = "gray",
) -> Figure:
    """A heat map of one attention matrix, like the alignment plots of Bahdanau et al. (2015).

    Args:
        source_pieces: the source wordpieces the model saw, "</s>" included (``Translation.source_pieces``).
        target_pieces: the target wordpieces, with or without the final "</s>"
            (``Translation.target_pieces`` has none; one is added when ``attention``
            has a row more than there are pieces).
        attention: [target pieces + EOS, source pieces] weights, each row a distribution
            over the source (eq. 5's softmax of the scores of eq. 4).
        title: drawn above the matrix.
        cmap: a matplotlib colour map; the default grey map draws weight 0 black and
            weight 1 white (the colour scale is fixed to [0, 1] so pictures compare).

    Returns the figure: ``figure.axes[0]`` is the heat map (row i of the matrix is the
    i-th row from the top, column j the j-th column from the left, each cell drawn
    without interpolation), ``figure.axes[1]`` its colour bar. The size grows with the
    number of pieces (about 0.3 inch a cell) within 4-24 inches wide and 3-24 high.
    """
    weights = np.asarray(attention, dtype=np.float32)
    sources = [str(piece) for piece in source_pieces]
    targets = [str(piece) for piece in target_pieces]
    if weights.ndim != 2:
        raise ValueError(f"attention must be a [target, source] matrix, got shape {weights.shape}")
    if weights.shape[0] == len(targets) + 1:
        targets.append(EOS_PIECE)
    if weights.shape != (len(targets), len(sources)):
        raise ValueError(
            f"attention has shape {weights.shape} but there are {len(targets)} target pieces "
            f"(with </s>) and {len(sources)} source pieces"
        )
    rows, columns = weights.shape
    cell = 0.3  # inches
    width = float(np.clip(2.6 + cell * columns, 4.0, 24.0))
    height = float(np.clip(1.8 + cell * rows + (0.3 if title else 0.0), 3.0, 24.0))
    figure = _new_figure(width, height)
    axes = figure.add_subplot()
    # Tick labels shrink with the cells when the size bound is reached (long sentences).
    cell_points = 72.0 * min((width - 2.6) / max(columns, 1), (height - 1.8) / max(rows, 1))
    fontsize = float(np.clip(0.75 * cell_points, 4.0, 10.0))

    image = axes.imshow(
        weights, cmap=cmap, vmin=0.0, vmax=1.0, interpolation="nearest", aspect="auto", origin="upper"
    )
    axes.set_xticks(range(columns))
    axes.set_xticklabels(sources, rotation=60, ha="right", rotation_mode="anchor", fontsize=fontsize)
    axes.set_yticks(range(rows))
    axes.set_yticklabels(targets, fontsize=fontsize)
    axes.tick_params(length=2)
    axes.set_xlabel("source wordpieces")
    axes.set_ylabel("target wordpieces")
    if title:
        axes.set_title(title, fontsize=10)
    figure.colorbar(image, ax=axes, fraction=0.05, pad=0.03, label="attention weight")
    return figure


def note_figure(note: str) -> Figure:
    """A small picture holding only a line of text (for sentences without an attention matrix)."""
    figure = _new_figure(5.0, 1.5)
    axes = figure.add_subplot()
    axes.set_axis_off()
    axes.text(0.5, 0.5, note, ha="center", va="center", wrap=True, transform=axes.transAxes)
    return figure


def save_figure(figure: Figure, path: str) -> str:
    """Write ``figure`` as a PNG of exactly its size x :data:`DPI` pixels; returns ``path``."""
    figure.savefig(path, dpi=DPI, format="png")  # no bbox_inches="tight": the pixel size stays known
    return path


def save_attention_picture(translation, path: str, title: Optional[str] = None) -> Figure:
    """Draw the attention matrix of a :class:`gnmt_tf.inference.translator.Translation` into a PNG at ``path``.

    The translation must carry its attention (``translate_nbest(..., return_attention=True)``).
    Returns the saved figure, already drawn: ``figure.axes[0].get_window_extent()`` is the
    heat map's box in the PNG's pixels (origin at the bottom left).
    """
    if translation.attention is None:
        raise ValueError("this translation has no attention matrix: translate with return_attention=True")
    figure = attention_figure(translation.source_pieces, translation.target_pieces, translation.attention, title)
    save_figure(figure, path)
    return figure


def attention_title(sentence: str, translation) -> str:
    """The title :func:`write_attention_pictures` gives a picture: "source -> translation", shortened."""
    return _shorten(f"{sentence}  \u2192  {translation.text}")


def attention_picture_name(index: int) -> str:
    """File name of the ``index``-th (1-based) sentence's picture: 0001.png, 0002.png, ..."""
    return f"{index:04d}.png"


def _prepare_directory(directory: str) -> None:
    if os.path.exists(directory) and not os.path.isdir(directory):
        raise NotADirectoryError(f"{directory} exists and is not a directory")
    os.makedirs(directory, exist_ok=True)


def write_attention_pictures(
    nbest_lists: Sequence[Sequence],
    directory: str,
    sentences: Optional[Sequence[str]] = None,
    first_index: int = 1,
) -> List[str]:
    """One PNG per sentence from ``translate_nbest(..., return_attention=True)`` results.

    The best hypothesis of the i-th list is drawn into ``directory/NNNN.png`` with
    NNNN = ``first_index + i`` (so that a caller translating in chunks keeps counting),
    titled "source -> translation" (:func:`attention_title`) when ``sentences`` is given.
    A sentence without a translation (a blank line) still gets its file, a picture
    saying so, so that file NNNN always belongs to input line NNNN. Returns the paths,
    in input order.
    """
    _prepare_directory(directory)
    paths = []
    for offset, nbest in enumerate(nbest_lists):
        path = os.path.join(directory, attention_picture_name(first_index + offset))
        sentence = sentences[offset] if sentences is not None else None
        if nbest:
            title = attention_title(sentence, nbest[0]) if sentence is not None else None
            save_attention_picture(nbest[0], path, title=title)
        else:
            blank = sentence is None or not sentence.strip()
            note = "empty sentence: nothing to translate" if blank else f"no translation for: {_shorten(sentence, 60)}"
            save_figure(note_figure(f"line {first_index + offset}: {note}"), path)
        paths.append(path)
    return paths


def plot_attention(translator, sentences: Sequence[str], directory: str, first_index: int = 1, **overrides) -> List[str]:
    """Translate ``sentences`` and write the attention matrix of each best translation as a PNG.

    Args:
        translator: a :class:`gnmt_tf.inference.translator.Translator`.
        sentences: source sentences; the i-th one's picture is ``directory/NNNN.png``
            with NNNN = ``first_index + i`` (0001.png, 0002.png, ... by default).
        directory: created if needed; an existing file there is an error (NotADirectoryError).
        overrides: beam search settings (beam_width, alpha, beta, beamsize), as for
            :meth:`Translator.translate_nbest`.

    A blank sentence is not translated (the Translator gives it no hypothesis) and its
    picture is a one-line note saying so: there is always one file per input sentence.
    Each picture is titled "source -> translation". Returns the paths, in input order.
    """
    _prepare_directory(directory)
    results = translator.translate_nbest(list(sentences), n_best=1, return_attention=True, **overrides)
    return write_attention_pictures(results, directory, sentences=list(sentences), first_index=first_index)


# ---------------------------------------------------------------------------------------- training curves
def _log_root(model_dir: str) -> str:
    from gnmt_tf import model_files

    logs = model_files.log_dir(model_dir)
    return logs if os.path.isdir(logs) else model_dir


def _event_directories(root: str) -> List[str]:
    found = []
    for directory, _, files in os.walk(root):
        if any("tfevents" in name for name in files):
            found.append(directory)
    return sorted(found)


def _keep_latest_run(points: Iterable[Tuple[float, int, float]]) -> Series:
    """(wall time, step, value) -> [(step, value)] with increasing steps.

    A run resumed from a checkpoint logs again from the checkpoint's step, into a new
    event file: as TensorBoard does, a point whose step is not after the last one
    replaces everything logged from that step on.
    """
    series: Series = []
    for _, step, value in sorted(points, key=lambda point: point[0]):
        while series and series[-1][0] >= step:
            series.pop()
        series.append((step, value))
    return series


def read_training_scalars(model_dir: str) -> Dict[str, Series]:
    """Every scalar series in the TensorBoard event files of a model directory.

    Reads ``model_dir/logs`` (or ``model_dir`` itself when it has no ``logs/``) and all
    directories below it. Keys are "<subdirectory>/<tag>", e.g. "train/loss",
    "train/learning_rate", "train/delta", "dev/bleu" (see :data:`CURVE_PANELS`); values
    are ``[(step, value), ...]`` with strictly increasing steps (a resumed run's points
    replace the ones it logs again). TF2's ``tf.summary.scalar`` stores scalars as
    tensors with the "scalars" plugin; TF1-style ``simple_value`` scalars are read too.

    Raises NoTrainingLogs when there is no event file.
    """
    from tensorboard.backend.event_processing import event_accumulator
    from tensorboard.util import tensor_util

    if not os.path.isdir(model_dir):
        raise NoTrainingLogs(f"directory not found: {model_dir}")
    root = _log_root(model_dir)
    directories = _event_directories(root)
    if not directories:
        raise NoTrainingLogs(
            f"no TensorBoard event files under {root} (python -m gnmt_tf.train writes them to logs/train and logs/dev)"
        )
    scalars: Dict[str, Series] = {}
    for directory in directories:
        prefix = os.path.relpath(directory, root).replace(os.sep, "/")
        accumulator = event_accumulator.EventAccumulator(
            directory,
            # 0 = keep every point (the default keeps a reservoir sample of 10 tensors per tag)
            size_guidance={event_accumulator.TENSORS: 0, event_accumulator.SCALARS: 0},
            purge_orphaned_data=False,  # done by wall time in _keep_latest_run, across files
        )
        accumulator.Reload()
        tags = accumulator.Tags()
        found: Dict[str, List[Tuple[float, int, float]]] = {}
        for tag in tags.get(event_accumulator.TENSORS, []):
            plugin = accumulator.SummaryMetadata(tag).plugin_data.plugin_name
            if plugin not in ("scalars", ""):
                continue
            for event in accumulator.Tensors(tag):
                value = tensor_util.make_ndarray(event.tensor_proto)
                if value.size != 1 or not np.issubdtype(value.dtype, np.number):
                    break
                found.setdefault(tag, []).append((event.wall_time, int(event.step), float(value.reshape(()))))
        for tag in tags.get(event_accumulator.SCALARS, []):
            for event in accumulator.Scalars(tag):
                found.setdefault(tag, []).append((event.wall_time, int(event.step), float(event.value)))
        for tag, points in found.items():
            key = tag if prefix == "." else f"{prefix}/{tag}"
            scalars[key] = _keep_latest_run(points)
    return scalars


def training_curves_figure(scalars: Dict[str, Series], title: Optional[str] = None) -> Figure:
    """Four panels against a common step axis: training loss (dev loss as points), dev BLEU, delta,
    learning rate.

    ``scalars`` is what :func:`read_training_scalars` returns (keys in :data:`CURVE_PANELS`).
    A panel whose series are all missing stays empty with a note saying which tags were
    looked for. ``figure.axes[:4]`` are the panels, in that order.
    """
    figure = _new_figure(11.0, 7.5)
    panels = figure.subplots(2, 2).ravel()
    last_step = max((series[-1][0] for series in scalars.values() if series), default=0)
    for axes, (panel_title, lines, points, ylabel) in zip(panels, CURVE_PANELS):
        axes.set_title(panel_title, fontsize=11)
        drawn = False
        for key in lines:
            series = scalars.get(key) or []
            if series:
                steps, values = zip(*series)
                style = dict(drawstyle="steps-post") if key.endswith("learning_rate") else {}
                axes.plot(steps, values, label=SERIES_LABELS.get(key, key), linewidth=1.5, **style)
                drawn = True
        for key in points:
            series = scalars.get(key) or []
            if series:
                steps, values = zip(*series)
                axes.plot(steps, values, "o-", label=SERIES_LABELS.get(key, key), markersize=4, linewidth=1)
                drawn = True
        if drawn:
            axes.set_xlabel("step")
            axes.set_ylabel(ylabel)
            axes.set_xlim(0, max(last_step, 1) * 1.02)  # the same step range in every panel
            axes.grid(True, alpha=0.3)
            if len(lines) + len(points) > 1:
                axes.legend(fontsize=8)
        else:
            wanted = ", ".join(lines + points)
            axes.text(0.5, 0.5, f"no data\n(no {wanted} scalars in the event files)", ha="center", va="center",
                      transform=axes.transAxes, color="0.4")
            axes.set_xticks([])
            axes.set_yticks([])
    if title:
        figure.suptitle(title)
    return figure


def save_training_curves(model_dir: str, path: Optional[str] = None) -> Tuple[str, Dict[str, Series]]:
    """Read a model directory's event files and write the four training curves as a PNG.

    ``path`` defaults to ``model_dir/training_curves.png``. Returns (path, scalars).
    """
    scalars = read_training_scalars(model_dir)
    from gnmt_tf import model_files

    path = path or model_files.training_curves_path(model_dir)
    parent = os.path.dirname(os.path.abspath(path))
    os.makedirs(parent, exist_ok=True)
    save_figure(training_curves_figure(scalars, title=_shorten(os.path.abspath(model_dir), 100)), path)
    return path, scalars
