"""Model versions: finding them under a base path, loading, warming up, switching and unloading.

Versions policy (TF Serving's file-system source with its availability-preserving policy):

* A version is a directory ``BASE/<digits>/`` holding ``saved_model.pb`` (or ``.pbtxt``). Hidden
  directories (the exporter's ``.tmp-*`` staging directories) and other names are ignored.
* The model's version policy picks the versions to serve among those on disk: by default the
  latest one (``latest { num_versions: 1 }``), or ``all``, or ``specific`` versions.
* Each base path is polled every ``--file_system_poll_wait_seconds``. A new version is loaded in
  the background (the poll thread) while the current one keeps serving; it becomes AVAILABLE only
  after its warm-up requests were answered, and then requests switch to it atomically. The
  versions it supersedes are unloaded after that, once their in-flight requests have finished.
* A version that fails to load (or to warm up) is logged, shows as END with the error in the model
  status, and is not retried until its directory's contents change; the versions already serving
  keep serving. A version whose directory disappears is unloaded.
* Requests without a version get the highest AVAILABLE version; a request for a specific version
  (or a label of the model config's ``version_labels``) gets it if it is loaded, else NOT_FOUND.

Warm-up: ``assets.extra/tf_serving_warmup_requests`` (a TFRecord file of PredictionLog protos with
``predict_log`` requests, at most 1000) is replayed as TF Serving does; a failing record fails the
load. Without that file, every signature whose inputs can be made up (string vectors: ``["a"]``;
numeric scalars: 1) is called once, so that the first client request does not pay for TensorFlow's
first-call graph optimizations.
"""

from __future__ import annotations

import importlib
import os
import re
import threading
import time
from collections import Counter
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np
import tensorflow as tf

from serving.batching import Batcher
from serving.config import BatchingOptions, Limits, ServedModelConfig
from serving.errors import ServingError, clean_tf_message, from_exception, invalid, not_found
from serving.tensors import check_input_names, check_outputs, proto_to_array, validate_inputs

DEFAULT_SIGNATURE = "serving_default"
WARMUP_FILE = os.path.join("assets.extra", "tf_serving_warmup_requests")
MAX_WARMUP_RECORDS = 1000
_VERSION_NAME = re.compile(r"[0-9]+")


# ------------------------------------------------------------------------------------------- discovery
def discover_versions(base_path: str) -> Optional[Dict[int, str]]:
    """``{version: directory}`` of the servable versions under ``base_path`` (None if it does not exist)."""
    try:
        names = os.listdir(base_path)
    except FileNotFoundError:
        return None
    except NotADirectoryError:
        return None
    versions: Dict[int, str] = {}
    for name in sorted(names):
        if name.startswith(".") or not _VERSION_NAME.fullmatch(name):
            continue
        path = os.path.join(base_path, name)
        if not os.path.isdir(path):
            continue
        if not any(os.path.isfile(os.path.join(path, f)) for f in ("saved_model.pb", "saved_model.pbtxt")):
            continue
        version = int(name)
        if version not in versions or name == str(version):
            versions[version] = path
    return versions


def fingerprint(path: str) -> Tuple[int, int, int]:
    """(files, bytes, newest mtime) of a version directory: a failed load is retried when it changes."""
    count = size = newest = 0
    for root, _, names in os.walk(path):
        for name in names:
            try:
                stat = os.stat(os.path.join(root, name))
            except OSError:
                continue
            count += 1
            size += stat.st_size
            newest = max(newest, stat.st_mtime_ns)
    return count, size, newest


def read_signature_defs(path: str):
    """The SignatureDefs of the SavedModel's serving meta graph, as TF Serving reports them in metadata."""
    from google.protobuf import text_format
    from tensorflow.core.protobuf import saved_model_pb2

    saved_model = saved_model_pb2.SavedModel()
    binary = os.path.join(path, "saved_model.pb")
    if os.path.exists(binary):
        with open(binary, "rb") as handle:
            saved_model.ParseFromString(handle.read())
    else:
        with open(os.path.join(path, "saved_model.pbtxt"), encoding="utf-8") as handle:
            text_format.Parse(handle.read(), saved_model)
    if not saved_model.meta_graphs:
        raise ServingError("INVALID_ARGUMENT", f"{path}: the SavedModel has no meta graph")
    graphs = [g for g in saved_model.meta_graphs if "serve" in g.meta_info_def.tags] or list(saved_model.meta_graphs)
    return dict(graphs[0].signature_def)


# ------------------------------------------------------------------------------------------- signatures
class Signature:
    """One signature function of a loaded SavedModel, with its input and output specs."""

    def __init__(self, name: str, function):
        self.name = name
        self.function = function
        self.inputs: Dict[str, tf.TensorSpec] = dict(function.structured_input_signature[1])
        self.outputs: Dict[str, tf.TensorSpec] = dict(function.structured_outputs)
        self.batch_inputs = [n for n, s in self.inputs.items() if s.shape.rank and s.shape[0] is None]
        self.key_inputs = [n for n, s in self.inputs.items() if s.shape.rank == 0]
        self.batched = self._has_batch_dimension()
        # Merging requests is only exact when no output has a variable dimension besides the batch.
        self.mergeable = self.batched and all(
            spec.shape.rank and spec.shape[0] is None and spec.shape[1:].is_fully_defined()
            for spec in self.outputs.values()
        ) and len(self.batch_inputs) + len(self.key_inputs) == len(self.inputs)

    def _has_batch_dimension(self) -> bool:
        return bool(self.batch_inputs) and all(
            spec.shape.rank and spec.shape[0] is None for spec in self.outputs.values()
        )

    def call(self, arrays: Dict[str, np.ndarray]) -> Dict[str, np.ndarray]:
        tensors = {name: tf.constant(value, dtype=self.inputs[name].dtype) for name, value in arrays.items()}
        return {name: value.numpy() for name, value in self.function(**tensors).items()}

    def synthetic_inputs(self) -> Optional[Dict[str, np.ndarray]]:
        """Made-up inputs for the built-in warm-up, or None if some input cannot be made up."""
        arrays = {}
        for name, spec in self.inputs.items():
            if spec.dtype == tf.string and spec.shape.rank == 1:
                arrays[name] = np.array([b"a"], dtype=object)
            elif spec.shape.rank == 0 and (spec.dtype.is_floating or spec.dtype.is_integer):
                arrays[name] = np.array(1, dtype=spec.dtype.as_numpy_dtype)
            else:
                return None
        return arrays


def wanted_outputs(signature: Signature, output_filter: Sequence[str]) -> List[str]:
    """The outputs a request asked for (all when ``output_filter`` is empty), TF Serving's checks."""
    if not output_filter:
        return list(signature.outputs)
    chosen: List[str] = []
    for alias in output_filter:
        if alias not in signature.outputs:
            raise invalid(
                f"output tensor alias not found in signature: {alias} Outputs expected to be in the set "
                f"{{{','.join(sorted(signature.outputs))}}}."
            )
        if alias in chosen:
            raise invalid(f"duplicate output tensor alias: {alias}")
        chosen.append(alias)
    return chosen


# ------------------------------------------------------------------------------------------- versions
class LoadedVersion:
    """One loaded version of a model: its signatures, batchers, counters and in-flight requests."""

    def __init__(self, model_name: str, version: int, path: str, limits: Limits,
                 batching: Optional[BatchingOptions] = None):
        importlib.import_module("tensorflow_text")  # registers the wordpiece ops the translator graph uses

        self.model_name = model_name
        self.version = version
        self.path = path
        self.limits = limits
        self.signature_defs = read_signature_defs(path)
        self._module = tf.saved_model.load(path)
        self.signatures: Dict[str, Signature] = {
            name: Signature(name, function) for name, function in self._module.signatures.items()
        }
        self.calls: Counter = Counter()  # signature name -> calls of the signature function
        self._lock = threading.Lock()
        self._active = 0
        self._idle = threading.Condition(self._lock)
        self.batchers: Dict[str, Batcher] = {}
        if batching is not None:
            for signature in self.signatures.values():
                if signature.mergeable:
                    self.batchers[signature.name] = Batcher(
                        lambda arrays, s=signature: self._call(s, arrays), batching,
                        signature.batch_inputs, signature.key_inputs, name=f"{model_name}:{version}:{signature.name}",
                    )

    def __repr__(self) -> str:
        return f"LoadedVersion({self.model_name!r}, {self.version})"

    # ------------------------------------------------------------------------------------ requests
    def signature(self, name: str, rest: bool = False) -> Signature:
        key = name or DEFAULT_SIGNATURE
        if key in self.signatures:
            return self.signatures[key]
        known = ", ".join(sorted(self.signatures))
        if rest:  # TF Serving's REST front end looks the signature up itself (INVALID_ARGUMENT)
            raise invalid(f'Serving signature name: "{key}" not found in signature def (this model has: {known})')
        raise ServingError("FAILED_PRECONDITION", f'Serving signature key "{key}" not found. (this model has: {known})')

    def predict(self, signature: Signature, arrays: Dict[str, np.ndarray], output_filter: Sequence[str] = (),
                use_batching: bool = True) -> Dict[str, np.ndarray]:
        """Checks the inputs, runs the signature (through its batcher if it has one), returns the wanted outputs."""
        wanted = wanted_outputs(signature, output_filter)
        batch = validate_inputs(signature.name, signature.inputs, arrays, self.limits)
        batcher = self.batchers.get(signature.name) if use_batching else None
        outputs = batcher.submit(arrays, batch) if batcher else self._call(signature, arrays)
        check_outputs(signature.name, outputs, batch, signature.batched)
        return {name: outputs[name] for name in wanted}

    def _call(self, signature: Signature, arrays: Dict[str, np.ndarray]) -> Dict[str, np.ndarray]:
        with self._lock:
            self.calls[signature.name] += 1
        try:
            return signature.call(arrays)
        except Exception as error:
            raise from_exception(error) from None

    def predict_proto(self, request, use_batching: bool = True):
        """A ``PredictRequest``'s inputs run on this version; returns (signature, outputs)."""
        signature = self.signature(request.model_spec.signature_name)
        check_input_names(signature.name, signature.inputs, list(request.inputs))
        arrays = {
            name: proto_to_array(request.inputs[name], signature.name, name, spec, self.limits)
            for name, spec in signature.inputs.items()
        }
        return signature, self.predict(signature, arrays, list(request.output_filter), use_batching)

    # ------------------------------------------------------------------------------------ warm-up
    def warm_up(self, replay_warmup_file: bool = True) -> str:
        """Replays the warm-up file (or calls each signature once); returns what was done."""
        path = os.path.join(self.path, WARMUP_FILE)
        if replay_warmup_file and os.path.exists(path):
            return self._replay(path)
        called = []
        for signature in self.signatures.values():
            arrays = signature.synthetic_inputs()
            if arrays is not None:
                self.predict(signature, arrays, use_batching=False)
                called.append(signature.name)
        return f"built-in warm-up of {', '.join(called) or 'no signature'}"

    def _replay(self, path: str) -> str:
        from tensorflow_serving.apis import prediction_log_pb2

        count = 0
        try:
            for record in tf.data.TFRecordDataset(path):
                count += 1
                if count > MAX_WARMUP_RECORDS:
                    raise invalid(f"Number of warmup records exceeds the maximum ({MAX_WARMUP_RECORDS}) at {path}")
                try:
                    log = prediction_log_pb2.PredictionLog.FromString(record.numpy())
                except Exception:
                    raise invalid(f"Failed to parse warmup record {count} from {path}") from None
                kind = log.WhichOneof("log_type")
                if kind != "predict_log":
                    raise ServingError("UNIMPLEMENTED", f"warmup record {count} of {path} is a {kind}; "
                                                        f"this server replays predict_log records only")
                try:
                    self.predict_proto(log.predict_log.request, use_batching=False)
                except ServingError as error:
                    raise ServingError(error.code, f"warmup record {count} of {path} failed: {error.message}") from None
        except tf.errors.DataLossError as error:
            raise ServingError("DATA_LOSS", f"{path}: {clean_tf_message(error.message)}. "
                                            f"Please verify your warmup data is in TFRecord format.") from None
        return f"{count} warm-up requests from {WARMUP_FILE}"

    # ------------------------------------------------------------------------------------ lifetime
    def acquire(self) -> None:
        with self._lock:
            self._active += 1

    def release(self) -> None:
        with self._lock:
            self._active -= 1
            if self._active == 0:
                self._idle.notify_all()

    def flush(self) -> None:
        for batcher in self.batchers.values():
            batcher.flush()

    def retire(self, timeout: float = 30.0) -> bool:
        """Waits (at most ``timeout``) for in-flight requests, then stops the batchers and drops the model."""
        deadline = time.monotonic() + timeout
        self.flush()
        with self._lock:
            while self._active and time.monotonic() < deadline:
                self._idle.wait(max(0.01, deadline - time.monotonic()))
            drained = self._active == 0
        for batcher in self.batchers.values():
            batcher.close(max(0.0, deadline - time.monotonic()))
        self._module = None
        return drained

    def stats(self) -> dict:
        with self._lock:
            calls = dict(self.calls)
        return {"calls": calls, "batching": {name: dict(b.stats) for name, b in self.batchers.items()}}


# ------------------------------------------------------------------------------------------- models
STATES = ("START", "LOADING", "AVAILABLE", "UNLOADING", "END")


class ModelManager:
    """The versions of one model: polls its base path, loads, switches, unloads, reports states."""

    def __init__(self, config: ServedModelConfig, limits: Limits, batching: Optional[BatchingOptions] = None,
                 log: Callable[[str], None] = print, replay_warmup_file: bool = True, unload_timeout: float = 30.0):
        self.config = config
        self.name = config.name
        self.limits = limits
        self.batching = batching
        self.log = log
        self.replay_warmup_file = replay_warmup_file
        self.unload_timeout = unload_timeout
        self._lock = threading.Lock()
        self._available: Dict[int, LoadedVersion] = {}
        self._states: Dict[int, Tuple[str, str, str]] = {}  # version -> (state, error code, error message)
        self._failed: Dict[int, Tuple[int, int, int]] = {}  # version -> fingerprint of the failed directory
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._warned = None

    # ------------------------------------------------------------------------------------ polling
    def poll(self) -> None:
        """One look at the base path: load what the policy wants and is not loaded, unload what it dropped."""
        on_disk = discover_versions(self.config.base_path)
        if not on_disk:
            warning = (f"Could not find base path {self.config.base_path} for servable {self.name}" if on_disk is None
                       else f"No versions of servable {self.name} found under base path {self.config.base_path}")
            if warning != self._warned:
                self.log(warning)
                self._warned = warning
            on_disk = on_disk or {}
        else:
            self._warned = None
        aspired = self.config.policy.aspired(list(on_disk))
        for version in sorted(aspired, reverse=True):
            if self._stop.is_set():
                return
            if version in self._available:
                continue
            path = on_disk[version]
            contents = fingerprint(path)
            if self._failed.get(version) == contents:
                continue
            self._load(version, path, contents)
        with self._lock:
            serving_aspired = any(v in self._available for v in aspired)
            retired = [v for v in self._available if v not in aspired and (serving_aspired or v not in on_disk)]
        for version in sorted(retired):
            self._unload(version, "its directory was removed" if version not in on_disk
                         else f"not among {self.config.policy.describe()} on disk")

    def _set_state(self, version: int, state: str, code: str = "OK", message: str = "") -> None:
        with self._lock:
            self._states[version] = (state, code, message)

    def _load(self, version: int, path: str, contents) -> None:
        self.log(f"loading {self.name} version {version} from {path}")
        self._set_state(version, "LOADING")
        start = time.monotonic()
        loaded = None
        try:
            loaded = LoadedVersion(self.name, version, path, self.limits, self.batching)
            warmed = loaded.warm_up(self.replay_warmup_file)
        except BaseException as error:
            failure = from_exception(error)
            if failure.code == "INTERNAL" and not isinstance(error, ServingError):
                failure = ServingError("UNKNOWN", failure.message)
            if loaded is not None:
                loaded.retire(0)
            self._failed[version] = contents
            self._set_state(version, "END", failure.code, f"failed to load {path}: {failure.message}")
            with self._lock:
                serving = sorted(self._available)
            still = (f"still serving version{'s' if len(serving) > 1 else ''} {', '.join(map(str, serving))}"
                     if serving else f"no version of {self.name} is available")
            self.log(f"ERROR: {self.name} version {version} failed to load ({failure.code}): "
                     f"{_first_line(failure.message)}; {still}")
            return
        with self._lock:
            self._available[version] = loaded
            self._states[version] = ("AVAILABLE", "OK", "")
            latest = max(self._available)
        self._failed.pop(version, None)
        self.log(f"{self.name} version {version} is AVAILABLE (loaded in {time.monotonic() - start:.1f} s, {warmed}); "
                 f"requests without a version now go to version {latest}")

    def _unload(self, version: int, reason: str) -> None:
        with self._lock:
            loaded = self._available.pop(version)
            self._states[version] = ("UNLOADING", "OK", "")
        self.log(f"unloading {self.name} version {version} ({reason})")
        drained = loaded.retire(self.unload_timeout)
        self._set_state(version, "END")
        self.log(f"{self.name} version {version} unloaded"
                 + ("" if drained else f" (some requests were still running after {self.unload_timeout:.0f} s)"))

    def start_polling(self, interval: float) -> None:
        if interval <= 0 or self._thread is not None:
            return
        self._thread = threading.Thread(target=self._poll_loop, args=(interval,), name=f"poll-{self.name}",
                                        daemon=True)
        self._thread.start()

    def _poll_loop(self, interval: float) -> None:
        while not self._stop.wait(interval):
            try:
                self.poll()
            except Exception as error:  # a poll must never end the polling
                self.log(f"ERROR: polling {self.config.base_path} for {self.name}: {type(error).__name__}: {error}")

    # ------------------------------------------------------------------------------------ requests
    def _resolve_label(self, label: str) -> int:
        if label not in self.config.labels:
            raise invalid(f"Unrecognized servable version label: {label}")
        return self.config.labels[label]

    def acquire(self, version: Optional[int] = None, label: Optional[str] = None) -> LoadedVersion:
        """The version a request asked for (the latest available without one), held until ``release``."""
        if label:
            version = self._resolve_label(label)
        with self._lock:
            if version is None:
                if not self._available:
                    raise not_found(f"Servable not found for request: Latest({self.name})")
                loaded = self._available[max(self._available)]
            else:
                loaded = self._available.get(version)
                if loaded is None:
                    raise not_found(f"Servable not found for request: Specific({self.name}, {version})")
            loaded.acquire()
        return loaded

    def status(self, version: Optional[int] = None, label: Optional[str] = None) -> List[Tuple[int, str, str, str]]:
        """[(version, state, error code, error message)], newest first, as GetModelStatus reports them."""
        if label:
            version = self._resolve_label(label)
        with self._lock:
            if version is not None:
                if version not in self._states:
                    raise not_found(f"Could not find version {version} of model {self.name}")
                return [(version, *self._states[version])]
            if not self._states:
                raise not_found(f"Could not find any versions of model {self.name}")
            return [(v, *self._states[v]) for v in sorted(self._states, reverse=True)]

    def available_versions(self) -> List[int]:
        with self._lock:
            return sorted(self._available)

    def loaded(self) -> List[LoadedVersion]:
        with self._lock:
            return [self._available[v] for v in sorted(self._available)]

    def flush(self) -> None:
        for loaded in self.loaded():
            loaded.flush()

    def close(self, timeout: float = 30.0) -> None:
        """Stops polling and unloads every version (after its in-flight requests, at most ``timeout``)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
        with self._lock:
            versions = dict(self._available)
            self._available.clear()
        for version, loaded in versions.items():
            loaded.retire(timeout)
            self._set_state(version, "END")


def _first_line(text: str, limit: int = 400) -> str:
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line if len(line) <= limit else line[:limit] + "..."
