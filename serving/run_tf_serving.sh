#!/usr/bin/env bash
# Start TensorFlow Serving on a model exported with `python -m export --format saved_model`.
#
#   serving/run_tf_serving.sh BASE/NAME            # e.g. serving_models/gnmt
#
# Uses the tensorflow_model_server binary if it is on PATH, otherwise the official
# tensorflow/serving container (docker). The server needs the tensorflow-text ops, which the
# stock binary and container link. Exports are checked against the ops of one TF Serving
# release (TF_SERVING_VERSION, default: that release; docs/serving.md, section 6).
#
# Environment: GRPC_PORT (8500), REST_PORT (8501), TF_SERVING_VERSION, BATCHING (1: on, 0: off),
# XLA (1: --xla_cpu_compilation_enabled, for exports made with --xla).
set -euo pipefail

if [[ $# -ne 1 || "$1" == -h || "$1" == --help ]]; then
  sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'
  exit 2
fi
base_path="$(cd "$1" 2>/dev/null && pwd)" || { echo "error: no such directory: $1" >&2; exit 1; }
name="$(basename "$base_path")"
if ! ls "$base_path" | grep -Eq '^[0-9]+$'; then
  echo "error: $base_path has no numbered version directory; export one with python -m export" >&2
  exit 1
fi
here="$(cd "$(dirname "$0")" && pwd)"
grpc_port="${GRPC_PORT:-8500}"
rest_port="${REST_PORT:-8501}"
# The release the exports' ops are checked against (export/serving_runtime.py: TF_SERVING_RELEASE).
release_file="$here/../export/serving_runtime.py"
version="${TF_SERVING_VERSION:-$(sed -n 's/^TF_SERVING_RELEASE = "\([^"]*\)".*/\1/p' "$release_file" 2>/dev/null || true)}"

# The config with this model's name and path (the shipped models.config is the template).
config_dir="$(mktemp -d)"
trap 'rm -rf "$config_dir"' EXIT
cp "$here/batching_parameters.txt" "$config_dir/batching_parameters.txt"
write_config() {  # $1: the base path as the server sees it
  sed -e "s|name: \"gnmt\"|name: \"$name\"|" -e "s|base_path: \"/models/gnmt\"|base_path: \"$1\"|" \
    "$here/models.config" > "$config_dir/models.config"
}
flags=(--port="$grpc_port" --rest_api_port="$rest_port")
if [[ "${BATCHING:-1}" == 1 ]]; then
  flags+=(--enable_batching --batching_parameters_file=CONFIG/batching_parameters.txt)
fi
if [[ "${XLA:-0}" == 1 ]]; then
  flags+=(--xla_cpu_compilation_enabled=true)
fi

if command -v tensorflow_model_server >/dev/null 2>&1; then
  write_config "$base_path"
  echo "starting tensorflow_model_server: model $name from $base_path, gRPC :$grpc_port, REST :$rest_port" >&2
  tensorflow_model_server --model_config_file="$config_dir/models.config" "${flags[@]//CONFIG/$config_dir}"
elif command -v docker >/dev/null 2>&1; then
  if [[ -z "$version" ]]; then
    echo "error: no TF_SERVING_RELEASE in $release_file; set TF_SERVING_VERSION" >&2
    exit 1
  fi
  write_config "/models/$name"
  echo "starting tensorflow/serving:$version (docker): model $name from $base_path, gRPC :$grpc_port, REST :$rest_port" >&2
  docker run --rm -p "$grpc_port:$grpc_port" -p "$rest_port:$rest_port" \
    -v "$base_path:/models/$name:ro" -v "$config_dir:/config:ro" \
    "tensorflow/serving:$version" --model_config_file=/config/models.config "${flags[@]//CONFIG//config}"
else
  echo "error: neither tensorflow_model_server nor docker is on PATH; for development, run the local" >&2
  echo "server with the same flags: python -m serving.server --model_name $name --model_base_path $base_path" >&2
  exit 1
fi
