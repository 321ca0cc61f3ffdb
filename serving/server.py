"""A local model server that speaks TF Serving's REST and gRPC APIs: ``python -m serving.server``.

It serves SavedModels exported by ``python -m export`` (``BASE/NAME/<version>/``) the way
``tensorflow_model_server`` does, for machines without that binary: the same flags, paths,
request and response formats, status codes and version handling, with the translation itself done
by the SavedModel's own signature functions (tokenization, beam search and detokenization are in
the graph). In-process use::

    from serving.server import ModelServer
    from serving.config import single_model_config

    with ModelServer([single_model_config("gnmt", "serving_models/gnmt")], port=0, rest_api_port=0) as server:
        print(server.grpc_port, server.rest_api_port)

Differences from tensorflow_model_server (all deliberate, see also serving/rest.py):

* It binds 127.0.0.1 by default (``--grpc_host``, ``--rest_api_host``); the real server binds all
  interfaces (0.0.0.0). Pass ``--grpc_host 0.0.0.0 --rest_api_host 0.0.0.0`` to do the same.
* ``--port 0`` picks a free gRPC port (printed at startup).
* Per-request limits (``--max_batch_sentences``, ``--max_sentence_bytes``, ``--max_request_bytes``)
  are checked before any model work, with INVALID_ARGUMENT / 400 (413 for an over-large REST body,
  RESOURCE_EXHAUSTED for an over-large gRPC message).
* SIGTERM / SIGINT drain: new connections are refused and new requests on open connections get
  UNAVAILABLE / 503, in-flight requests finish (at most ``--shutdown_grace_seconds``), then the
  process exits 0. A second SIGINT (Ctrl-C twice) exits at once (status 1); a repeated SIGTERM is
  ignored (wrappers such as coreutils ``timeout`` signal both the process and its group).
* With batching on, signatures with scalar inputs (translate_with_options) still work: requests
  are merged only when their scalars agree, and translate_nbest runs unbatched (its padded
  outputs would depend on the other requests of a batch). TF Serving's batching session refuses
  scalar inputs altogether.
* ``HandleReloadConfigRequest`` is UNIMPLEMENTED and the config file is read once; new versions of
  the configured models are still picked up while running.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
import time
from typing import Callable, Optional, Sequence

from gnmt_tf.cli.commands import defined_in
from gnmt_tf.cli.scaffold import Command, start_tensorflow
from serving.config import (
    BatchingOptions,
    Limits,
    ServedModelConfig,
    ServingConfigError,
    load_batching_parameters_file,
    load_model_config_file,
    single_model_config,
)


def stderr_log(message: str) -> None:
    print(f"{time.strftime('%Y-%m-%d %H:%M:%S')} {message}", file=sys.stderr, flush=True)


class ModelServer:
    """The models, the gRPC front end and the REST front end, started and stopped together.

    Args:
        models: what to serve (:func:`serving.config.single_model_config`, :func:`load_model_config_file`).
        port: gRPC port (0: a free one). rest_api_port: REST port (0: a free one; None: no REST).
        grpc_host, rest_api_host: interfaces to bind (loopback by default).
        batching: batching parameters, or None for no batching.
        limits: per-request limits.
        poll_seconds: how often base paths are polled for new versions (<= 0: only at start).
        replay_warmup_file: replay ``assets.extra/tf_serving_warmup_requests`` when a version loads.
        grace_seconds: how long :meth:`stop` lets in-flight requests run.
    """

    def __init__(self, models: Sequence[ServedModelConfig], *, port: int = 8500,
                 rest_api_port: Optional[int] = 8501,
                 grpc_host: str = "127.0.0.1", rest_api_host: str = "127.0.0.1",
                 batching: Optional[BatchingOptions] = None, limits: Limits = Limits(), poll_seconds: float = 1.0,
                 replay_warmup_file: bool = True, grace_seconds: float = 20.0,
                 log: Callable[[str], None] = stderr_log):
        self.models = list(models)
        self.port = port
        self.rest_api_port_requested = rest_api_port
        self.grpc_host = grpc_host
        self.rest_api_host = rest_api_host
        self.batching = batching
        self.limits = limits
        self.poll_seconds = poll_seconds
        self.replay_warmup_file = replay_warmup_file
        self.grace_seconds = grace_seconds
        self.log = log
        self.core = None
        self._grpc = None
        self._rest = None
        self._stopped = threading.Event()
        self._stop_lock = threading.Lock()

    # ------------------------------------------------------------------------------------ lifetime
    def start(self) -> "ModelServer":
        """Loads the models (raises :class:`serving.core.StartupError` if one cannot serve), then opens the ports."""
        from serving.core import ServingCore
        from serving.grpc_service import GrpcServer
        from serving.rest import RestServer

        if self.batching is not None:
            self.log(f"batching on: {self.batching.describe()}")
        for model in self.models:
            labels = f", labels {model.labels}" if model.labels else ""
            self.log(f"model {model.name}: base path {model.base_path}, serving {model.policy.describe()}{labels}")
        self.core = ServingCore(self.models, self.limits, self.batching, self.poll_seconds,
                                self.replay_warmup_file, unload_timeout=max(self.grace_seconds, 1.0), log=self.log)
        try:
            self.core.start()
            self._grpc = GrpcServer(self.core, self.grpc_host, self.port, self.limits, self.log)
            if self.rest_api_port_requested is not None:
                self._rest = RestServer(self.core, self.rest_api_host, self.rest_api_port_requested, self.limits,
                                        self.log)
        except BaseException:
            if self._grpc is not None:
                self._grpc.stop(0)
            self.core.close(0)
            raise
        self._grpc.start()
        self.log(f"Running gRPC ModelServer at {self.grpc_host}:{self._grpc.port} ...")
        if self._rest is not None:
            self._rest.start()
            self.log(f"Exporting HTTP/REST API at:{self.rest_api_host}:{self._rest.port} ...")
        served = ", ".join(
            f"{name} (version {', '.join(map(str, m.available_versions())) or 'none yet'})"
            for name, m in self.core.managers.items()
        )
        rest = f"REST on {self.rest_api_host}:{self._rest.port}" if self._rest else "REST disabled"
        self.log(f"serving {served}; gRPC on {self.grpc_host}:{self._grpc.port}, {rest}")
        return self

    @property
    def grpc_port(self) -> int:
        return self._grpc.port

    @property
    def rest_api_port(self) -> Optional[int]:
        return self._rest.port if self._rest else None

    def stop(self, grace: Optional[float] = None) -> bool:
        """Drains and stops: refuses new work, lets in-flight requests finish (at most ``grace`` s).

        Returns True if every in-flight request finished within the grace period.
        """
        with self._stop_lock:
            if self._stopped.is_set() or self.core is None:
                return True
            grace = self.grace_seconds if grace is None else grace
            deadline = time.monotonic() + grace
            self.log(f"shutting down: refusing new requests, letting in-flight ones finish (at most {grace:g} s)")
            self.core.begin_drain()
            if self._rest is not None:
                self._rest.stop_accepting()
            grpc_done = self._grpc.stop(grace)
            finished = True
            if self._rest is not None:
                finished = self._rest.wait_idle(max(0.0, deadline - time.monotonic()))
            finished = grpc_done.wait(max(0.0, deadline - time.monotonic())) and finished
            self.core.close(max(0.0, deadline - time.monotonic()))
            self._stopped.set()
            self.log("stopped" + ("" if finished else f" (some requests were cut off after {grace:g} s)"))
            return finished

    def wait(self, timeout: Optional[float] = None) -> bool:
        return self._stopped.wait(timeout)

    def stats(self) -> dict:
        """Signature calls and batching counters per model and loaded version (see ServingCore.stats)."""
        return self.core.stats() if self.core else {}

    def __enter__(self) -> "ModelServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


# ---------------------------------------------------------------------------------------------- CLI
def _bool(text: str) -> bool:
    value = text.strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    tf_serving = parser.add_argument_group("tensorflow_model_server flags")
    tf_serving.add_argument("--port", type=int, default=8500, help="gRPC port (default: %(default)s; 0: a free port)")
    tf_serving.add_argument("--rest_api_port", type=int, default=8501,
                            help="REST port (default: %(default)s; 0 disables REST, as in tensorflow_model_server)")
    tf_serving.add_argument("--model_name", default="default", help="name of the model (default: %(default)s)")
    tf_serving.add_argument("--model_base_path", default="", help="directory holding the model's numbered versions")
    tf_serving.add_argument("--model_config_file", default="",
                            help="ModelServerConfig text proto with one or more models (then --model_name and "
                                 "--model_base_path are ignored)")
    tf_serving.add_argument("--enable_batching", type=_bool, nargs="?", const=True, default=False,
                            help="merge concurrent requests into batches")
    tf_serving.add_argument("--batching_parameters_file", default="",
                            help="BatchingParameters text proto (max_batch_size, batch_timeout_micros, "
                                 "num_batch_threads, max_enqueued_batches, enable_large_batch_splitting, "
                                 "max_execution_batch_size, allowed_batch_sizes, ...)")
    tf_serving.add_argument("--file_system_poll_wait_seconds", type=float, default=1.0,
                            help="seconds between looks for new versions (default: %(default)s; <= 0: only at start)")
    tf_serving.add_argument("--enable_model_warmup", type=_bool, nargs="?", const=True, default=True,
                            help="replay assets.extra/tf_serving_warmup_requests when a version loads (default: true)")
    tf_serving.add_argument("--tensorflow_intra_op_parallelism", type=int, default=0,
                            help="threads per TensorFlow op (0: TensorFlow's choice)")
    tf_serving.add_argument("--tensorflow_inter_op_parallelism", type=int, default=0,
                            help="TensorFlow ops run in parallel (0: TensorFlow's choice)")
    tf_serving.add_argument("--rest_api_num_threads", type=int, default=0,
                            help="accepted for compatibility; ignored (one thread per REST connection)")
    tf_serving.add_argument("--rest_api_timeout_in_ms", type=int, default=30000,
                            help="accepted for compatibility; ignored")
    tf_serving.add_argument("--model_config_file_poll_wait_seconds", type=int, default=0,
                            help="accepted for compatibility; the config file is read once")

    ours = parser.add_argument_group("this server's own flags")
    ours.add_argument("--grpc_host", default="127.0.0.1",
                      help="interface for gRPC (default: %(default)s, loopback only; the real server binds 0.0.0.0)")
    ours.add_argument("--rest_api_host", default="127.0.0.1",
                      help="interface for REST (default: %(default)s, loopback only; the real server binds 0.0.0.0)")
    ours.add_argument("--max_batch_sentences", type=int, default=Limits.max_batch_sentences,
                      help="most sentences in one request (default: %(default)s)")
    ours.add_argument("--max_sentence_bytes", type=int, default=Limits.max_sentence_bytes,
                      help="most UTF-8 bytes in one sentence (default: %(default)s; the model keeps 250 wordpieces, "
                           "far less than that)")
    ours.add_argument("--max_request_bytes", type=int, default=Limits.max_request_bytes,
                      help="largest REST body / gRPC message (default: %(default)s, gRPC's default limit)")
    ours.add_argument("--shutdown_grace_seconds", type=float, default=20.0,
                      help="on SIGTERM/SIGINT, how long in-flight requests may still run (default: %(default)s)")


def configure(args) -> dict:
    """ModelServer keyword arguments from parsed flags (raises ServingConfigError)."""
    if args.model_config_file:
        models = load_model_config_file(args.model_config_file)
    elif args.model_base_path:
        models = [single_model_config(args.model_name, args.model_base_path)]
    else:
        raise ServingConfigError("Both --model_config_file and --model_base_path are empty: give one of them")
    batching = None
    if args.batching_parameters_file and not args.enable_batching:
        raise ServingConfigError("--batching_parameters_file is given but --enable_batching is not")
    if args.enable_batching:
        batching = (load_batching_parameters_file(args.batching_parameters_file) if args.batching_parameters_file
                    else BatchingOptions())
    for flag in ("port", "rest_api_port"):
        if not 0 <= getattr(args, flag) <= 65535:
            raise ServingConfigError(f"--{flag} must be between 0 and 65535, got {getattr(args, flag)}")
    if args.rest_api_port and args.rest_api_port == args.port and args.rest_api_host == args.grpc_host:
        raise ServingConfigError(
            f"--port and --rest_api_port are both {args.port}; give them different ports")
    if args.shutdown_grace_seconds < 0:
        raise ServingConfigError("--shutdown_grace_seconds must be >= 0")
    limits = Limits(args.max_batch_sentences, args.max_sentence_bytes, args.max_request_bytes)
    return dict(
        models=models, port=args.port, rest_api_port=args.rest_api_port or None, grpc_host=args.grpc_host,
        rest_api_host=args.rest_api_host, batching=batching, limits=limits,
        poll_seconds=args.file_system_poll_wait_seconds, replay_warmup_file=args.enable_model_warmup,
        grace_seconds=args.shutdown_grace_seconds,
    )


def serve(args) -> int:
    options = configure(args)  # before TensorFlow starts: a bad flag is answered at once
    start_tensorflow(args.verbose)
    log = stderr_log
    if args.model_config_file and (args.model_base_path or args.model_name != "default"):
        log("--model_config_file is given: --model_name and --model_base_path are ignored")
    if args.model_config_file_poll_wait_seconds > 0:
        log("--model_config_file_poll_wait_seconds: the config file is read once (new versions are still polled)")
    if args.tensorflow_intra_op_parallelism or args.tensorflow_inter_op_parallelism:
        import tensorflow as tf

        if args.tensorflow_intra_op_parallelism:
            tf.config.threading.set_intra_op_parallelism_threads(args.tensorflow_intra_op_parallelism)
        if args.tensorflow_inter_op_parallelism:
            tf.config.threading.set_inter_op_parallelism_threads(args.tensorflow_inter_op_parallelism)

    stop = threading.Event()

    def on_signal(number, frame):
        name = signal.Signals(number).name
        if not stop.is_set():
            log(f"received {name}")
            stop.set()
        elif number == signal.SIGINT:  # Ctrl-C twice: do not wait for in-flight requests
            log(f"received {name} again: exiting now")
            os._exit(1)
        else:  # e.g. a wrapper that signals both the process and its group: keep draining
            log(f"received {name} again: already shutting down")

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    from serving.core import StartupError

    server = ModelServer(log=log, **options)
    try:
        server.start()
    except (StartupError, OSError) as error:
        log(f"error: {error}")
        return 1
    while not stop.wait(0.5):
        pass
    server.stop()
    return 0


HELP = """``python -m serving.server`` (gnmt-serve): the local model server's command line.

Serve exported GNMT SavedModels over TF Serving's gRPC and REST APIs (a stand-in for
tensorflow_model_server; same flags for what it supports).

Differences from tensorflow_model_server: binds 127.0.0.1 unless --grpc_host/--rest_api_host
say otherwise (the real server binds 0.0.0.0); refuses requests over the --max_* limits with
INVALID_ARGUMENT / HTTP 400 (413 for a REST body over --max_request_bytes); drains on
SIGTERM/SIGINT (in-flight requests finish, at most --shutdown_grace_seconds, then exit 0; a
second Ctrl-C exits at once). Serves the latest version of each model by default (a request for
another version gets NOT_FOUND / 404); model_version_policy and version_labels of
--model_config_file are honoured.

Exit status: 0 drained and stopped; 2 a bad flag or config file; 1 a model or port that could not
be served at start, or a second Ctrl-C.
"""

COMMAND = Command(
    defined_in(__spec__.name), HELP, add_arguments, serve, starts_tensorflow=False,
    exit_statuses=lambda: {ServingConfigError: 2},
    examples=(
        "--model_name gnmt --model_base_path serving_models/gnmt",
        "--model_config_file models.config --enable_batching --batching_parameters_file batching.config",
    ),
)
main, build_parser = COMMAND.main, COMMAND.build_parser
COMMAND.run_if_main(__name__)
