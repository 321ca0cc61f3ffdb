"""Load test of the local server on loopback: throughput and latency, batching on and off.

    python benchmarks/serving_load_benchmark.py [--model-dir runs/en-fr] [--clients 1 4 16] [--seconds 20]

Exports the model once (SavedModel, float), then for batching off and on starts
``python -m serving.server`` on free loopback ports, and for each client count
runs that many threads, each sending one-sentence requests (dev sentences,
round robin) back to back for ``--seconds`` through :mod:`serving.client`
(REST by default, ``--protocol grpc``). Reports requests/s and p50/p90/p99
latency in ``benchmarks/results/serving_load.json``. The clients run in the
benchmark's process and share the machine's cores with the server, as on any
one-machine test; the load averages are recorded.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)

from harness import write_report  # noqa: E402
from serving.client import GrpcClient, RestClient, ServingRequestError  # noqa: E402


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model-dir", default=os.path.join("runs", "en-fr"))
    parser.add_argument("--clients", nargs="+", type=int, default=[1, 4, 16])
    parser.add_argument("--seconds", type=float, default=20.0, help="measured time per client count")
    parser.add_argument("--protocol", choices=("rest", "grpc"), default="rest")
    parser.add_argument("--output", default=os.path.join(HERE, "results", "serving_load.json"))
    return parser.parse_args(argv)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def dev_sentences(model_dir: str, limit: int = 200):
    from gnmt_tf import model_files

    return [source for source, _ in model_files.read_dev_split(model_dir)][:limit]


def start_server(base: str, batching: bool):
    grpc_port, rest_port = free_port(), free_port()
    command = ["timeout", "-s", "KILL", "3600", sys.executable, "-m", "serving.server",
               "--port", str(grpc_port), "--rest_api_port", str(rest_port),
               "--model_name", "gnmt", "--model_base_path", base]
    if batching:
        command += ["--enable_batching", "--batching_parameters_file",
                    os.path.join(ROOT, "serving", "batching_parameters.txt")]
    env = dict(os.environ, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL="2")
    process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    probe = RestClient(f"http://127.0.0.1:{rest_port}", "gnmt", timeout=60, retries=120, backoff=0.25,
                       sleep=lambda s: time.sleep(min(s, 1.0)))
    probe.status()
    return process, grpc_port, rest_port


def make_client(protocol: str, grpc_port: int, rest_port: int):
    if protocol == "rest":
        return RestClient(f"http://127.0.0.1:{rest_port}", "gnmt", timeout=120, retries=0)
    return GrpcClient(f"127.0.0.1:{grpc_port}", "gnmt", timeout=120, retries=0)


def load(protocol, ports, sentences, clients: int, seconds: float):
    """``clients`` threads sending back-to-back requests for ``seconds``; latencies in ms."""
    latencies, failures = [], []
    lock = threading.Lock()
    deadline = time.monotonic() + seconds

    def worker(offset: int):
        client = make_client(protocol, *ports)
        i = offset
        while time.monotonic() < deadline:
            sentence = sentences[i % len(sentences)]
            i += clients
            started = time.monotonic()
            try:
                client.translate([sentence])
            except ServingRequestError as err:
                with lock:
                    failures.append(str(err))
                continue
            with lock:
                latencies.append((time.monotonic() - started) * 1000)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(clients)]
    started = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.monotonic() - started
    values = np.array(latencies) if latencies else np.array([np.nan])
    return {
        "clients": clients,
        "requests": len(latencies),
        "failures": len(failures),
        "requests_per_s": round(len(latencies) / elapsed, 2),
        "latency_ms_p50": round(float(np.percentile(values, 50)), 1),
        "latency_ms_p90": round(float(np.percentile(values, 90)), 1),
        "latency_ms_p99": round(float(np.percentile(values, 99)), 1),
        "seconds": round(elapsed, 1),
    }


def main(argv=None) -> int:
    args = parse_args(argv)
    if not os.path.isdir(args.model_dir):
        print(f"error: no model directory {args.model_dir}; train one with python -m gnmt_tf.train", file=sys.stderr)
        return 2
    sentences = dev_sentences(args.model_dir)
    env = dict(os.environ, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL="2")
    records = []
    with tempfile.TemporaryDirectory() as work:
        base = os.path.join(work, "gnmt")
        print("exporting the model ...", file=sys.stderr, flush=True)
        subprocess.run([sys.executable, "-m", "export", "--model-dir", args.model_dir, "--output", base,
                        "--format", "saved_model"], env=env, check=True, capture_output=True, timeout=1800)
        for batching in (False, True):
            process, grpc_port, rest_port = start_server(base, batching)
            try:
                load(args.protocol, (grpc_port, rest_port), sentences, 1, 3.0)  # warm up
                for clients in args.clients:
                    print(f"batching {'on' if batching else 'off'}, {clients} client(s) ...", file=sys.stderr,
                          flush=True)
                    record = load(args.protocol, (grpc_port, rest_port), sentences, clients, args.seconds)
                    record.update(batching=batching, protocol=args.protocol,
                                  load_average=[round(v, 2) for v in os.getloadavg()])
                    records.append(record)
                    print(json.dumps(record), file=sys.stderr)
            finally:
                process.terminate()
                process.wait(timeout=60)
    result = {
        "machine": {"cpu_count": os.cpu_count(), "platform": platform.platform()},
        "model_dir": args.model_dir,
        "request": "one sentence per request, dev sentences round robin",
        "records": records,
    }
    write_report(args.output, result, __file__, argv)
    print("| batching | clients | requests/s | p50 ms | p90 ms | p99 ms | failures |")
    print("|---|---|---|---|---|---|---|")
    for r in records:
        print(f"| {'on' if r['batching'] else 'off'} | {r['clients']} | {r['requests_per_s']} | "
              f"{r['latency_ms_p50']} | {r['latency_ms_p90']} | {r['latency_ms_p99']} | {r['failures']} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
