"""The models a server serves, and the request operations both front ends (REST and gRPC) share.

:class:`ServingCore` owns one :class:`serving.models.ModelManager` per model, finds the version a
request names (``Latest(name)`` / ``Specific(name, version)`` / a label), holds it while the request
runs (so an unload waits for it), and answers model status and metadata.
"""

from __future__ import annotations

import contextlib
import threading
from typing import Callable, Dict, Iterator, List, Optional, Sequence

from serving.config import BatchingOptions, Limits, ServedModelConfig
from serving.errors import ServingError, invalid, not_found
from serving.models import LoadedVersion, ModelManager


class StartupError(RuntimeError):
    """A model could not be made available when the server started."""


class ServingCore:
    def __init__(self, models: Sequence[ServedModelConfig], limits: Limits = Limits(),
                 batching: Optional[BatchingOptions] = None, poll_seconds: float = 1.0,
                 replay_warmup_file: bool = True, unload_timeout: float = 30.0, log: Callable[[str], None] = print):
        names = [m.name for m in models]
        if not models:
            raise ValueError("no models to serve")
        if len(set(names)) != len(names):
            raise ValueError(f"model names must be unique: {names}")
        self.limits = limits
        self.batching = batching
        self.poll_seconds = poll_seconds
        self.log = log
        self.managers: Dict[str, ModelManager] = {
            m.name: ModelManager(m, limits, batching, log, replay_warmup_file, unload_timeout) for m in models
        }
        self._draining = threading.Event()

    # ------------------------------------------------------------------------------------ lifetime
    def start(self) -> None:
        """Loads each model's aspired versions (as TF Serving, before serving), then polls in the background.

        Raises :class:`StartupError` when a model has versions on disk but none of them loaded.
        """
        failures = []
        for manager in self.managers.values():
            manager.poll()
            if manager.available_versions():
                continue
            try:
                states = manager.status()
            except ServingError:  # nothing on disk yet: served as soon as a version appears
                continue
            if states:
                errors = "; ".join(f"version {v}: {message}" for v, _, _, message in states if message)
                failures.append(f"{manager.name}: {errors or 'no version became available'}")
        if failures:
            raise StartupError(f"{len(failures)} model(s) did not become available: " + " | ".join(failures))
        for manager in self.managers.values():
            manager.start_polling(self.poll_seconds)

    def begin_drain(self) -> None:
        """Refuse new requests (UNAVAILABLE) and run queued batches now; in-flight requests finish."""
        self._draining.set()
        for manager in self.managers.values():
            manager.flush()

    @property
    def draining(self) -> bool:
        return self._draining.is_set()

    def close(self, timeout: float = 30.0) -> None:
        for manager in self.managers.values():
            manager.close(timeout)

    # ------------------------------------------------------------------------------------ lookups
    def manager(self, name: str, version: Optional[int] = None) -> ModelManager:
        manager = self.managers.get(name)
        if manager is None:
            request = f"Specific({name}, {version})" if version is not None else f"Latest({name})"
            raise not_found(f"Servable not found for request: {request}")
        return manager

    @contextlib.contextmanager
    def version(self, name: str, version: Optional[int] = None, label: Optional[str] = None) -> Iterator[LoadedVersion]:
        """The loaded version a request names, held (not unloaded) until the block ends."""
        if self.draining:
            raise ServingError("UNAVAILABLE", "the server is shutting down; retry on another replica")
        if version is not None and label:
            raise invalid(f"Both model version ({version}) and model version label ({label}) cannot be supplied.")
        loaded = self.manager(name, version).acquire(version, label)
        try:
            yield loaded
        finally:
            loaded.release()

    def status(self, name: str, version: Optional[int] = None, label: Optional[str] = None) -> List[tuple]:
        if not name:
            raise invalid("Missing model name in request.")
        manager = self.managers.get(name)
        if manager is None:
            if version is not None:
                raise not_found(f"Could not find version {version} of model {name}")
            raise not_found(f"Could not find any versions of model {name}")
        return manager.status(version, label)

    def stats(self) -> dict:
        """{model: {version: {"calls": {signature: n}, "batching": {signature: {...}}}}} of loaded versions."""
        return {
            name: {loaded.version: loaded.stats() for loaded in manager.loaded()}
            for name, manager in self.managers.items()
        }

    # ------------------------------------------------------------------------------------ responses
    def status_response(self, name: str, version: Optional[int] = None, label: Optional[str] = None):
        """A ``GetModelStatusResponse``: every version seen, newest first, with its state and error."""
        from tensorflow_serving.apis import get_model_status_pb2, status_pb2

        codes = status_pb2.StatusProto.DESCRIPTOR.fields_by_name["error_code"].enum_type
        response = get_model_status_pb2.GetModelStatusResponse()
        for number, state, code, message in self.status(name, version, label):
            entry = response.model_version_status.add(
                version=number, state=get_model_status_pb2.ModelVersionStatus.State.Value(state))
            entry.status.error_code = codes.values_by_name[code].number
            entry.status.error_message = message
        return response

    def metadata_response(self, name: str, version: Optional[int] = None, label: Optional[str] = None):
        """A ``GetModelMetadataResponse`` with the ``signature_def`` field (a packed ``SignatureDefMap``)."""
        from tensorflow_serving.apis import get_model_metadata_pb2

        if not name:
            raise invalid("Missing model name in request.")
        response = get_model_metadata_pb2.GetModelMetadataResponse()
        signature_defs = get_model_metadata_pb2.SignatureDefMap()
        with self.version(name, version, label) as loaded:
            response.model_spec.name = name
            response.model_spec.version.value = loaded.version
            for key, signature_def in loaded.signature_defs.items():
                signature_defs.signature_def[key].CopyFrom(signature_def)
        response.metadata["signature_def"].Pack(signature_defs)
        return response
