import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import pytest  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)
TESTS = os.path.dirname(os.path.abspath(__file__))
if TESTS not in sys.path:
    sys.path.insert(0, TESTS)


@pytest.fixture
def rng():
    return np.random.default_rng(0)


@pytest.fixture(autouse=True)
def _seed_everything():
    import tf_keras as keras

    keras.utils.set_random_seed(1234)
    yield



@pytest.fixture(scope="session")
def trained_number_model(tmp_path_factory):
    """A tiny GNMT trained for ~1000 steps on the number-word task (English -> French digits).

    Shared by the tests that need a model that really translates (training, beam search
    through the Translator, the translate/evaluate command lines). Returns (model_dir, result).
    """
    import tf_keras as keras

    from test_training import tiny_number_setup
    from gnmt_tf.training import Trainer

    keras.utils.set_random_seed(1234)
    tmp_path = tmp_path_factory.mktemp("number_model")
    config, model_dir, train_pairs, dev_pairs, tokenizer = tiny_number_setup(tmp_path, steps=1000)
    trainer = Trainer(config, model_dir, train_pairs, dev_pairs, tokenizer, log=lambda m: None, verbose=0)
    result = trainer.train()
    for name in ("test.tsv", "dev.tsv"):  # dev.tsv as python -m gnmt_tf.train keeps it with the model
        with open(f"{model_dir}/{name}", "w", encoding="utf-8") as handle:
            for source, target in dev_pairs:
                handle.write(f"{source}\t{target}\n")
    return model_dir, result


@pytest.fixture(scope="session")
def exported_number_model(trained_number_model, tmp_path_factory):
    """The fixture model exported once as a SavedModel; returns the version directory.

    Tests that need a model base path of their own copy it (``copy_version``) rather than
    exporting again: an export (trace, save, check) takes tens of seconds.
    """
    from export.exporters import ExportRequest, export

    model_dir, _ = trained_number_model
    base = str(tmp_path_factory.mktemp("exported") / "gnmt")
    return export(ExportRequest(model_dir=model_dir, output=base, version=1, log=lambda message: None),
                  "saved_model")


def copy_version(version_dir, base, version=1):
    """Copy an exported version into ``base/<version>``; returns ``base``."""
    import shutil

    shutil.copytree(version_dir, os.path.join(base, str(version)))
    return base

