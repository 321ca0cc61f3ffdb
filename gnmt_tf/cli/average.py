"""Average the last checkpoints of a model: ``python -m gnmt_tf.average --model-dir DIR --last N``.

Writes the element-wise mean of the model weights of the newest N checkpoints in
DIR/checkpoints/ to DIR/averaged/, a checkpoint that translate, evaluate and export
use with ``--checkpoint averaged``. Averaging the weights of neighbouring
checkpoints smooths the noise of the last updates (OpenNMT-tf's
``average-checkpoints``).

The averaged model keeps the delta (eq. 10) of the newest checkpoint: delta is not
a weight to average but the clipping the weights were trained under.
"""

from __future__ import annotations

import os
from typing import Callable, List, Tuple

from gnmt_tf.cli.common import add_model_dir_argument
from gnmt_tf.cli.commands import defined_in
from gnmt_tf.cli.scaffold import Command


def checkpoints_to_average(model_dir: str, last: int) -> List[str]:
    """The newest ``last`` checkpoint paths of ``model_dir``, oldest first."""
    from gnmt_tf import model_files

    return model_files.newest_checkpoints(model_dir, last, flag="--last")


def average_checkpoints(model_dir: str, last: int, log: Callable[[str], None] = print) -> Tuple[str, List[str]]:
    """Write the mean of the newest ``last`` checkpoints to ``model_dir/averaged/``.

    Returns the averaged checkpoint's path and the paths it averaged.
    """
    import numpy as np
    import tensorflow as tf

    from gnmt_tf import model_files

    config, _ = model_files.load_metadata(model_dir)
    paths = checkpoints_to_average(model_dir, last)
    total = None
    deltas = []
    for path in paths:
        model = model_files.build_model(config, path)
        delta_index = next(i for i, w in enumerate(model.weights) if w is model.clip_delta)
        weights = [np.asarray(w, np.float64) for w in model.get_weights()]
        deltas.append(float(weights[delta_index]))
        total = weights if total is None else [t + w for t, w in zip(total, weights)]
    mean = [t / len(paths) for t in total]
    mean[delta_index] = np.float64(deltas[-1])
    if max(deltas) > deltas[-1] * (1 + 1e-6):
        log(f"note: the averaged checkpoints were trained at delta {', '.join(f'{d:.3g}' for d in deltas)}; "
            f"the average is used at the newest one's, {deltas[-1]:.3g}")
    model.set_weights([m.astype(w.dtype.as_numpy_dtype) for m, w in zip(mean, model.weights)])
    step = int(paths[-1].rsplit("-", 1)[-1])
    manager = tf.train.CheckpointManager(tf.train.Checkpoint(model=model), model_files.averaged_dir(model_dir), max_to_keep=1)
    path = manager.save(checkpoint_number=step)
    with open(os.path.join(model_files.averaged_dir(model_dir), model_files.AVERAGED_SOURCES_FILE), "w", encoding="utf-8") as handle:
        handle.writelines(f"{os.path.basename(p)}\n" for p in paths)
    return path, paths


def add_arguments(parser) -> None:
    add_model_dir_argument(parser)
    parser.add_argument("--last", type=int, default=3,
                        help="how many of the newest checkpoints to average (default: %(default)s)")


def average(args) -> int:
    path, paths = average_checkpoints(args.model_dir, args.last)
    print(f"averaged {len(paths)} checkpoints ({', '.join(os.path.basename(p) for p in paths)}) into {path}")
    print("use it with --checkpoint averaged (translate, evaluate, export)")
    return 0


COMMAND = Command(defined_in(__spec__.name), __doc__, add_arguments, average,
                  examples=("--model-dir runs/en-fr --last 3",))
main, build_parser = COMMAND.main, COMMAND.build_parser
