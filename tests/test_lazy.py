"""The packages' public names are imported on first use: importing a package loads no TensorFlow,
every listed name resolves to the object of the module the table names, and others raise."""

import importlib
import subprocess
import sys

import pytest
from helpers import ROOT

PACKAGES = ("gnmt_tf", "gnmt_tf.decoding", "gnmt_tf.training")


def test_importing_the_packages_loads_no_tensorflow():
    code = "import sys; " + "; ".join(f"import {p}" for p in PACKAGES) + "; print('tensorflow' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == "False"


@pytest.mark.parametrize("package", PACKAGES)
def test_every_public_name_resolves_to_its_modules_object(package):
    module = importlib.import_module(package)
    assert dir(module) == sorted(module.__all__) and module.__all__  # dir() sorts what __dir__ gives
    for name, source in module._PUBLIC.items():
        assert getattr(module, name) is getattr(importlib.import_module(source), name), name
    with pytest.raises(AttributeError, match=f"module '{package}' has no attribute 'no_such_name'"):
        module.no_such_name


def test_the_top_package_gives_keras_2():
    import gnmt_tf
    import tf_keras

    assert gnmt_tf.keras is tf_keras and {"keras", "__version__"} <= set(gnmt_tf.__all__)
