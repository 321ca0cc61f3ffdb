import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

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


@pytest.fixture(autouse=True)
def _seed_everything():
    import tf_keras as keras

    keras.utils.set_random_seed(1234)
    yield



def _built_once_per_run(tmp_path_factory, name, build):
    """``build(directory)`` once per test run, shared by every pytest-xdist worker.

    Each xdist worker is a process with session fixtures of its own, so a trained or
    exported model would be built once per worker. The first worker to arrive builds it
    under a file lock in the run's shared temporary directory and pickles what ``build``
    returned; the others wait for the lock and load that. Without xdist it simply builds.
    """
    if os.environ.get("PYTEST_XDIST_WORKER") is None:
        return build(tmp_path_factory.mktemp(name))
    import pickle
    import shutil

    from filelock import FileLock

    shared = tmp_path_factory.getbasetemp().parent  # one directory per run, above the workers'
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
    """A tiny GNMT trained for ~1000 steps on the number-word task (English -> French digits).

    Shared by the tests that need a model that really translates (training, beam search
    through the Translator, the translate/evaluate command lines). Returns (model_dir, result).
    Tests must not write into the model directory: copy it first.
    """
    return _built_once_per_run(tmp_path_factory, "number_model", _train_number_model)


def _train_number_model(tmp_path):
    import tf_keras as keras

    from test_training import tiny_number_setup
    from gnmt_tf import model_dir as layout
    from gnmt_tf.training.trainer import Trainer

    keras.utils.set_random_seed(1234)
    config, model_dir, train_pairs, dev_pairs, tokenizer = tiny_number_setup(tmp_path, steps=1000)
    trainer = Trainer(config, model_dir, train_pairs, dev_pairs, tokenizer, log=lambda m: None, verbose=0)
    result = trainer.train()
    # dev.tsv as python -m gnmt_tf.train keeps it with the model (the int8 exporter checks its BLEU
    # on it); test.tsv is held out from both, so that a test measuring on it is independent of them.
    layout.write_dev_split(model_dir, dev_pairs)
    with open(f"{model_dir}/test.tsv", "w", encoding="utf-8") as handle:
        for source, target in held_out_number_pairs(100, train_pairs + dev_pairs):
            handle.write(f"{source}\t{target}\n")
    return model_dir, result


def held_out_number_pairs(count, seen_pairs):
    """``count`` distinct number-task pairs whose sources are not among ``seen_pairs``' sources."""
    from helpers import number_word_pairs

    seen = {source for source, _ in seen_pairs}
    held_out = {}
    for source, target in number_word_pairs(20 * count, seed=3, min_len=1):
        if source not in seen:
            held_out.setdefault(source, target)
    assert len(held_out) >= count, "too few unseen pairs: draw more"
    return list(held_out.items())[:count]


@pytest.fixture(scope="session")
def exported_number_model(trained_number_model, tmp_path_factory):
    """The fixture model exported once as a SavedModel; returns the version directory.

    Tests that need a model base path of their own copy it (``copy_version``) rather than
    exporting again: an export (trace, save, check) takes tens of seconds.
    """
    from export.exporters import ExportRequest, export

    model_dir, _ = trained_number_model
    return _built_once_per_run(
        tmp_path_factory, "exported",
        lambda directory: export(ExportRequest(model_dir=model_dir, output=str(directory / "gnmt"), version=1,
                                               log=lambda message: None), "saved_model"))


def copy_version(version_dir, base, version=1):
    """Copy an exported version into ``base/<version>``; returns ``base``."""
    import shutil

    shutil.copytree(version_dir, os.path.join(base, str(version)))
    return base



# The test files that take longest, in the order they start (pyproject.toml runs the suite on two
# xdist workers, a file at a time, with --no-loadscope-reorder so that this order holds): the
# longest first, so that the workers finish together instead of one running a long file alone at
# the end. The first file needs no trained fixture model, so its worker does not sit idle while
# the other one trains it (the second file's first test).
LONGEST_FILES_FIRST = (
    "test_notebook.py", "test_training.py", "test_distributed.py", "test_train_cli.py", "test_docs.py",
    "test_serving_server.py", "test_export_int8.py", "test_export_saved_model.py", "test_export_cli.py",
    "test_export_shortlist.py", "test_translator.py", "test_qat.py", "test_reinforce.py", "test_plots.py",
    "test_translate_cli.py", "test_evaluate_cli.py", "test_shortlist_cli.py", "test_summary_cli.py",
)


def pytest_collection_modifyitems(items):
    rank = {name: position for position, name in enumerate(LONGEST_FILES_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))
