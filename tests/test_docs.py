"""The documentation cannot rot: its commands parse with today's command lines, its Python runs.

Every ``python -m MODULE ...`` in a ```sh block of README.md and docs/*.md is parsed with that
module's ``build_parser()``, so a renamed or removed flag fails here; the Python blocks of
docs/python_api.md run against a trained model. (The curl calls of docs/serving.md run against
the local server in tests/serving/test_serving_client.py.)
"""

import contextlib
import glob
import importlib
import io
import os
import re
import shlex

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PAGES = [os.path.join(ROOT, "README.md")] + sorted(glob.glob(os.path.join(ROOT, "docs", "*.md")))


def code_blocks(path, language):
    """The ```language blocks of a Markdown file, with shell line continuations joined."""
    text = open(path, encoding="utf-8").read()
    blocks = re.findall(rf"^```{language}\n(.*?)^```", text, flags=re.S | re.M)
    return [block.replace("\\\n", " ") for block in blocks]


def python_commands(path):
    """(module, args) of every ``python -m`` command in the shell blocks of ``path``."""
    found = []
    for block in code_blocks(path, "sh"):
        for line in block.splitlines():
            for part in re.split(r"\|\||&&|\||;", line):
                words = shlex.split(part, comments=True)
                if len(words) >= 3 and words[0] in ("python", "python3") and words[1] == "-m":
                    args, skip = [], False
                    for word in words[3:]:  # drop redirections and their targets
                        if skip:
                            skip = False
                        elif word in ("<", ">", "2>"):
                            skip = True
                        else:
                            args.append(word)
                    found.append((words[2], args))
    return found


COMMANDS = [(os.path.relpath(page, ROOT), module, args) for page in PAGES for module, args in python_commands(page)]


def test_the_docs_have_commands_for_every_user():
    modules = {module for _, module, _ in COMMANDS}
    assert {"gnmt_tf.train", "gnmt_tf.translate", "gnmt_tf.evaluate", "export", "serving.server",
            "serving.client", "gnmt_tf.report"} <= modules


@pytest.mark.parametrize("page, module, args", COMMANDS, ids=[f"{p}:{m}:{' '.join(a)[:40]}" for p, m, a in COMMANDS])
def test_documented_command_lines_parse(page, module, args):
    if module == "pytest":
        return
    parser = importlib.import_module(f"{module}.__main__" if module == "export" else module).build_parser()
    with contextlib.redirect_stderr(io.StringIO()) as errors:
        try:
            parser.parse_args(args)
        except SystemExit:
            pytest.fail(f"{page}: python -m {module} {' '.join(args)}: {errors.getvalue().strip()}")


def test_documented_scripts_exist():
    for page in PAGES:
        for block in code_blocks(page, "sh"):
            for script in re.findall(r"(?:^|\s)((?:serving|benchmarks)/[\w./-]+\.(?:sh|py))", block):
                assert os.path.exists(os.path.join(ROOT, script)), f"{page} names {script}"


def test_python_api_page_runs(trained_number_model, tmp_path, monkeypatch):
    """Each Python block of docs/python_api.md, with runs/en-fr standing for a trained model."""
    model_dir, _ = trained_number_model
    monkeypatch.chdir(tmp_path)
    blocks = code_blocks(os.path.join(ROOT, "docs", "python_api.md"), "python")
    assert len(blocks) >= 3
    for block in blocks:
        code = block.replace('"runs/en-fr"', repr(model_dir))
        output = io.StringIO()
        with contextlib.redirect_stdout(output):
            exec(compile(code, "docs/python_api.md", "exec"), {"__name__": "docs"})
