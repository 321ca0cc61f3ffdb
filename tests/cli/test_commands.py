"""Every command runs one way (gnmt_tf.cli.scaffold): as ``python -m MODULE`` and as its console script,
with the same help and without loading TensorFlow for it; a model (or config) it cannot use ends it with
exit status 2 and one ``error:`` line."""

import importlib
import os
import re
import subprocess
import sys

import pytest
from helpers import ROOT, package_metadata, run_in_process, run_side_by_side

from gnmt_tf.cli import commands

# The console script of each command, and what python -m runs: the registry's (gnmt_tf/cli/commands.py).
COMMANDS = {entry.script: entry.python_m for entry in commands.COMMANDS}
TENSORFLOW_MODULES = ("tensorflow", "tf_keras", "tensorflow_text")
WIDTH = "100"  # argparse wraps at the terminal's width (COLUMNS): the same for both ways


def imported_modules(importtime_stderr):
    """The modules ``python -X importtime`` reports (its lines: ``import time: self | cumulative | name``)."""
    return {line.split("|")[-1].strip() for line in importtime_stderr.splitlines() if line.startswith("import time:")}


def test_setup_py_installs_the_registry_read_without_importing_gnmt_tf():
    """setup.py runs before gnmt_tf's requirements are installed: it reads the registry by path, and reading
    it imports neither gnmt_tf nor TensorFlow."""
    registry = os.path.join(ROOT, "gnmt_tf", "cli", "commands.py")
    code = ("import runpy, sys; scripts = runpy.run_path(sys.argv[1])['console_scripts'](); "
            "print([m for m in sys.modules if m.split('.')[0] in ('gnmt_tf', 'tensorflow', 'yaml')]); "
            "print(*scripts, sep='\\n')")
    run = subprocess.run([sys.executable, "-I", "-c", code, registry], capture_output=True, text=True,
                         check=True)
    imported, *scripts = run.stdout.splitlines()
    assert imported == "[]"
    assert scripts == package_metadata().entry_points["console_scripts"]
    assert scripts[1] == "gnmt-translate = gnmt_tf.cli.translate:main"


def test_each_python_m_module_of_gnmt_tf_runs_its_registry_entry():
    """gnmt_tf/<command>.py exists for each ``python -m gnmt_tf.<command>`` of the registry, and only for
    those: the same file under every name, which runs the command the registry lists for its name."""
    package = os.path.join(ROOT, "gnmt_tf")
    shim = open(os.path.join(package, "train.py"), encoding="utf-8").read()
    shims = {f"gnmt_tf.{name[:-3]}" for name in os.listdir(package)
             if name.endswith(".py") and open(os.path.join(package, name), encoding="utf-8").read() == shim}
    assert shims == {entry.python_m for entry in commands.COMMANDS if entry.python_m.startswith("gnmt_tf.")}
    for entry in commands.COMMANDS:
        python_m = importlib.import_module(entry.python_m)
        if hasattr(python_m, "__path__"):  # a package: python -m runs its __main__
            python_m = importlib.import_module(f"{entry.python_m}.__main__")
        assert python_m.COMMAND is importlib.import_module(entry.defined_in).COMMAND
        assert python_m.COMMAND.names is entry


def test_a_command_the_registry_does_not_list_is_an_error_naming_the_registry():
    with pytest.raises(commands.UnlistedCommand, match=r"commands.py lists no command .*'gnmt_tf.nope'"):
        commands.load_command("gnmt_tf.nope")
    with pytest.raises(commands.UnlistedCommand, match="defined_in is 'gnmt_tf.cli.common'"):
        commands.defined_in("gnmt_tf.cli.common")


def test_each_console_script_prints_the_help_of_python_m(monkeypatch, capsys):
    """The scripts of setup.py's metadata, called as the script pip writes calls them (``sys.exit(main())``,
    arguments from sys.argv), against ``python -m MODULE --help`` in a process of its own."""
    scripts = dict(entry.split(" = ") for entry in package_metadata().entry_points["console_scripts"])
    assert set(scripts) == set(COMMANDS)
    runs = run_side_by_side(*[([sys.executable, "-X", "importtime", "-m", module, "--help"], None)
                              for module in COMMANDS.values()], env=dict(os.environ, COLUMNS=WIDTH))
    monkeypatch.setenv("COLUMNS", WIDTH)
    for (script, module), python_m in zip(COMMANDS.items(), runs):
        assert python_m.returncode == 0, (module, python_m.stderr[-2000:])
        loaded = {name for name in imported_modules(python_m.stderr) if name.split(".")[0] in TENSORFLOW_MODULES}
        assert not loaded, f"python -m {module} --help imports {sorted(loaded)}"

        target_module, function = scripts[script].split(":")
        main = getattr(importlib.import_module(target_module), function)
        monkeypatch.setattr(sys, "argv", [os.path.join("venv", "bin", script), "--help"])
        with pytest.raises(SystemExit) as stop:
            sys.exit(main())
        assert stop.value.code == 0, script
        by_script = capsys.readouterr().out

        # Only the name differs: the usage line names what was started (and wraps after it), examples too.
        prog = f"python -m {module}"
        assert python_m.stdout.startswith(f"usage: {prog} ") and by_script.startswith(f"usage: {script} ")
        usage, rest = python_m.stdout.split("\n\n", 1)
        script_usage, script_rest = by_script.split("\n\n", 1)
        assert script_usage.replace(script, prog, 1).split() == usage.split(), script
        assert re.sub(rf"^  {script}(?= |$)", f"  {prog}", script_rest, flags=re.M) == rest, script


def test_a_model_or_config_it_cannot_use_is_exit_2_and_one_error_line(tmp_path):
    """Each command on a model directory (or config, or model list) that does not exist, or a file where a
    directory belongs: status 2, nothing on stdout, one line on stderr, and nothing written."""
    missing, a_file, pairs = str(tmp_path / "missing"), tmp_path / "a_file", tmp_path / "pairs.tsv"
    a_file.write_text("not a directory\n")
    pairs.write_text("one two\tun deux\n")
    output = tmp_path / "output"
    bad = {
        "gnmt_tf.train": ["--model-dir", str(a_file), "--max-steps", "1"],
        "gnmt_tf.translate": ["--model-dir", missing],
        "gnmt_tf.evaluate": ["--model-dir", missing, "--test", str(pairs)],
        "gnmt_tf.score": ["--model-dir", missing],
        "gnmt_tf.distill": ["--model-dir", missing, "--train", str(pairs), "--output", str(output / "distilled.tsv")],
        "gnmt_tf.average": ["--model-dir", missing],
        "gnmt_tf.shortlist": ["--model-dir", missing, "--train", str(pairs)],
        "gnmt_tf.report": ["--model-dir", missing, "--output", str(output / "curves.png")],
        "gnmt_tf.summary": ["--config", missing + ".yaml"],
        "export": ["--model-dir", missing, "--output", str(output), "--format", "saved_model"],
        # A missing --model_base_path is waited for, as tensorflow_model_server does: the list of models is bad.
        "serving.server": ["--model_config_file", missing + ".config"],
        "serving.client": ["--rest", "http://127.0.0.1:9", "--model", ""],  # refused before sending
    }
    assert set(bad) == set(COMMANDS.values())
    for module, args in bad.items():
        result = run_in_process([sys.executable, "-m", module, *args], stdin="")
        assert (result.returncode, result.stdout) == (2, ""), (module, result.stdout[-2000:], result.stderr[-2000:])
        [line] = result.stderr.splitlines()
        assert line.startswith("error: "), (module, line)
        assert ("model name" if module == "serving.client" else str(tmp_path)) in line, (module, line)
    assert not output.exists()


def test_the_config_flags_name_every_shipped_config():
    """--config of train and summary lists the configs of configs/ as they are, small_long too."""
    from gnmt_tf.config import builtin_config_names

    names = builtin_config_names()
    assert {"small", "small_long", "tiny"} <= set(names)
    for module in ("gnmt_tf.cli.train", "gnmt_tf.cli.summary"):
        parser = importlib.import_module(module).COMMAND.build_parser(prog="gnmt")
        [config] = [action for action in parser._actions if "--config" in action.option_strings]
        listed = re.match(r"YAML file or shipped config name: (.*?) \(default: ", config.help).group(1)
        assert listed.split(", ") == names, module
