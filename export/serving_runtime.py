"""TF Serving's runtime: the TensorFlow and tensorflow-text it links, the ops they register, and
a Python environment of those versions in which an export can be loaded and called.

gnmt_tf builds and exports with a newer TensorFlow than the newest TF Serving release links
(TF Serving 2.20.0 links TensorFlow 2.20 and, pinned in its ``tensorflow_serving/workspace.bzl``,
tensorflow-text 2.20.0). A SavedModel that uses an op this runtime does not register fails to
load there, so every export is checked against the op list of that runtime
(``tf_serving_ops_<version>.txt`` beside this file), which this module also regenerates.

Command line (``python -m export.serving_runtime COMMAND``):

* ``venv``: build (or find) the runtime's environment and print its Python;
* ``write-ops``: regenerate the op list from the runtime's environment;
* ``check VERSION_DIR...``: load exports in the runtime, replay their warm-up requests there and
  here, and report whether both give the same translations.

``call`` is what this file does when it runs inside the runtime's environment,
which has TensorFlow and tensorflow-text only. So this module imports nothing but the standard
library at its top, and nothing of gnmt_tf anywhere.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import shutil
import subprocess
import sys
import time
from typing import Dict, Iterable, List, Optional, Sequence

TF_SERVING_RELEASE = "2.20.0"  # the tensorflow/serving release (and container tag) this pairs with
TENSORFLOW = "2.20"  # the TensorFlow that release links
TENSORFLOW_TEXT = "2.20"  # the tensorflow-text it pins (workspace.bzl: org_tensorflow_text, text-2.20.0)
OPS_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), f"tf_serving_ops_{TENSORFLOW}.txt")
# Registered by every TensorFlow, but their kernels call back into the Python interpreter that
# built the graph (tf.py_function, tf.numpy_function), which TF Serving does not have.
PYTHON_ONLY_OPS = frozenset({"PyFunc", "PyFuncStateless", "EagerPyFunc"})

REQUIREMENTS = (f"tensorflow=={TENSORFLOW}.*", f"tensorflow-text=={TENSORFLOW_TEXT}.*")  # and nothing else
VENV_VARIABLE = "GNMT_TF_SERVING_RUNTIME_VENV"  # where the runtime's environment is (built there if absent)
VENV_TIMEOUT = 120  # s, python -m venv
PIP_TIMEOUT = 900  # s, pip install: minutes, more on a busy machine
RUN_TIMEOUT = 600  # s, one process in the runtime (a TensorFlow start, loading and calling exports)
LOCK_TIMEOUT = VENV_TIMEOUT + PIP_TIMEOUT + 2 * RUN_TIMEOUT  # s, waiting for another process's build


class RuntimeUnavailable(RuntimeError):
    """The runtime's environment could not be built here: python -m venv or pip failed (no network?)."""


# ---------------------------------------------------------------------------------------- the op list
def serving_ops(path: str = OPS_FILE) -> frozenset:
    """The op names of the committed list (``#`` lines are its header)."""
    with open(path, encoding="utf-8") as handle:
        return frozenset(line.strip() for line in handle if line.strip() and not line.startswith("#"))


def read_saved_model(version_dir: str):
    """The ``SavedModel`` proto of ``version_dir/saved_model.pb``."""
    from tensorflow.core.protobuf import saved_model_pb2

    saved_model = saved_model_pb2.SavedModel()
    with open(os.path.join(version_dir, "saved_model.pb"), "rb") as handle:
        saved_model.ParseFromString(handle.read())
    return saved_model


def saved_model_nodes(version_dir: str) -> Dict[str, list]:
    """The NodeDefs of every graph a loader instantiates: each meta graph's graph and every function of
    its library (tf.functions, loop bodies and conditions, the signatures' traced functions), by where
    they are: ``"graph"`` or the function's name."""
    nodes: Dict[str, list] = {}
    for meta_graph in read_saved_model(version_dir).meta_graphs:
        nodes.setdefault("graph", []).extend(meta_graph.graph_def.node)
        for function in meta_graph.graph_def.library.function:
            nodes.setdefault(function.signature.name, []).extend(function.node_def)
    return nodes


def unregistered_ops(version_dir: str, allowed: Optional[Iterable[str]] = None) -> Dict[str, List[str]]:
    """Ops of the SavedModel that ``allowed`` (default: the committed list) lacks, each with where it is used."""
    allowed = serving_ops() if allowed is None else frozenset(allowed)
    missing: Dict[str, List[str]] = {}
    for place, nodes in saved_model_nodes(version_dir).items():
        for op in sorted({node.op for node in nodes} - allowed):
            missing.setdefault(op, []).append(place)
    return dict(sorted(missing.items()))


def runtime_name() -> str:
    return f"TF Serving {TF_SERVING_RELEASE} (TensorFlow {TENSORFLOW} with tensorflow-text {TENSORFLOW_TEXT})"


# ---------------------------------------------------------------------------------------- the environment
def default_venv_path() -> str:
    """``$GNMT_TF_SERVING_RUNTIME_VENV``, else the user cache, keyed by the versions and this Python."""
    if os.environ.get(VENV_VARIABLE):
        return os.path.abspath(os.environ[VENV_VARIABLE])
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    python = f"py{sys.version_info.major}.{sys.version_info.minor}"
    return os.path.join(cache, "gnmt_tf", "serving-runtime", f"tf{TENSORFLOW}-text{TENSORFLOW_TEXT}-{python}")


def venv_python(path: str) -> str:
    return os.path.join(path, "bin", "python")


def runtime_env() -> Dict[str, str]:
    """The environment of processes in the runtime: no PYTHONPATH (nothing of this checkout), quiet TF.

    Nor TF_USE_LEGACY_KERAS, which the commands (and importing tensorflow-model-optimization) set: it
    makes TensorFlow import tf-keras, which the runtime, like TF Serving, does not have.
    """
    env = {name: value for name, value in os.environ.items()
           if not name.startswith("PYTHON") and name != "TF_USE_LEGACY_KERAS"}
    return dict(env, TF_CPP_MIN_LOG_LEVEL="2")


@contextlib.contextmanager
def _exclusive(path: str, timeout: float):
    """An flock on ``path.lock``: one build of ``path`` at a time; the kernel releases it if its holder dies."""
    with open(path + ".lock", "a") as handle:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"another process has been building {path} for over {timeout:.0f} s")
                time.sleep(1)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _run_build_step(argv: Sequence[str], timeout: float, what: str) -> None:
    try:
        result = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, env=runtime_env(),
                                stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise RuntimeUnavailable(f"{what} did not finish within {timeout} s") from None
    if result.returncode != 0:
        output = (result.stderr.strip() or result.stdout.strip())[-1500:]
        raise RuntimeUnavailable(f"{what} failed (exit status {result.returncode}): {output}")


def ensure_venv(path: Optional[str] = None, log=lambda message: None,
                requirements: Sequence[str] = REQUIREMENTS) -> str:
    """The Python of the runtime's environment at ``path`` (default: :func:`default_venv_path`), built if absent.

    Built in ``PATH.partial`` (pip installs ``requirements``) and renamed to ``PATH`` only once
    TensorFlow and tensorflow-text import there with the right versions, so an existing ``PATH`` is
    a complete one, and an interrupted build is started again rather than reused. Concurrent callers
    wait for one build (an flock). Raises :class:`RuntimeUnavailable` when venv or pip fails, and
    RuntimeError when what they built is wrong.
    """
    path = os.path.abspath(path or default_venv_path())
    if os.path.isdir(path):
        return venv_python(path)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with _exclusive(path, LOCK_TIMEOUT):
        if os.path.isdir(path):  # built by another process while this one waited
            return venv_python(path)
        partial = path + ".partial"
        shutil.rmtree(partial, ignore_errors=True)  # an interrupted build
        log(f"building {runtime_name()}'s environment in {path}")
        try:
            # Without a pip of its own (ensurepip would only cost CPU): this Python's pip installs into it.
            _run_build_step([sys.executable, "-m", "venv", "--without-pip", partial], VENV_TIMEOUT, "python -m venv")
            _run_build_step([sys.executable, "-m", "pip", "--python", venv_python(partial), "install", "--no-input",
                             "--retries", "2", "--timeout", "60", *requirements],
                            PIP_TIMEOUT, f"pip install {' '.join(requirements)}")
            runtime = call_in_runtime(venv_python(partial), {})
            if not (runtime["tensorflow"].startswith(TENSORFLOW + ".")
                    and runtime["tensorflow_text"].startswith(TENSORFLOW_TEXT + ".")):
                raise RuntimeError(f"pip installed TensorFlow {runtime['tensorflow']} and tensorflow-text "
                                   f"{runtime['tensorflow_text']} in {partial}, not {TENSORFLOW} and {TENSORFLOW_TEXT}")
            os.rename(partial, path)
        finally:
            shutil.rmtree(partial, ignore_errors=True)  # a failed build: nothing half-made stays
        log(f"built {path}")
    return venv_python(path)


def start_venv_build(path: Optional[str] = None, watchdog_seconds: int = LOCK_TIMEOUT):
    """Start :func:`ensure_venv` in a process of its own at the lowest CPU priority; None if built already.

    For a caller that needs the environment later and has other work meanwhile (the test suite):
    the build then uses the CPU time that other work leaves, and a later :func:`ensure_venv` waits
    for it. Coreutils ``timeout`` ends it after ``watchdog_seconds`` even if its starter died.
    """
    path = os.path.abspath(path or default_venv_path())
    if os.path.isdir(path):
        return None
    return subprocess.Popen(
        ["timeout", "-k", "10", str(watchdog_seconds), "nice", "-n", "19",
         sys.executable, "-I", os.path.abspath(__file__), "venv", "--path", path],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)


# ---------------------------------------------------------------------------------------- inside the runtime
def _registered_ops() -> List[str]:
    """Every op this process's TensorFlow registers, with tensorflow-text's ops loaded."""
    import tensorflow  # noqa: F401
    import tensorflow_text  # noqa: F401  registers its ops
    from tensorflow.core.framework import op_def_pb2
    from tensorflow.python.client import pywrap_tf_session

    ops = op_def_pb2.OpList()
    ops.ParseFromString(pywrap_tf_session.TF_GetBuffer(pywrap_tf_session.TF_GetAllOpList()))
    return sorted(op.name for op in ops.op)


def to_json(value):
    """A tensor or array as nested lists; strings decoded from UTF-8."""
    import numpy as np

    array = np.asarray(value)
    if array.dtype.kind in "SO":
        return np.vectorize(lambda item: item.decode("utf-8"), otypes=[object])(array).tolist()
    return array.tolist()


def call_signatures(loaded_signatures, calls: Sequence[dict]) -> List[Dict[str, object]]:
    """Each call ``{"signature": NAME, "inputs": {name: nested lists}}`` of a loaded SavedModel's
    signatures, the inputs given the signature's dtypes; the outputs as :func:`to_json` gives them."""
    import tensorflow as tf

    answers = []
    for call in calls:
        signature = loaded_signatures[call["signature"]]
        specs = signature.structured_input_signature[1]
        inputs = {name: tf.constant(value, specs[name].dtype) for name, value in call["inputs"].items()}
        answers.append({name: to_json(value) for name, value in signature(**inputs).items()})
    return answers


def _call(request: dict) -> dict:
    """What this process is, and what each export of ``request["exports"]`` answers when loaded as TF
    Serving would: ``{name: {"outputs": [...]}}`` for its calls, or ``{name: {"error": ...}}`` for one
    that fails to load or to answer."""
    import importlib.util

    import tensorflow as tf
    import tensorflow_text  # registers the ops of the exports' tokenizer

    answers = {}
    for name, export in request["exports"].items():
        try:
            answers[name] = {"outputs": call_signatures(tf.saved_model.load(export["path"]).signatures,
                                                        export["calls"])}
        except Exception as error:  # noqa: BLE001  reported to the caller, which fails on it
            answers[name] = {"error": f"{type(error).__name__}: {error}"}
    return {
        "tensorflow": tf.__version__, "tensorflow_text": tensorflow_text.__version__, "ops": _registered_ops(),
        "gnmt_tf_importable": importlib.util.find_spec("gnmt_tf") is not None,
        "project_modules": sorted(name for name in sys.modules if name.split(".")[0] in ("gnmt_tf", "export", "serving")),
        "answers": answers,
    }


def call_in_runtime(python: str, exports: Dict[str, dict], timeout: float = RUN_TIMEOUT) -> dict:
    """:func:`_call` in the runtime at ``python`` for ``{name: {"path": VERSION_DIR, "calls": [...]}}``: the
    versions there, the ops registered there, and the answers. This file runs there isolated (``-I``:
    no PYTHON* variables, neither its own directory nor the checkout on the path)."""
    result = subprocess.run([python, "-I", os.path.abspath(__file__), "call"], input=json.dumps({"exports": exports}),
                            capture_output=True, text=True, timeout=timeout, env=runtime_env(),
                            cwd=os.path.dirname(python))
    if result.returncode != 0:
        raise RuntimeError(f"{python} {os.path.basename(__file__)} call failed (exit status {result.returncode}): "
                           f"{result.stderr[-3000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])  # the last line: anything before it is not ours


# ---------------------------------------------------------------------------------------- commands
def write_ops(python: str, path: str = OPS_FILE) -> List[str]:
    """Regenerate the op list from the runtime at ``python``; returns the ops written."""
    listed = call_in_runtime(python, {})
    ops = sorted(set(listed["ops"]) - PYTHON_ONLY_OPS)
    header = [
        f"# The ops that {runtime_name()} registers:",
        "# an export may use these and no others.",
        f"# Generated by `python -m export.serving_runtime write-ops` from tensorflow {listed['tensorflow']} and",
        f"# tensorflow-text {listed['tensorflow_text']}; {', '.join(sorted(PYTHON_ONLY_OPS))} left out (their kernels",
        "# call back into Python, which TF Serving does not have).",
    ]
    with open(path, "w", encoding="utf-8") as handle:
        handle.write("\n".join(header + ops) + "\n")
    return ops


def warmup_calls(version_dir: str) -> List[dict]:
    """The version's TF Serving warm-up requests as calls for :func:`call_signatures`."""
    import tensorflow as tf

    from export.warmup import read_warmup_requests

    return [{"signature": request.model_spec.signature_name or "serving_default",
             "inputs": {name: to_json(tf.make_ndarray(proto)) for name, proto in request.inputs.items()}}
            for request in read_warmup_requests(version_dir)]


def check(version_dirs: Sequence[str], python: str) -> int:
    """Replay each export's warm-up requests in the runtime and in this process; 0 if all load there and
    give the same translations."""
    import tensorflow as tf

    exports = {directory: {"path": os.path.abspath(directory), "calls": warmup_calls(directory)}
               for directory in version_dirs}
    runtime = call_in_runtime(python, {name: export for name, export in exports.items() if export["calls"]})
    there = f"TensorFlow {runtime['tensorflow']} with tensorflow-text {runtime['tensorflow_text']}"
    failed = 0
    for directory, export in exports.items():
        answer = runtime["answers"].get(directory, {"error": "it has no warm-up requests (assets.extra) to replay"})
        if "error" in answer:
            print(f"{directory}: FAILED in {there}: {answer['error'][-2000:]}")
            failed += 1
            continue
        here = call_signatures(tf.saved_model.load(directory).signatures, export["calls"])
        differ = [(call["signature"], mine["translations"], theirs["translations"])
                  for call, mine, theirs in zip(export["calls"], here, answer["outputs"])
                  if mine["translations"] != theirs["translations"]]
        for signature, mine, theirs in differ:
            print(f"{directory}: {signature}: TensorFlow {tf.__version__} {mine}, {there} {theirs}")
        failed += bool(differ)
        print(f"{directory}: {'DIFFERENT' if differ else 'the same'} translations of {len(export['calls'])} "
              f"warm-up requests in {there} as in TensorFlow {tf.__version__}")
    return 1 if failed else 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m export.serving_runtime",
        description=f"{runtime_name()}: its environment, its op list, and loading exports in it.")
    commands = parser.add_subparsers(dest="command", required=True)
    venv = commands.add_parser("venv", help="build (or find) the runtime's environment and print its Python")
    write = commands.add_parser("write-ops", help=f"regenerate {os.path.basename(OPS_FILE)} from the runtime")
    check_parser = commands.add_parser("check", help="load exports in the runtime and compare their translations")
    check_parser.add_argument("version_dirs", nargs="+", metavar="VERSION_DIR", help="e.g. serving_models/gnmt/1")
    for command in (venv, write, check_parser):
        command.add_argument("--path", default=None,
                             help=f"the environment (default: ${VENV_VARIABLE}, else {default_venv_path()})")
    commands.add_parser("call", help="(inside the runtime) answer a JSON request on stdin")
    return parser


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "call":  # inside the runtime
        print(json.dumps(_call(json.load(sys.stdin))))
        return 0
    try:
        python = ensure_venv(args.path, log=lambda message: print(message, file=sys.stderr))
    except RuntimeUnavailable as err:
        print(f"error: {runtime_name()}'s environment could not be built: {err}", file=sys.stderr)
        return 1
    if args.command == "venv":
        print(python)
        return 0
    if args.command == "write-ops":
        ops = write_ops(python)
        print(f"wrote {len(ops)} ops to {OPS_FILE}")
        return 0
    return check(args.version_dirs, python)


if __name__ == "__main__":
    sys.exit(main())
