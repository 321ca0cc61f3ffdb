"""The launch files for the real TF Serving: config, batching parameters and the start script."""

import os
import stat
import subprocess

import pytest
from google.protobuf import text_format
from tensorflow_serving.config import model_server_config_pb2

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SERVING = os.path.join(ROOT, "serving")
SCRIPT = os.path.join(SERVING, "run_tf_serving.sh")

# A stand-in for the server binary / docker: prints its arguments and the config it was given.
FAKE = """#!/usr/bin/env bash
printf '%s\\n' "$0" "$@"
for arg in "$@"; do
  case "$arg" in --model_config_file=*) cat "${arg#--model_config_file=}" 2>/dev/null || true;; esac
done
"""


def read_config(text):
    return text_format.Parse(text, model_server_config_pb2.ModelServerConfig())


def test_models_config_is_a_valid_model_server_config():
    with open(os.path.join(SERVING, "models.config"), encoding="utf-8") as handle:
        config = read_config(handle.read())
    [model] = config.model_config_list.config
    assert (model.name, model.base_path, model.model_platform) == ("gnmt", "/models/gnmt", "tensorflow")
    assert model.model_version_policy.latest.num_versions == 1


def fake_path(tmp_path, *commands):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for command in commands:
        path = bin_dir / command
        path.write_text(FAKE)
        path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return f"{bin_dir}:/usr/bin:/bin"


def model_base(tmp_path):
    base = tmp_path / "models" / "translator"
    (base / "3").mkdir(parents=True)
    return base


def run_script(tmp_path, path, *args, **env):
    return subprocess.run(["bash", SCRIPT, *args], capture_output=True, text=True, timeout=60,
                          env={"PATH": path, "HOME": str(tmp_path), **env})


def test_script_runs_the_binary_with_the_config_batching_and_ports(tmp_path):
    base = model_base(tmp_path)
    result = run_script(tmp_path, fake_path(tmp_path, "tensorflow_model_server"), str(base), REST_PORT="9501")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].endswith("tensorflow_model_server")
    assert "--port=8500" in lines and "--rest_api_port=9501" in lines and "--enable_batching" in lines
    assert any(line.startswith("--batching_parameters_file=") and line.endswith("batching_parameters.txt")
               for line in lines)
    config = read_config("\n".join(lines[lines.index("model_config_list {"):]))
    [model] = config.model_config_list.config
    assert (model.name, model.base_path) == ("translator", str(base))


def test_script_falls_back_to_the_official_container(tmp_path):
    base = model_base(tmp_path)
    result = run_script(tmp_path, fake_path(tmp_path, "docker"), str(base), TF_SERVING_VERSION="2.21.0",
                        BATCHING="0", XLA="1")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[1:3] == ["run", "--rm"]
    assert "tensorflow/serving:2.21.0" in lines
    assert f"{base}:/models/translator:ro" in lines
    assert "--model_config_file=/config/models.config" in lines and "--enable_batching" not in lines
    assert "--xla_cpu_compilation_enabled=true" in lines


def test_the_container_is_by_default_the_release_the_exports_are_checked_against(tmp_path):
    """Not this environment's TensorFlow, which may be newer than any TF Serving release."""
    from export.serving_runtime import OPS_FILE, TF_SERVING_RELEASE

    result = run_script(tmp_path, fake_path(tmp_path, "docker"), str(model_base(tmp_path)))
    assert result.returncode == 0, result.stderr
    assert "tensorflow/serving:2.20.0" in result.stdout.splitlines() and TF_SERVING_RELEASE == "2.20.0"
    with open(OPS_FILE, encoding="utf-8") as handle:
        assert f"TF Serving {TF_SERVING_RELEASE} " in handle.readline()  # the op list is that release's


@pytest.mark.parametrize("case", ["no_server", "no_versions", "missing_dir"])
def test_script_errors_are_clear(tmp_path, case):
    base = model_base(tmp_path)
    path = fake_path(tmp_path, "tensorflow_model_server")
    if case == "no_server":
        result = run_script(tmp_path, "/usr/bin:/bin", str(base))
        message = "neither tensorflow_model_server nor docker is on PATH"
    elif case == "no_versions":
        os.rmdir(base / "3")
        result = run_script(tmp_path, path, str(base))
        message = "has no numbered version directory"
    else:
        result = run_script(tmp_path, path, str(tmp_path / "nowhere"))
        message = "no such directory"
    assert result.returncode == 1 and message in result.stderr


def test_batching_parameters_parse_as_tf_serving_batching_parameters():
    from serving.config import load_batching_parameters_file

    options = load_batching_parameters_file(os.path.join(SERVING, "batching_parameters.txt"))
    assert (options.max_batch_size, options.batch_timeout_micros) == (256, 5000)
    assert options.enable_large_batch_splitting and options.max_execution_batch_size == 32
