import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# One thread per TensorFlow: the suite runs two xdist workers (and their child processes) on two
# cores, and the tiny models here gain nothing from a second thread. Measured on the fixture model's
# training: 54 s and 61 CPU-seconds single-threaded, 63 s and 78 CPU-seconds with the default two.
# Before TensorFlow initializes; child processes inherit it.
os.environ.setdefault("TF_NUM_INTRAOP_THREADS", "1")
os.environ.setdefault("TF_NUM_INTEROP_THREADS", "1")
# tf.keras as tf-keras, as the commands start TensorFlow (gnmt_tf.cli.scaffold.start_tensorflow): no Keras 3
# import in each worker and child process.
os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")

import numpy as np  # noqa: E402
import pytest  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)
TESTS = os.path.dirname(os.path.abspath(__file__))
# tests/ and its package directories (tests/<package>/, no __init__.py; file names unique across
# the tree), so that helpers and shared setups import by module name wherever a test lives.
for directory in [TESTS] + sorted(
    entry.path for entry in os.scandir(TESTS) if entry.is_dir() and not entry.name.startswith((".", "_"))
):
    if directory not in sys.path:
        sys.path.insert(0, directory)


@pytest.fixture
def rng():
    return np.random.default_rng(0)


@pytest.fixture(scope="session", autouse=True)
def _graph_optimizer_off():
    """Grappler off in the processes that run tests, as in the distributed and model-parallel children.

    Its passes over every traced step and search cost about a tenth of the in-process tests' CPU time
    (measured on the translator, training and shortlist tests: 135 -> 122 CPU-s), and no test's claim
    depends on them. What ships runs with Grappler: the commands the tests start as processes (the
    documented commands, the serving servers, the train command, TF Serving's runtime) keep it, and
    GNMT_TESTS_GRAPPLER=1 keeps it here too.
    """
    if os.environ.get("GNMT_TESTS_GRAPPLER") != "1":
        import tensorflow as tf

        tf.config.optimizer.set_experimental_options({"disable_meta_optimizer": True})
    yield


@pytest.fixture(autouse=True)
def _seed_everything(request):
    """Every test starts from the same random state, whichever worker runs it and whatever ran before.

    Reseeding TensorFlow also clears its kernel caches (the stateful random kernels restart their
    streams only so), and with them every instantiated function: the next call of a module's
    translator or of a loaded SavedModel builds its kernels again. Files that draw no random numbers
    (they translate with the trained fixtures) say ``pytestmark = pytest.mark.draws_nothing_random``
    and keep the caches (without reseeding, ten files that translate with those fixtures took 142.6
    CPU-s instead of 161.8).
    """
    import tf_keras as keras

    if request.node.get_closest_marker("draws_nothing_random") is None:
        keras.utils.set_random_seed(1234)
    yield


def _built_once_per_run(tmp_path_factory, name, build):
    """``build(directory)`` once per test run, shared by every pytest-xdist worker.

    Each xdist worker is a process with session fixtures of its own, so a trained or
    exported model would be built once per worker. The first worker to arrive builds it
    under a file lock in the run's shared temporary directory and pickles what ``build``
    returned; the others wait for the lock and load that. Without xdist it simply builds.

    GNMT_TESTS_KEEP_BUILT=<directory> keeps what is built there across runs, for someone
    re-running a few test files while working on them (the exports take a minute each);
    delete the directory when the code that builds them changes.
    """
    kept = os.environ.get("GNMT_TESTS_KEEP_BUILT")
    if os.environ.get("PYTEST_XDIST_WORKER") is None and not kept:
        return build(tmp_path_factory.mktemp(name))
    import pathlib
    import pickle
    import shutil

    from filelock import FileLock

    # one directory per run, above the workers', or the one kept across runs
    shared = pathlib.Path(kept) if kept else tmp_path_factory.getbasetemp().parent
    shared.mkdir(parents=True, exist_ok=True)
    directory, result = shared / name, shared / f"{name}.pickle"
    with FileLock(str(shared / f"{name}.lock")):
        if result.is_file():
            return pickle.loads(result.read_bytes())
        shutil.rmtree(directory, ignore_errors=True)  # a build that failed in another worker
        directory.mkdir()
        value = build(directory)
        result.write_bytes(pickle.dumps(value))
        return value


@pytest.fixture(scope="session")
def trained_number_model(tmp_path_factory):
    """A tiny GNMT trained on the number-word task (English -> French digits): (model_dir, NumberModelRun).

    The trained model kept in tests/assets/number_model/ (tests/number_model.py made it and says why),
    copied and checked against its stated quality once per run. Shared by the tests that need a model
    that really translates (beam search through the Translator, the translate/evaluate/export command
    lines, serving). Tests must not write into the model directory: copy it first.
    """
    from number_model import acceptance_report, load_checked

    model_dir, run = _built_once_per_run(tmp_path_factory, "number_model", load_checked)
    # The check's figures and the margin recorded with the asset, for the run's closing summary.
    (_run_directory(tmp_path_factory) / ACCEPTANCE_REPORT).write_text(
        acceptance_report(run.checked, run.acceptance) + "\n", encoding="utf-8")
    return model_dir, run


ACCEPTANCE_REPORT = "number_model_acceptance.txt"  # in the run's directory: what the fixture's check measured


def _run_directory(tmp_path_factory):
    """The directory of this test run: above the xdist workers' own, or the only process's."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def pytest_terminal_summary(terminalreporter, config):
    """The fixture model's acceptance figures, measured by whichever process checked it, and its recorded
    margin."""
    factory = getattr(config, "_tmp_path_factory", None)
    if factory is None or os.environ.get("PYTEST_XDIST_WORKER"):
        return
    report = factory.getbasetemp() / ACCEPTANCE_REPORT
    if report.is_file():
        terminalreporter.write_line(report.read_text(encoding="utf-8").strip())


@pytest.fixture(scope="session")
def exported_number_model(trained_number_model, tmp_path_factory):
    """The fixture model exported once as a SavedModel by ``python -m export``; returns the version directory.

    Its base path (the version directory's parent) holds that version alone. Tests that need a
    model base path of their own copy it (``copy_version``) rather than exporting again: an export
    (trace, save, check) takes tens of seconds.
    """
    model_dir, _ = trained_number_model
    return _built_once_per_run(tmp_path_factory, "exported", lambda directory: _export_float(model_dir, directory))


def _export_float(model_dir, directory):
    from helpers import run_in_process

    base = str(directory / "gnmt")
    # The command line, run in this process (it spares a TensorFlow start); what it prints is checked here.
    result = run_in_process([sys.executable, "-m", "export", "--model-dir", model_dir, "--output", base,
                             "--format", "saved_model"])
    assert result.returncode == 0, result.stderr[-3000:]
    assert "checked: 10 sentences translate identically" in result.stdout  # 8 dev sentences + 2 edge cases
    # The op check of TF Serving's runtime ran (tests/export/test_serving_runtime.py tests it).
    assert "checked: every op is registered by TF Serving 2.20.0 (TensorFlow 2.20" in result.stdout
    assert f"exported {os.path.join(base, '1')}" in result.stdout
    import json

    from gnmt_tf import model_files

    with open(os.path.join(base, "1", "export.json"), encoding="utf-8") as handle:  # what it was made from
        metadata = json.load(handle)
    assert metadata["checkpoint"] == os.path.abspath(model_files.find_checkpoint(model_dir, "best"))
    assert (metadata["format"], metadata["quantize"], metadata["checkpoint_choice"]) == ("saved_model", "none", "best")
    return os.path.join(base, "1")


# The largest dev BLEU an int8 export of the fixture model may lose. Its dev and test splits are 100
# sentences of a few words, where one word translated differently moves corpus BLEU by about 0.5, the
# exporter's default tolerance (sized for real test sets): a test of the mechanism must not fail on one word.
INT8_BLEU_TOLERANCE = 1.0

# name: the fixture model's int8 exports, each made once through the command line: (format, options)
INT8_EXPORTS = {
    "saved_model": ("saved_model", []),  # int8 weights, dequantized once per request (the default)
    "saved_model_int8_products": ("saved_model", ["--int8-products", "int8"]),  # section 6's int8 x int8
    "tflite": ("tflite", []),
}


@pytest.fixture(scope="session")
def int8_exports(trained_number_model, tmp_path_factory):
    """The int8 exports of INT8_EXPORTS (tflite only where its interpreter is installed), made once per run.

    Through the command line, in this process (one TensorFlow start less per export); each checks its
    dev BLEU itself. Returns
    (model_dir, {name: version directory}). Checked in tests/export/test_export_int8.py, and
    loaded in TF Serving's runtime by tests/export/test_serving_runtime.py.
    """
    model_dir, _ = trained_number_model
    return _built_once_per_run(tmp_path_factory, "int8_exports", lambda base: (model_dir, _export_int8(model_dir, base)))


def _export_int8(model_dir, base):
    import importlib.util

    from helpers import run_each_in_process

    wanted = {name: spec for name, spec in INT8_EXPORTS.items()
              if spec[0] != "tflite" or importlib.util.find_spec("ai_edge_litert")}
    commands = [([sys.executable, "-m", "export", "--model-dir", model_dir, "--output", str(base / name),
                  "--format", format_name, "--quantize", "int8", "--bleu-tolerance", str(INT8_BLEU_TOLERANCE),
                  *options], None)
                for name, (format_name, options) in wanted.items()]
    paths = {}
    for name, result in zip(wanted, run_each_in_process(*commands)):
        assert result.returncode == 0, (name, result.stderr[-3000:])
        assert "checked: dev BLEU float" in result.stdout  # the exporter's own gate, on dev.tsv
        paths[name] = os.path.join(base, name, "1")
    return paths


def copy_version(version_dir, base, version=1):
    """Copy an exported version into ``base/<version>``; returns ``base``."""
    import shutil

    shutil.copytree(version_dir, os.path.join(base, str(version)))
    return base


# The test files that take longest, in the order they start (pyproject.toml runs the suite on
# xdist workers, a file at a time, with --no-loadscope-reorder so that this order holds): the
# longest first, so that the workers finish together instead of one running a long file alone at
# the end. By their measured times (seconds, summed over a file's tests, on a 2-core CPU without
# AVX-512, 2026-11-27): the files left out take under 10 s each and start after these, in their
# collection order.
LONGEST_FILES_FIRST = (
    "test_distributed.py",  # 131
    "test_training.py", "test_docs.py", "test_export_int8.py",  # 72, 71, 60
    "test_serving_server.py", "test_notebook.py", "test_reinforce.py", "test_qat.py",  # 49, 48, 45, 44
    "test_export_placeholders.py",  # 45 (2026-11-29)
    "test_train_cli.py", "test_export_shortlist.py",  # 37, 36
    # after the exports it loads, so that it finds them made and, on a new machine, TF Serving's
    # runtime built meanwhile in the background (below)
    "test_serving_runtime.py",  # 31
    "test_model_parallel.py", "test_export_cli.py", "test_objectives.py",  # 29, 29, 29
    "test_export_saved_model.py", "test_model.py", "test_translator.py", "test_alignment.py",  # 27 .. 25
    "test_averaging.py",  # 22
    "test_plots.py", "test_tokenizer.py", "test_dev_figure.py",  # 20, 18, 17
    "test_tied_embeddings.py",  # 16 (CPU-seconds, measured 2026-11-29 beside a training run)
    "test_product_kernels.py", "test_step_identities.py",  # 15
    "test_beam_search.py", "test_serving_client.py", "test_average.py", "test_shape_buckets.py",  # 15 .. 12
    "test_train_placeholders.py", "test_in_graph.py",  # 13, 12 (2026-11-29)
    "test_search_option_flags.py", "test_precision.py", "test_data.py", "test_scoring.py",  # 11
    "test_export_tflite.py", "test_concurrent_weight_transforms.py", "test_quiet_start.py",  # 10
)


def pytest_collection_modifyitems(items):
    rank = {name: position for position, name in enumerate(LONGEST_FILES_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))


# tests/export/test_serving_runtime.py loads the exports in TF Serving's runtime: a Python environment
# of TensorFlow 2.20 that pip takes one to two minutes of CPU to build on a new machine (it is cached
# after that). Its build starts with the session, in a process at the lowest CPU priority, so that
# it runs on the CPU time the tests leave (while they wait for a fixture, a server, a subprocess's
# start) instead of on a worker's; the test waits for it there (export/serving_runtime.py: ensure_venv).
SERVING_RUNTIME_TEST = "test_serving_runtime.py"
RUNTIME_BUILD = pytest.StashKey()


def pytest_collection_finish(session):
    if session.config.option.collectonly or os.environ.get("PYTEST_XDIST_WORKER", "gw0") != "gw0":
        return  # one process starts it: the only one, or the first xdist worker
    if any(item.path.name == SERVING_RUNTIME_TEST for item in session.items):
        from export.serving_runtime import start_venv_build

        session.config.stash[RUNTIME_BUILD] = start_venv_build()


def pytest_sessionfinish(session, exitstatus):
    build = session.config.stash.get(RUNTIME_BUILD, None)
    if build is None:
        return
    # Running still when this worker is done: the other worker's test may need it, so let it finish
    # (its watchdog bounds it), unless the run was interrupted.
    if exitstatus == pytest.ExitCode.INTERRUPTED and build.poll() is None:
        import contextlib
        import signal

        with contextlib.suppress(ProcessLookupError):  # it may have ended since
            os.killpg(build.pid, signal.SIGKILL)
    build.wait()
