"""Training throughput of the parallel schemes and the one-device levers (XLA, bfloat16), in source tokens per second.

    python benchmarks/training_throughput_benchmark.py   # writes benchmarks/results/training_throughput.json

Source tokens/s is the measure of Ono et al. (2019, table 3). Each scheme trains
the same model (default: the shipped ``small`` config) on one fixed synthetic
batch with the real training step (``GNMT.train_step`` through ``model.fit``,
compiled by the Trainer's own :class:`gnmt_tf.training.state.TrainingState`, with the delta annealing
callback): a few warm-up steps (tracing included), then timed steps,
each timed by a batch callback (the median step counts). Every scheme runs
``--rounds`` times in alternating order and its best round counts (all are kept).

Schemes, each in its own worker process (logical devices are fixed per process):

* ``default``: the default strategy, one device;
* ``mirrored``: ``tf.distribute.MirroredStrategy`` over 2 logical CPUs (each
  replica half of the same global batch);
* ``model``: ``parallel.mode: model`` over 2 logical CPUs (section 3.3: layers in
  contiguous blocks, wavefront, softmax in 2 vocabulary shards);
* ``hybrid``: ``parallel.mode: hybrid`` over 2 logical CPUs (Ono et al. 2019);
* ``xla``: one device, the step compiled with XLA (``training.jit_compile``);
* ``bfloat16``: one device, the large products from bfloat16 operands
  (``training.product_precision: bfloat16``);
* ``onednn_off``: as ``default``, with TensorFlow's own kernels instead of oneDNN's
  (``TF_ENABLE_ONEDNN_OPTS=0`` in the worker's environment);
* ``baseline``: one device, as ``default`` but with the code and the config of another checkout
  (``--baseline DIR``, e.g. ``git worktree add --detach /tmp/old c53d5df``): old against new, in one
  sitting, on the same batch;
* ``baseline_bfloat16``: as ``baseline`` with bfloat16 products, as ``bfloat16``, for a checkout that
  has them (a change timed against its parent in the precision ``small`` trains in on a bfloat16 CPU).

With ``--real-batches MODEL_DIR`` the steps read real batches instead of the fixed synthetic one: the
first training batches of the built-in data (the English->French catalogs' training split) as the
trainer makes them (``make_dataset`` with the config's batching and seed), in wordpieces of the
default run in MODEL_DIR. Every scheme steps through the same batches, whose lengths vary as a run's
do, and the mean step counts.

``--set KEY=VALUE`` overrides a config field for the real batches and every scheme's model, e.g.
``--set data.bucket_width=1``: the same code stepping through batches made another way (compare the
real tokens per second of two such commands, since their batches differ).

Logical CPU devices share the process' thread pools and the machine's cores, so
on a CPU machine they add no compute: what this measures there is the overhead
(or the inter-op overlap) of each scheme, not the multi-GPU speed-ups of the papers.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import subprocess
import sys
import tempfile
import time

from harness import WorkerFailed, cpu_description, run_in_worker_process, write_report

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SCHEMES = ("default", "mirrored", "model", "hybrid", "xla", "bfloat16", "onednn_off", "baseline",
           "baseline_bfloat16")
ONE_DEVICE = ("default", "xla", "bfloat16", "onednn_off", "baseline", "baseline_bfloat16")
BASELINE = ("baseline", "baseline_bfloat16")  # the schemes that run the code of --baseline DIR
# Schemes that differ from ``default`` only in their worker's environment (read when TensorFlow loads).
WORKER_ENVIRONMENT = {"onednn_off": {"TF_ENABLE_ONEDNN_OPTS": "0"}}


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[1])
    parser.add_argument("--config", default="small", help="shipped config name or YAML path")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override a config field (repeatable), e.g. data.bucket_width=1: for the real "
                             "batches and every scheme's model; recorded with the results")
    parser.add_argument("--schemes", nargs="+", choices=SCHEMES,
                        default=[s for s in SCHEMES if s not in BASELINE])
    parser.add_argument("--baseline", metavar="DIR",
                        help="a checkout of an older commit, timed as scheme 'baseline' "
                             "(or 'baseline_bfloat16')")
    parser.add_argument("--batch", type=int, default=None, help="sentence pairs per step (default: training.batch_size)")
    parser.add_argument("--min-length", type=int, default=15, help="shortest source/target, in wordpieces")
    parser.add_argument("--max-length", type=int, default=30, help="longest source/target, in wordpieces")
    parser.add_argument("--warmup", type=int, default=2, help="untimed steps first (the first one traces)")
    parser.add_argument("--steps", type=int, default=10, help="timed steps")
    parser.add_argument("--devices", type=int, default=2, help="logical CPUs for the parallel schemes")
    parser.add_argument(
        "--rounds", type=int, default=2, help="each scheme this many times, in alternating order; the best round counts"
    )
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--real-batches", metavar="MODEL_DIR",
                        help="time real batches of the built-in data in the wordpieces of this model directory")
    parser.add_argument("--scheme", choices=SCHEMES, help=argparse.SUPPRESS)
    parser.add_argument("--batches", help=argparse.SUPPRESS)  # the real batches, saved for the workers
    parser.add_argument("--note", help="what this measurement is for (e.g. which change against which parent), "
                                       "recorded with the results")
    parser.add_argument("--output", default=os.path.join(HERE, "results", "training_throughput.json"))
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if not args.worker and any(s in BASELINE for s in args.schemes) != (args.baseline is not None):
        parser.error("scheme 'baseline' (or 'baseline_bfloat16') and --baseline DIR go together")
    if args.baseline is not None and not os.path.isdir(os.path.join(args.baseline, "gnmt_tf")):
        parser.error(f"--baseline {args.baseline}: no gnmt_tf package there")
    if args.real_batches is not None and not os.path.exists(os.path.join(args.real_batches, "wordpieces.txt")):
        parser.error(f"--real-batches {args.real_batches}: no wordpieces.txt there (a trained model directory)")
    return args


def checkout_commit(tree: str) -> str:
    """The commit of a checkout, or "" where it is not a git checkout."""
    done = subprocess.run(["git", "-C", tree, "rev-parse", "HEAD"], capture_output=True, text=True)
    return done.stdout.strip() if done.returncode == 0 else ""


# ---------------------------------------------------------------------------------- worker
def synthetic_batch(np, rng, batch, min_length, max_length, vocab_size):
    """Right-padded (source, target input, target output) with lengths uniform in [min, max]."""
    from gnmt_tf.vocab import BOS_ID, EOS_ID, PAD_ID

    def sentences():
        lengths = rng.integers(min_length, max_length + 1, size=batch)
        tokens = np.full((batch, max_length + 1), PAD_ID, np.int32)
        for row, length in enumerate(lengths):
            tokens[row, :length] = rng.integers(4, vocab_size, size=length)
        return tokens, lengths

    source, source_lengths = sentences()
    source[np.arange(batch), source_lengths] = EOS_ID
    words, lengths = sentences()
    target_in = np.full_like(words, PAD_ID)
    target_out = np.full_like(words, PAD_ID)
    for row, length in enumerate(lengths):
        target_in[row, : length + 1] = np.insert(words[row, :length], 0, BOS_ID)
        target_out[row, : length + 1] = np.append(words[row, :length], EOS_ID)
    return source, target_in, target_out


def save_real_batches(model_dir: str, config, count: int, path: str) -> int:
    """The first ``count`` training batches of the built-in data as the trainer makes them with ``config``
    (its ``--set`` overrides applied), in the wordpieces of ``model_dir``, saved to ``path`` (npz); returns
    the vocabulary size."""
    import numpy as np

    from gnmt_tf import model_files
    from gnmt_tf.data import make_dataset, split_dev
    from gnmt_tf.data.catalogs import load_catalog_pairs

    t, d = config.training, config.data
    tokenizer = model_files.read_tokenizer(model_dir)
    pairs, _ = load_catalog_pairs(target_lang="fr", source_lang="en")
    train, _ = split_dev(pairs, d.dev_fraction, d.dev_max_pairs, t.seed)
    dataset = make_dataset(train, tokenizer.tokenize, batch_size=t.batch_size, batch_tokens=t.batch_tokens,
                           batch_cells=t.batch_cells, max_length=d.max_length, bucket_width=d.bucket_width,
                           shuffle_buffer=d.shuffle_buffer,
                           seed=t.seed, training=True, repeat=True)
    arrays = {}
    for i, ((source, target_in), target_out) in enumerate(dataset.take(count)):
        arrays.update({f"source_{i}": source.numpy(), f"target_in_{i}": target_in.numpy(),
                       f"target_out_{i}": target_out.numpy()})
    np.savez(path, vocab_size=tokenizer.vocab_size, **arrays)
    return tokenizer.vocab_size


def step_batches(args, config):
    """(warm-up data, timed data, the timed batches as arrays): the saved real batches (``config`` then
    takes their vocabulary size, as the trainer sizes the model to its wordpieces) or one synthetic batch."""
    import numpy as np
    import tensorflow as tf

    if not args.batches:
        rng = np.random.default_rng(0)
        fixed = synthetic_batch(np, rng, args.batch or config.training.batch_size, args.min_length,
                                args.max_length, config.model.vocab_size)
        data = tf.data.Dataset.from_tensors(((fixed[0], fixed[1]), fixed[2])).repeat()
        return data, data, [fixed] * args.steps
    saved = np.load(args.batches)
    config.model.vocab_size = int(saved["vocab_size"])
    batches = [tuple(saved[f"{name}_{i}"] for name in ("source", "target_in", "target_out"))
               for i in range(args.warmup + args.steps)]

    def dataset_of(chosen):
        signature = tf.TensorSpec([None, None], tf.int32)
        return tf.data.Dataset.from_generator(lambda: (((s, i), o) for s, i, o in chosen),
                                              output_signature=((signature, signature), signature))

    return dataset_of(batches[:args.warmup]), dataset_of(batches[args.warmup:]), batches[args.warmup:]


def scheme_strategy(scheme, config, devices):
    """Sets ``config`` to what ``scheme`` times (XLA, the products' precision, model parallelism over
    ``devices``) and returns its strategy."""
    import tensorflow as tf

    config.training.jit_compile = scheme == "xla"
    config.training.product_precision = "bfloat16" if scheme in ("bfloat16", "baseline_bfloat16") else "float32"
    if scheme in ("model", "hybrid"):
        config.parallel = dataclasses.replace(config.parallel, mode=scheme, devices=devices,
                                              softmax_shards=len(devices) if scheme == "model" else 1)
    if scheme == "mirrored":
        return tf.distribute.MirroredStrategy(devices, cross_device_ops=tf.distribute.ReductionToOneDevice())
    return tf.distribute.get_strategy()


def trainer_state(config, strategy):
    """The model compiled by the Trainer's own code (:class:`gnmt_tf.training.state.TrainingState`), the
    precision its step computes in, and the callbacks ``fit`` keeps its state with."""
    from gnmt_tf.models.losses import SequenceCrossEntropy
    from gnmt_tf.models.objectives import MaximumLikelihood
    from gnmt_tf.training.state import Cluster, TrainingState

    objective = MaximumLikelihood(SequenceCrossEntropy(config.training.label_smoothing))  # what is timed
    state = TrainingState(config, objective, Cluster.of(strategy))
    return state.model, state.product_precision, state.callbacks()


def pre_state_model(config, strategy):
    """As :func:`trainer_state`, for a checkout from before gnmt_tf.training.state (a ``--baseline``): its
    pieces put together as its Trainer did."""
    from gnmt_tf.models.gnmt import GNMT
    from gnmt_tf.models.losses import SequenceCrossEntropy
    from gnmt_tf.training.optimizer import AdamThenSGD

    t = config.training
    with strategy.scope():
        model = GNMT(config.model)
        model.build()
        optimizer = AdamThenSGD.from_config_section(config)
        optimizer.build(model.trainable_variables)
        if t.product_precision == "float32":  # older code: no jit_compile or weight transform to choose
            model.compile(optimizer=optimizer, loss=SequenceCrossEntropy())
        else:
            from gnmt_tf.training.precision import training_transform

            model.compile(optimizer=optimizer, loss=SequenceCrossEntropy(),
                          weight_transform=training_transform(t.product_precision, None))
    return model, t.product_precision, []


def time_steps(model, warmup_data, timed_data, callbacks, args):
    """``fit`` over the warm-up steps, then over the timed ones, with ``callbacks``: (the warm-up's seconds,
    the timed steps' times, their fit history, the traces made during them)."""
    import tf_keras as keras

    class StepTimes(keras.callbacks.Callback):
        """Wall and CPU time of every step. A batch callback also makes fit wait for each step, as the
        trainer's own batch callbacks do; without one, fit here sometimes ran every step at a fixed
        ~1.02 s whatever the step (benchmarks/README.md, "The training step's levers")."""

        def __init__(self):
            super().__init__()
            self.wall, self.cpu = [], []

        def on_train_batch_begin(self, batch, logs=None):
            self._started = (time.perf_counter(), time.process_time())

        def on_train_batch_end(self, batch, logs=None):
            self.wall.append(time.perf_counter() - self._started[0])
            self.cpu.append(time.process_time() - self._started[1])

    started = time.perf_counter()
    model.fit(warmup_data, steps_per_epoch=args.warmup, epochs=1, verbose=0, callbacks=[*callbacks, StepTimes()])
    warmup_seconds = time.perf_counter() - started
    times = StepTimes()
    traces_before = model.train_function.experimental_get_tracing_count()
    history = model.fit(timed_data, steps_per_epoch=args.steps, epochs=1, verbose=0, callbacks=[*callbacks, times])
    # A step that traced anew would time tracing: real batches of new shapes after the warm-up
    # (Keras relaxes the shapes at the second trace, so a few warm-up batches suffice).
    return warmup_seconds, times, history, model.train_function.experimental_get_tracing_count() - traces_before


def run_worker(args) -> dict:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    scheme = args.scheme
    code = os.path.abspath(args.baseline) if scheme in BASELINE else ROOT
    sys.path.insert(0, code)
    import numpy as np
    import tensorflow as tf
    import tf_keras as keras

    tf.config.threading.set_intra_op_parallelism_threads(args.threads)
    tf.config.threading.set_inter_op_parallelism_threads(args.threads)
    if scheme not in ONE_DEVICE:
        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * args.devices)
    from gnmt_tf.config import load_config, parse_overrides
    from gnmt_tf.training.callbacks import DeltaAnnealing
    from gnmt_tf.training.schedules import DeltaSchedule

    import gnmt_tf

    if not os.path.abspath(gnmt_tf.__file__).startswith(code + os.sep):
        raise RuntimeError(f"imported {gnmt_tf.__file__}, not the package in {code}")

    # The baseline parses the overrides with its own code's parser.
    config = load_config(args.config, parse_overrides(args.overrides))
    warmup_data, timed_data, timed = step_batches(args, config)
    devices = [f"/device:CPU:{i}" for i in range(args.devices)]
    strategy = scheme_strategy(scheme, config, devices)
    keras.utils.set_random_seed(config.training.seed)
    if os.path.exists(os.path.join(code, "gnmt_tf", "training", "state.py")):
        model, precision, state_callbacks = trainer_state(config, strategy)
    else:
        model, precision, state_callbacks = pre_state_model(config, strategy)

    delta = DeltaAnnealing(DeltaSchedule.from_config_section(config, timed=False))
    warmup_seconds, times, history, traces = time_steps(model, warmup_data, timed_data, [delta, *state_callbacks],
                                                        args)
    # The fixed batch: medians of the steps, as one slow step (another job on the machine) moves them
    # little. Real batches differ, so their sum counts. CPU time is of all this process' threads: less
    # sensitive than wall time to other jobs.
    total = (lambda values: float(np.sum(values))) if args.batches else (
        lambda values: float(np.median(values)) * args.steps)
    seconds, cpu_seconds = total(times.wall), total(times.cpu)
    source_tokens = int(sum((source != 0).sum() for source, _, _ in timed))  # over the timed steps
    target_tokens = int(sum((target_out != 0).sum() for _, _, target_out in timed))
    placement = getattr(model, "placement", None)
    return {
        "traces_during_timed_steps": traces,
        "scheme": scheme,
        "code": {"tree": code, "commit": checkout_commit(code)},
        "devices": devices if scheme not in ONE_DEVICE else ["/device:CPU:0"],
        "placement": None if placement is None else {
            "encoder": list(placement.encoder), "decoder": list(placement.decoder),
            "softmax_shards": placement.softmax_shards,
        },
        "replicas": strategy.num_replicas_in_sync,
        "warmup_seconds": round(warmup_seconds, 1),
        "seconds_per_step": round(seconds / args.steps, 4),
        "source_tokens_per_second": round(source_tokens / seconds, 1),
        "target_tokens_per_second": round(target_tokens / seconds, 1),
        "cpu_seconds_per_step": round(cpu_seconds / args.steps, 4),
        "source_tokens_per_cpu_second": round(source_tokens / cpu_seconds, 1),
        "loss_after": round(float(history.history["loss"][-1]), 4),
        "jit_compile": config.training.jit_compile,
        "product_precision": precision,  # what the step computed in, as the code timed resolved it
        "TF_ENABLE_ONEDNN_OPTS": os.environ.get("TF_ENABLE_ONEDNN_OPTS"),  # "0": TensorFlow's own kernels
        "source_tokens_per_batch": round(source_tokens / args.steps, 1),  # real batches: their mean
        "target_tokens_per_batch": round(target_tokens / args.steps, 1),
        "parameters": int(sum(int(np.prod(w.shape)) for w in model.trainable_weights)),
    }


def result_rows(runs) -> list:
    """One row per scheme from its rounds (``runs``: scheme -> the workers' answers): its best round, and
    its ratios to ``default`` and to each older checkout timed."""
    rows = []
    for scheme, rounds in runs.items():
        best = max(rounds, key=lambda r: r["source_tokens_per_second"])
        rows.append({
            "scheme": scheme,
            "source_tokens_per_second": best["source_tokens_per_second"],
            "seconds_per_step": best["seconds_per_step"],
            "source_tokens_per_second_rounds": [r["source_tokens_per_second"] for r in rounds],
            "source_tokens_per_cpu_second": max(r["source_tokens_per_cpu_second"] for r in rounds),
            "rounds": rounds,
        })
    default = next((r for r in rows if r["scheme"] == "default"), None)
    for row in rows:
        row["ratio_to_default"] = (
            round(row["source_tokens_per_second"] / default["source_tokens_per_second"], 3) if default else None
        )
        row["cpu_ratio_to_default"] = (
            round(row["source_tokens_per_cpu_second"] / default["source_tokens_per_cpu_second"], 3) if default else None
        )
    for name in BASELINE:  # old against new: the speed-up of each scheme over the older code
        baseline = next((r for r in rows if r["scheme"] == name), None)
        for row in rows if baseline else ():
            row[f"ratio_to_{name}"] = round(
                row["source_tokens_per_second"] / baseline["source_tokens_per_second"], 3)
    return rows


# ---------------------------------------------------------------------------------- driver
def main(argv=None) -> int:
    args = parse_args(argv)
    if args.worker:
        print(json.dumps(run_worker(args)))
        return 0
    sys.path.insert(0, ROOT)
    from gnmt_tf.config import ConfigError, load_config, parse_overrides

    try:
        config = load_config(args.config, parse_overrides(args.overrides))
    except ConfigError as err:  # refused before any worker starts
        print(f"error: {err}", file=sys.stderr)
        return 2
    batch = args.batch or config.training.batch_size
    common = [*(f"--set={pair}" for pair in args.overrides),
              "--config", args.config, "--batch", str(batch), "--min-length", str(args.min_length),
              "--max-length", str(args.max_length), "--warmup", str(args.warmup), "--steps", str(args.steps),
              "--devices", str(args.devices)] + (["--baseline", args.baseline] if args.baseline else [])
    if args.real_batches:
        scratch = tempfile.TemporaryDirectory(prefix="real_batches")  # removed when the measurement ends
        batches_path = os.path.join(scratch.name, "batches.npz")
        save_real_batches(args.real_batches, config, args.warmup + args.steps, batches_path)
        common += ["--batches", batches_path]
    runs = {scheme: [] for scheme in args.schemes}
    for round_number in range(args.rounds):
        # Alternating order (ABCD, DCBA, ...): other jobs on the machine skew whichever runs when they do.
        order = args.schemes if round_number % 2 == 0 else list(reversed(args.schemes))
        for scheme in order:
            print(f"round {round_number + 1}, scheme {scheme}:", file=sys.stderr, flush=True)
            try:
                answer, info = run_in_worker_process(__file__, args.threads, [*common, "--scheme", scheme],
                                                     timeout=1800, env=WORKER_ENVIRONMENT.get(scheme))
            except WorkerFailed as err:
                print(err, file=sys.stderr)
                return 1
            answer["worker"] = info
            runs[scheme].append(answer)
            print(json.dumps(answer), file=sys.stderr, flush=True)
    rows = result_rows(runs)
    model = config.model
    report = {
        "benchmark": "training throughput (source tokens/s) of the parallel schemes and the one-device levers, "
                     + (f"real batches of the built-in data (wordpieces of {args.real_batches})" if args.real_batches
                        else "one fixed synthetic batch"),
        "cpu_count": os.cpu_count(),
        "processor": platform.processor() or platform.machine(),
        "cpu": cpu_description(),
        "threads": args.threads,
        "config": args.config,
        "overrides": args.overrides,
        "model": {
            "vocab_size": model.vocab_size, "units": model.units, "encoder_layers": model.encoder_layers,
            "decoder_layers": model.decoder_layers, "attention_units": model.attention_units,
            "dropout": model.dropout, "input_feeding": model.input_feeding,
        },
        "batch": batch,
        "lengths": None if args.real_batches else [args.min_length, args.max_length],
        "warmup_steps": args.warmup,
        "timed_steps": args.steps,
        "logical_devices": args.devices,
        "rounds": args.rounds,
        "results": rows,
    }
    if args.note:
        report["note"] = args.note
    write_report(args.output, report)
    for r in rows:
        loads = [run["worker"]["load_average_before"][0] for run in r["rounds"]]
        # Each ratio there is: to default, and to each older checkout timed.
        keys = ("ratio_to_default", *(f"ratio_to_{name}" for name in BASELINE))
        ratios = "".join(f"  x{r[key]} vs {key[len('ratio_to_'):]}" for key in keys if r.get(key) is not None)
        print(
            f"{r['scheme']:>17}: {r['source_tokens_per_second']:8.1f} source tokens/s (best of "
            f"{r['source_tokens_per_second_rounds']})  {r['seconds_per_step']:.3f} s/step{ratios}  "
            f"{r['source_tokens_per_cpu_second']:7.1f} per CPU-second"
            f"{'' if r['cpu_ratio_to_default'] is None else ' x' + str(r['cpu_ratio_to_default'])}"
            f"  (1-min load before each round: {loads})"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
