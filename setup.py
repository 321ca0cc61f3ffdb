"""gnmt_tf: Google's Neural Machine Translation system (Wu et al. 2016) on TensorFlow/Keras."""

import os
import re
import runpy

from setuptools import find_packages, setup

HERE = os.path.dirname(os.path.abspath(__file__))


def read_version() -> str:
    with open(os.path.join(HERE, "gnmt_tf", "__init__.py"), encoding="utf-8") as handle:
        return re.search(r'^__version__ = "([^"]+)"', handle.read(), re.M).group(1)


# One consistent TensorFlow family: tensorflow-text, tf-keras and tensorflow-serving-api
# must match TensorFlow's minor version, or their ops and protos do not load.
INSTALL_REQUIRES = [
    "tensorflow==2.21.*",
    "tensorflow-text==2.21.*",
    "tf-keras==2.21.*",
    "tensorflow-model-optimization==0.8.*",
    "tensorflow-serving-api==2.21.*",
    "tensorboard>=2.20",  # tf.summary needs it to write scalars; TF 2.21 no longer installs it
    "ai-edge-litert==2.3.*",  # the TFLite interpreter that can register the tensorflow-text ops
    "matplotlib>=3.8",  # attention alignment pictures and training curves
    "sacrebleu>=2,<3",
    "sentencepiece>=0.2,<0.3",  # its fast BPE trainer learns the wordpiece inventory
    "PyYAML>=6",
]

EXTRAS_REQUIRE = {
    "dev": [
        "pytest>=8",
        "pytest-xdist>=3",  # the suite runs on two workers (pyproject.toml)
        "filelock>=3",  # lets the xdist workers share one checked fixture model and its exports (tests/conftest.py)
        "hypothesis>=6",
        "nbclient>=0.10",  # runs examples/quickstart.ipynb in the tests
        "nbformat>=5",
        "ipykernel>=6",
        "polib>=1.2",  # benchmarks/heldout_catalogs.py reads the .po catalogs of the held-out check
    ],
    "tfds": ["tensorflow-datasets>=4.9"],  # --train tfds:NAME (docs/own_data.md)
    "cuda": ["tensorflow[and-cuda]==2.21.*"],  # TensorFlow's CUDA build for GPUs (docs/gpus.md)
}

# One console script per command, with a common prefix, as fairseq (fairseq-train, fairseq-generate) and
# OpenNMT-tf (onmt-main, onmt-build-vocab) ship theirs; `python -m MODULE` runs the same command. The
# commands are listed once, in gnmt_tf/cli/commands.py, run here as a file rather than imported: setup.py
# runs before gnmt_tf's requirements are installed, and that file needs none of them.
COMMAND_REGISTRY = os.path.join(HERE, "gnmt_tf", "cli", "commands.py")
CONSOLE_SCRIPTS = runpy.run_path(COMMAND_REGISTRY)["console_scripts"]()

setup(
    name="gnmt_tf",
    version=read_version(),
    description="Google's Neural Machine Translation system (GNMT) on TensorFlow: train, serve, run on device",
    long_description=open(os.path.join(HERE, "README.md"), encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    license="Apache-2.0",
    python_requires=">=3.10",
    # configs/ is installed as gnmt_tf/configs so that named configs ("small", "tiny",
    # "gnmt_wmt14_enfr") resolve after a plain `pip install .` too.
    packages=find_packages(include=["gnmt_tf", "gnmt_tf.*", "export", "export.*", "serving", "serving.*"])
    + ["gnmt_tf.configs"],
    package_dir={"gnmt_tf.configs": "configs"},
    package_data={
        "gnmt_tf.configs": ["*.yaml"],
        "serving": ["models.config", "batching_parameters.txt", "run_tf_serving.sh"],
        "export": ["tf_serving_ops_*.txt"],  # the ops TF Serving's runtime registers (export/serving_runtime.py)
    },
    install_requires=INSTALL_REQUIRES,
    extras_require=EXTRAS_REQUIRE,
    entry_points={"console_scripts": CONSOLE_SCRIPTS},
    classifiers=[
        "Programming Language :: Python :: 3",
        "Topic :: Scientific/Engineering :: Artificial Intelligence",
    ],
)
