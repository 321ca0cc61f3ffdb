"""Data parallelism (section 3.3): the ``--strategy`` choices of ``python -m gnmt_tf.train``.

* ``default``: one device, no ``tf.distribute`` strategy.
* ``mirrored``: synchronous replicas on this machine's devices (its GPUs; without GPUs, its
  logical CPUs, see :func:`split_cpu` and ``--logical-cpus``).
* ``multi_worker``: synchronous replicas on several machines (``MultiWorkerMirroredStrategy``),
  the cluster described by ``TF_CONFIG``; every worker runs the same command.
* ``parameter_server``: asynchronous replicas sharing the parameters on ps tasks, the paper's
  Downpour setup; the chief runs the training, each worker and ps process only serves
  (:func:`serve`) until it is killed.
* ``tpu``: ``TPUStrategy`` through a ``TPUClusterResolver`` (``TPU_NAME``).

``training.batch_size`` is the batch of one parameter update. Synchronous strategies split it
across their replicas (it is the global batch), so the learning rate needs no rescaling; to
reproduce the paper's 128 pairs per replica set it to 128 x replicas. Under
``parameter_server`` every update is one worker's own batch of ``batch_size`` pairs, as in
the paper's asynchronous replicas. docs/distributed.md has the cluster recipes.
"""

from __future__ import annotations

import json
import os
import re
import sys
from dataclasses import dataclass
from typing import Callable, Dict, List, Mapping, Optional

from gnmt_tf.config import ConfigError

STRATEGIES = ("default", "mirrored", "multi_worker", "parameter_server", "tpu")

# The roles each cluster strategy accepts in TF_CONFIG, and how many tasks of each it needs.
_ROLES = {
    "multi_worker": {"chief": (0, 1), "worker": (1, None)},
    "parameter_server": {"chief": (1, 1), "worker": (1, None), "ps": (1, None)},
}
_ADDRESS = re.compile(r"^(\[[0-9A-Fa-f:.]+\]|[^\s:\[\]]+):(\d{1,5})$")


class WorkerLost(RuntimeError):
    """Another task of the cluster failed; the cluster must be restarted."""


def failure_reason(error: Exception) -> str:
    """The line of a TensorFlow cluster error that says what happened (not "Graph execution error")."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    for key in ("unhealthy", "Failed to connect", "Connection reset", "Socket closed", "aborted by"):
        for i, line in enumerate(lines):
            if key in line:
                following = lines[i + 1] if i + 1 < len(lines) and lines[i + 1].startswith("/job:") else ""
                return f"{line} {following}".strip()[:300]
    return (lines[-1] if lines else type(error).__name__)[:300]


# ---------------------------------------------------------------------------- devices
def split_cpu(count: int) -> None:
    """Split the host CPU into ``count`` logical devices (``/device:CPU:0`` ... ``CPU:count-1``).

    Lets ``--strategy mirrored`` (and model parallelism) run several replicas on a CPU-only
    machine. They share the same cores, so this is for trying the code paths, not for speed.
    Must run before anything initializes TensorFlow's devices.
    """
    if count < 1:
        raise ConfigError(f"--logical-cpus must be at least 1, got {count}")
    import tensorflow as tf

    cpu = tf.config.list_physical_devices("CPU")[0]
    try:
        tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * count)
    except RuntimeError as err:
        raise ConfigError(
            f"cannot split the CPU into {count} logical devices: TensorFlow is already initialized ({err})"
        ) from None


# ---------------------------------------------------------------------------- TF_CONFIG
@dataclass(frozen=True)
class ClusterConfig:
    """The ``TF_CONFIG`` of one task: the cluster (role -> addresses) and this task's role."""

    cluster: Dict[str, List[str]]
    task_type: str
    task_id: int

    @property
    def size(self) -> int:
        return sum(len(addresses) for addresses in self.cluster.values())

    @property
    def is_chief(self) -> bool:
        """The task that writes the model directory (TF's rule: the chief, else worker 0)."""
        if "chief" in self.cluster:
            return self.task_type == "chief"
        return self.task_type == "worker" and self.task_id == 0


def read_tf_config(environ: Optional[Mapping[str, str]] = None) -> Optional[ClusterConfig]:
    """This process's ``TF_CONFIG``, checked for form; None when it is unset or has no cluster."""
    raw = (os.environ if environ is None else environ).get("TF_CONFIG", "")
    if not raw.strip():
        return None
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as err:
        raise ConfigError(f"TF_CONFIG is not valid JSON ({err}): {raw!r}") from None
    if not isinstance(value, dict):
        raise ConfigError(f"TF_CONFIG must be a JSON object with 'cluster' and 'task', got {raw!r}")
    cluster = value.get("cluster") or {}
    if not cluster:
        return None
    if not isinstance(cluster, dict):
        raise ConfigError(f"TF_CONFIG 'cluster' must map roles to lists of host:port, got {cluster!r}")
    for role, addresses in cluster.items():
        if not isinstance(addresses, list) or not addresses:
            raise ConfigError(f"TF_CONFIG cluster.{role} must be a non-empty list of host:port, got {addresses!r}")
        for address in addresses:
            match = _ADDRESS.match(address) if isinstance(address, str) else None
            if not match or not 0 < int(match.group(2)) < 65536:
                raise ConfigError(f"TF_CONFIG cluster.{role}: {address!r} is not host:port")
    task = value.get("task")
    if not isinstance(task, dict) or "type" not in task:
        raise ConfigError(
            "TF_CONFIG has a cluster but no task: add \"task\": {\"type\": ROLE, \"index\": N} "
            "naming this process's place in the cluster"
        )
    task_type, task_id = task["type"], task.get("index", 0)
    if task_type not in cluster:
        raise ConfigError(f"TF_CONFIG task.type {task_type!r} is not a role of the cluster ({', '.join(cluster)})")
    if not isinstance(task_id, int) or not 0 <= task_id < len(cluster[task_type]):
        raise ConfigError(
            f"TF_CONFIG task.index {task_id!r} is out of range: cluster.{task_type} has "
            f"{len(cluster[task_type])} address(es), so the index must be 0..{len(cluster[task_type]) - 1}"
        )
    return ClusterConfig({role: list(addresses) for role, addresses in cluster.items()}, task_type, task_id)


def check_cluster(strategy: str, cluster: Optional[ClusterConfig]) -> None:
    """Raise ConfigError when ``TF_CONFIG`` does not fit ``--strategy``."""
    if strategy not in STRATEGIES:
        raise ConfigError(f"unknown strategy {strategy!r}; choose one of {', '.join(STRATEGIES)}")
    if strategy not in _ROLES:
        if cluster is not None and cluster.size > 1:
            raise ConfigError(
                f"TF_CONFIG describes a cluster of {cluster.size} tasks, but --strategy {strategy} trains in "
                f"this one process; use --strategy multi_worker (synchronous) or parameter_server "
                f"(asynchronous), or unset TF_CONFIG"
            )
        return
    if cluster is None:
        example = {
            "multi_worker": '{"cluster": {"worker": ["host1:2222", "host2:2222"]}, "task": {"type": "worker", "index": 0}}',
            "parameter_server": '{"cluster": {"chief": ["host0:2222"], "worker": ["host1:2222"], '
            '"ps": ["host2:2222"]}, "task": {"type": "chief", "index": 0}}',
        }[strategy]
        raise ConfigError(
            f"--strategy {strategy} needs TF_CONFIG describing the cluster and this process's task, "
            f"e.g. TF_CONFIG='{example}' (see docs/distributed.md)"
        )
    roles = _ROLES[strategy]
    unknown = sorted(set(cluster.cluster) - set(roles))
    if unknown:
        hint = ""
        if strategy == "multi_worker" and "ps" in unknown:
            hint = "; a cluster with ps tasks is for --strategy parameter_server"
        elif "evaluator" in unknown:
            hint = "; dev evaluation runs on the chief, no evaluator task is needed"
        raise ConfigError(
            f"TF_CONFIG for --strategy {strategy} may only have the roles {', '.join(roles)}, "
            f"not {', '.join(unknown)}{hint}"
        )
    for role, (low, high) in roles.items():
        count = len(cluster.cluster.get(role, []))
        if count < low or (high is not None and count > high):
            need = f"exactly {low}" if low == high else (f"at least {low}" if high is None else f"at most {high}")
            raise ConfigError(
                f"--strategy {strategy} needs {need} {role} task(s) in TF_CONFIG, it has {count}"
                + (" (the chief runs the training; workers compute, ps tasks hold the parameters)"
                   if strategy == "parameter_server" else "")
            )


# ---------------------------------------------------------------------------- strategies
def strategy_for(name: str, environ: Optional[Mapping[str, str]] = None, log: Callable[[str], None] = print):
    """The ``tf.distribute`` strategy of ``--strategy name`` (None for ``default``).

    In a parameter-server cluster, a worker or ps process does not return: it serves its
    part of the cluster until it is killed. ``environ`` (default ``os.environ``) is where
    ``TF_CONFIG`` is checked and ``TPU_NAME`` read; TensorFlow's cluster resolver itself
    reads ``os.environ``.
    """
    cluster = read_tf_config(environ)
    check_cluster(name, cluster)
    if name == "default":
        return None
    import tensorflow as tf

    if name == "mirrored":
        devices = _local_devices(tf)
        log(f"mirrored: {len(devices)} replica(s) on {', '.join(devices)}")
        return tf.distribute.MirroredStrategy(devices)
    if name == "tpu":
        return _tpu_strategy(tf, environ)
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    if name == "multi_worker":
        log(f"multi_worker: {cluster.task_type} {cluster.task_id} of a cluster of {cluster.size} "
            f"({'chief: writes the model directory' if cluster.is_chief else 'not the chief'})")
        return tf.distribute.MultiWorkerMirroredStrategy(cluster_resolver=resolver)
    # Lost workers or ps tasks then fail the coordinator's calls at once instead of waiting.
    os.environ.setdefault("GRPC_FAIL_FAST", "use_caller")
    if cluster.task_type in ("worker", "ps"):
        serve(cluster, log)
    log(f"parameter_server: chief of {len(cluster.cluster['worker'])} worker(s) and "
        f"{len(cluster.cluster['ps'])} ps task(s)")
    return tf.distribute.ParameterServerStrategy(resolver)


def _local_devices(tf) -> List[str]:
    gpus = tf.config.list_logical_devices("GPU")
    devices = gpus or tf.config.list_logical_devices("CPU")
    return [device.name for device in devices]


def _tpu_strategy(tf, environ):
    # TPU_NAME is the resolver's own convention; "local" is a Cloud TPU VM's attached TPU.
    name = (os.environ if environ is None else environ).get("TPU_NAME") or "local"
    try:
        resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=name)
        if name != "local":
            tf.config.experimental_connect_to_cluster(resolver)
        tf.tpu.experimental.initialize_tpu_system(resolver)
    except (ValueError, RuntimeError, tf.errors.OpError) as err:
        reason = str(getattr(err, "message", err)).strip().split("\n")[0]
        reason = reason.split(" Failed in initialization")[0]
        raise ConfigError(
            f"--strategy tpu: no TPU through the cluster resolver (TPU_NAME={name!r}): {reason}. On a "
            f"Cloud TPU VM leave TPU_NAME unset; for a TPU node set TPU_NAME to its name or "
            f"grpc://host:8470 address"
        ) from None
    return tf.distribute.TPUStrategy(resolver)


def serve(cluster: ClusterConfig, log: Callable[[str], None] = print) -> None:
    """Run this worker or ps task of a parameter-server cluster until the process is killed."""
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  the input pipeline's tokenizer ops run on the workers

    server = tf.distribute.Server(
        tf.train.ClusterSpec(cluster.cluster), job_name=cluster.task_type, task_index=cluster.task_id,
        protocol="grpc", start=True,
    )
    address = cluster.cluster[cluster.task_type][cluster.task_id]
    log(f"parameter_server: {cluster.task_type} {cluster.task_id} serving at {address} "
        f"(the chief drives the training; stop this process when the chief is done)")
    sys.stdout.flush()
    server.join()


# ---------------------------------------------------------------------------- in training
def is_chief(strategy) -> bool:
    """Whether this process writes checkpoints, summaries and the dev evaluation."""
    return strategy is None or bool(strategy.extended.should_checkpoint)


def is_multi_worker(strategy) -> bool:
    """A synchronous strategy spanning several processes (every worker runs the training)."""
    import tensorflow as tf

    return (
        isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy)
        and strategy.extended._in_multi_worker_mode()  # no public equivalent
    )


def uses_coordinator(strategy) -> bool:
    """A parameter-server strategy: steps are scheduled on workers by this (chief) process."""
    return strategy is not None and bool(getattr(strategy, "_should_use_with_coordinator", False))


def stop_agreement(strategy) -> Callable[[bool], bool]:
    """``agree(local_stop) -> stop``: True on every worker when any worker wants to stop.

    Workers of a synchronous cluster must leave the training loop after the same step, or
    the others wait for them in the next all-reduce.
    """
    import tensorflow as tf

    def any_replica(flag):
        context = tf.distribute.get_replica_context()
        # identity: a replica-local copy; the captured input has no device to reduce from.
        return context.all_reduce(tf.distribute.ReduceOp.SUM, tf.identity(flag))

    @tf.function
    def agree(flag):
        return strategy.experimental_local_results(strategy.run(any_replica, args=(flag,)))[0]

    return lambda local: bool(agree(tf.constant(1.0 if local else 0.0)).numpy() > 0)


class TemporaryCheckpoints:
    """A non-chief worker's checkpoint writer: saves to a private directory, then deletes it.

    With ``MultiWorkerMirroredStrategy`` every worker takes part in a save (reading
    variables may need collectives), but only the chief's copy is kept (as TensorFlow's
    multi-worker guide does it). ``latest_checkpoint`` is this worker's last save, so that
    a caller skipping a repeated save skips it on every worker alike.
    """

    def __init__(self, checkpoint, directory: str):
        import tensorflow as tf

        self._tf = tf
        self.checkpoint = checkpoint
        self.directory = directory
        self.latest_checkpoint: Optional[str] = None

    def save(self, checkpoint_number: Optional[int] = None) -> str:
        tf = self._tf
        manager = tf.train.CheckpointManager(self.checkpoint, self.directory, max_to_keep=1)
        self.latest_checkpoint = manager.save(checkpoint_number=checkpoint_number)
        tf.io.gfile.rmtree(self.directory)
        return self.latest_checkpoint
