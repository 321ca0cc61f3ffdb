"""What the server serves and how: models (``--model_config_file`` or ``--model_name``/``--model_base_path``),
batching parameters (``--batching_parameters_file``) and request limits.

Both files are protobuf text format, as for TF Serving's ``tensorflow_model_server``:

* ``--model_config_file``: a ``tensorflow.serving.ModelServerConfig`` with a ``model_config_list``; each
  model has ``name``, ``base_path``, ``model_platform: "tensorflow"`` and optionally
  ``model_version_policy`` (``latest { num_versions: N }`` (default N = 1), ``all {}``,
  ``specific { versions: ... }``) and ``version_labels``.
* ``--batching_parameters_file``: a ``tensorflow.serving.BatchingParameters``. That message is not in
  the tensorflow-serving-api package, so it is declared here (same field names and types) and parsed
  with protobuf's own text-format parser; an unknown field is refused with the parser's message.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Dict, Optional, Sequence, Tuple


class ServingConfigError(ValueError):
    """A server flag, model config file or batching parameters file that cannot be served as given.

    (Not :class:`gnmt_tf.config.ConfigError`, which is about the training config.)
    """


# ---------------------------------------------------------------------------------------------- models
@dataclass(frozen=True)
class VersionPolicy:
    """Which of the versions found under a base path are served: TF Serving's ServableVersionPolicy."""

    kind: str = "latest"  # "latest", "all" or "specific"
    num_versions: int = 1  # latest
    versions: Tuple[int, ...] = ()  # specific

    def aspired(self, available_on_disk: Sequence[int]) -> set:
        versions = sorted(set(available_on_disk), reverse=True)
        if self.kind == "all":
            return set(versions)
        if self.kind == "specific":
            return set(versions) & set(self.versions)
        return set(versions[: self.num_versions])

    def describe(self) -> str:
        if self.kind == "all":
            return "all versions"
        if self.kind == "specific":
            return "versions " + ", ".join(str(v) for v in sorted(self.versions))
        return "the latest version" if self.num_versions == 1 else f"the latest {self.num_versions} versions"


@dataclass(frozen=True)
class ServedModelConfig:
    """One model the server serves: an entry of TF Serving's ``model_config_list`` (ModelConfig proto).

    (Not :class:`gnmt_tf.config.ModelConfig`, the network's hyperparameters.)
    """

    name: str
    base_path: str
    policy: VersionPolicy = VersionPolicy()
    labels: Dict[str, int] = field(default_factory=dict)


def single_model_config(name: str, base_path: str) -> ServedModelConfig:
    """``--model_name`` / ``--model_base_path``."""
    if not name:
        raise ServingConfigError("--model_name must not be empty")
    if not base_path:
        raise ServingConfigError("--model_base_path must not be empty")
    return ServedModelConfig(name=name, base_path=os.path.abspath(base_path))


def parse_model_config(text: str, source: str = "model config") -> list:
    """The models of a ``ModelServerConfig`` in text format."""
    from google.protobuf import text_format
    from tensorflow_serving.config import model_server_config_pb2

    config = model_server_config_pb2.ModelServerConfig()
    try:
        text_format.Parse(text, config)
    except text_format.ParseError as error:
        raise ServingConfigError(f"{source}: not a valid ModelServerConfig text proto: {error}") from None
    kind = config.WhichOneof("config")
    if kind == "custom_model_config":
        raise ServingConfigError(f"{source}: custom_model_config is not supported; use model_config_list")
    if kind is None or not config.model_config_list.config:
        raise ServingConfigError(
            f"{source}: no models (expected model_config_list {{ config {{ name: ... base_path: ... }} }})")
    models, names = [], set()
    for index, entry in enumerate(config.model_config_list.config):
        where = f"{source}: model {index + 1}"
        if not entry.name:
            raise ServingConfigError(f"{where}: name is empty")
        where = f"{source}: model {entry.name!r}"
        if entry.name in names:
            raise ServingConfigError(f"{where}: the name is used twice")
        names.add(entry.name)
        if "/" in entry.name or ":" in entry.name:
            raise ServingConfigError(
                f"{where}: the name must not contain '/' or ':' (it is part of REST paths)")
        if not entry.base_path:
            raise ServingConfigError(f"{where}: base_path is empty")
        if entry.model_platform not in ("", "tensorflow"):
            raise ServingConfigError(
                f"{where}: model_platform {entry.model_platform!r} is not supported; only \"tensorflow\"")
        models.append(ServedModelConfig(
            name=entry.name,
            base_path=os.path.abspath(entry.base_path),
            policy=_policy(entry, where),
            labels=dict(entry.version_labels),
        ))
    return models


def _policy(entry, where: str) -> VersionPolicy:
    if not entry.HasField("model_version_policy"):
        return VersionPolicy()
    choice = entry.model_version_policy.WhichOneof("policy_choice")
    if choice == "all":
        return VersionPolicy("all")
    if choice == "specific":
        versions = tuple(entry.model_version_policy.specific.versions)
        if not versions:
            raise ServingConfigError(f"{where}: model_version_policy specific {{}} lists no versions")
        return VersionPolicy("specific", versions=versions)
    num = entry.model_version_policy.latest.num_versions if choice == "latest" else 0
    return VersionPolicy("latest", num_versions=num or 1)


def _read_flag_file(path: str, flag: str) -> str:
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    except (OSError, UnicodeDecodeError) as error:
        raise ServingConfigError(f"cannot read {flag} {path}: {error}") from None


def load_model_config_file(path: str) -> list:
    return parse_model_config(_read_flag_file(path, "--model_config_file"), source=path)


# -------------------------------------------------------------------------------------------- batching
@dataclass(frozen=True)
class BatchingOptions:
    """TF Serving's batching parameters; defaults are its scheduler's when a field is not set.

    ``max_batch_size`` bounds one request (and, without large-batch splitting, one merged batch;
    with it, ``max_execution_batch_size`` bounds the merged batches and larger requests are split);
    ``batch_timeout_micros`` is how long the first request of a batch waits for others;
    ``max_enqueued_batches`` bounds the queue (a request that does not fit gets UNAVAILABLE);
    ``num_batch_threads`` batches of one signature may run at the same time.
    """

    max_batch_size: int = 1000
    batch_timeout_micros: int = 0
    max_enqueued_batches: int = 10
    num_batch_threads: int = field(default_factory=lambda: max(1, os.cpu_count() or 1))
    enable_large_batch_splitting: bool = False
    max_execution_batch_size: Optional[int] = None  # with splitting; defaults to max_batch_size
    allowed_batch_sizes: Tuple[int, ...] = ()  # validated, not used (no padding on CPU)
    pad_variable_length_inputs: bool = False  # accepted, not used (inputs are 1-D strings)
    thread_pool_name: str = ""

    @property
    def execution_batch_size(self) -> int:
        if self.enable_large_batch_splitting and self.max_execution_batch_size:
            return self.max_execution_batch_size
        return self.max_batch_size

    @property
    def batch_timeout_seconds(self) -> float:
        return self.batch_timeout_micros / 1e6

    def describe(self) -> str:
        text = (f"max_batch_size {self.max_batch_size}, batch_timeout_micros {self.batch_timeout_micros}, "
                f"num_batch_threads {self.num_batch_threads}, max_enqueued_batches {self.max_enqueued_batches}")
        if self.enable_large_batch_splitting:
            text += f", large batches split into batches of {self.execution_batch_size}"
        return text


_BATCHING_MESSAGE = None


def _batching_message_class():
    """``tensorflow.serving.BatchingParameters`` (session_bundle_config.proto), declared in a private pool."""
    global _BATCHING_MESSAGE
    if _BATCHING_MESSAGE is not None:
        return _BATCHING_MESSAGE
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory, wrappers_pb2

    pool = descriptor_pool.DescriptorPool()
    pool.AddSerializedFile(wrappers_pb2.DESCRIPTOR.serialized_pb)
    proto = descriptor_pb2.FileDescriptorProto(
        name="serving_batching_parameters.proto", package="tensorflow.serving", syntax="proto3",
        dependency=["google/protobuf/wrappers.proto"],
    )
    message = proto.message_type.add(name="BatchingParameters")
    F = descriptor_pb2.FieldDescriptorProto
    fields = [
        ("max_batch_size", 1, ".google.protobuf.Int64Value"),
        ("batch_timeout_micros", 2, ".google.protobuf.Int64Value"),
        ("max_enqueued_batches", 3, ".google.protobuf.Int64Value"),
        ("num_batch_threads", 4, ".google.protobuf.Int64Value"),
        ("thread_pool_name", 5, ".google.protobuf.StringValue"),
        ("allowed_batch_sizes", 6, None),
        ("pad_variable_length_inputs", 7, None),
        ("enable_large_batch_splitting", 8, ".google.protobuf.BoolValue"),
        ("max_execution_batch_size", 9, ".google.protobuf.Int64Value"),
    ]
    for name, number, type_name in fields:
        if type_name:
            message.field.add(name=name, number=number, label=F.LABEL_OPTIONAL, type=F.TYPE_MESSAGE,
                              type_name=type_name)
        elif name == "allowed_batch_sizes":
            message.field.add(name=name, number=number, label=F.LABEL_REPEATED, type=F.TYPE_INT64)
        else:
            message.field.add(name=name, number=number, label=F.LABEL_OPTIONAL, type=F.TYPE_BOOL)
    pool.Add(proto)
    _BATCHING_MESSAGE = message_factory.GetMessageClass(pool.FindMessageTypeByName("tensorflow.serving.BatchingParameters"))
    return _BATCHING_MESSAGE


def parse_batching_parameters(text: str, source: str = "batching parameters") -> BatchingOptions:
    """TF Serving's ``BatchingParameters`` text format, e.g. ``max_batch_size { value: 32 }``."""
    from google.protobuf import text_format

    params = _batching_message_class()()
    try:
        text_format.Parse(text, params)
    except text_format.ParseError as error:
        known = ", ".join(f.name for f in params.DESCRIPTOR.fields)
        raise ServingConfigError(
            f"{source}: not valid BatchingParameters: {error} (known fields: {known})") from None
    defaults = BatchingOptions()

    def value(name, default):
        return getattr(params, name).value if params.HasField(name) else default

    options = BatchingOptions(
        max_batch_size=value("max_batch_size", defaults.max_batch_size),
        batch_timeout_micros=value("batch_timeout_micros", defaults.batch_timeout_micros),
        max_enqueued_batches=value("max_enqueued_batches", defaults.max_enqueued_batches),
        num_batch_threads=value("num_batch_threads", defaults.num_batch_threads),
        thread_pool_name=value("thread_pool_name", ""),
        enable_large_batch_splitting=value("enable_large_batch_splitting", False),
        max_execution_batch_size=value("max_execution_batch_size", None),
        allowed_batch_sizes=tuple(params.allowed_batch_sizes),
        pad_variable_length_inputs=params.pad_variable_length_inputs,
    )
    for name in ("max_batch_size", "max_enqueued_batches", "num_batch_threads"):
        if getattr(options, name) < 1:
            raise ServingConfigError(f"{source}: {name} must be >= 1, got {getattr(options, name)}")
    if options.batch_timeout_micros < 0:
        raise ServingConfigError(
            f"{source}: batch_timeout_micros must be >= 0, got {options.batch_timeout_micros}")
    if options.max_execution_batch_size is not None:
        if not options.enable_large_batch_splitting:
            raise ServingConfigError(
                f"{source}: max_execution_batch_size needs enable_large_batch_splitting {{ value: true }}")
        if not 1 <= options.max_execution_batch_size <= options.max_batch_size:
            raise ServingConfigError(f"{source}: max_execution_batch_size must be between 1 and max_batch_size "
                                     f"({options.max_batch_size}), got {options.max_execution_batch_size}")
    sizes = options.allowed_batch_sizes
    if sizes:
        if any(b <= a for a, b in zip(sizes, sizes[1:])) or sizes[0] < 1:
            raise ServingConfigError(
                f"{source}: allowed_batch_sizes must be positive and increasing, got {list(sizes)}")
        if sizes[-1] != options.execution_batch_size:
            raise ServingConfigError(f"{source}: the last allowed_batch_sizes entry ({sizes[-1]}) must equal "
                                     f"max_batch_size ({options.execution_batch_size})")
    return options


def load_batching_parameters_file(path: str) -> BatchingOptions:
    return parse_batching_parameters(_read_flag_file(path, "--batching_parameters_file"), source=path)


# ---------------------------------------------------------------------------------------------- limits
@dataclass(frozen=True)
class Limits:
    """Per-request limits, checked before any model work.

    * ``max_batch_sentences`` (256): sentences in one request. A beam search batch of 256
      sentences already takes the CPU for a noticeable time; larger jobs should be split by the
      client so that other clients' requests interleave.
    * ``max_sentence_bytes`` (10,000): bytes of UTF-8 in one sentence. The translator keeps at
      most 250 wordpieces of a sentence (longer ones are truncated), which real text reaches
      well below 10 kB; a longer "sentence" is a document pasted by mistake, refused rather
      than silently truncated.
    * ``max_request_bytes`` (4 MiB): a REST body or gRPC message, gRPC's own default limit.
    """

    max_batch_sentences: int = 256
    max_sentence_bytes: int = 10_000
    max_request_bytes: int = 4 * 1024 * 1024

    def __post_init__(self):
        for name in ("max_batch_sentences", "max_sentence_bytes", "max_request_bytes"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ServingConfigError(f"--{name} must be a positive integer, got {value!r}")
