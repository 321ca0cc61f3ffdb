"""The documentation cannot rot: its commands parse and run, its Python runs, and both give what they promise.

Every ``python -m MODULE ...`` of README.md and docs/*.md (in ```sh blocks, and in inline code
spans with arguments) is parsed with that command's parser, so a renamed or removed
flag fails here. Then every one that can run in seconds runs, in a copy of the docs'
world laid out in a temporary directory: ``runs/en-fr`` is a copy of the session's trained number
model (English digit words -> French), ``in.txt`` holds number sentences, ``serving_models/``,
``tflite_models/`` and ``pictures/`` are empty, and the local server serves the session's export.
Each run's output is checked, not only its exit status. The commands that cannot run here are
listed in PARSE_ONLY with the reason. The Python blocks of docs/python_api.md and docs/serving.md's
SavedModel block run too, with checked output. The README's quickstart commands run here like any other
(it shows no output: the reader's model is not the number model). (The curl calls of docs/serving.md run against the local server in
tests/serving/test_serving_client.py.)
"""

import ast
import contextlib
import glob
import importlib
import io
import json
import os
import re
import shlex
import shutil
import sys
from typing import NamedTuple, Optional, Tuple

import numpy as np
import pytest

from helpers import (
    ENGLISH_NUMBERS,
    FRENCH_NUMBERS,
    number_word_pairs,
    package_metadata,
    run_in_process,
)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PAGES = [os.path.join(ROOT, "README.md")] + sorted(glob.glob(os.path.join(ROOT, "docs", "*.md")))
ENV = dict(os.environ, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL="2")
sys.path.insert(0, os.path.join(ROOT, "tests", "serving"))  # serving_helpers: the local server as a process
from serving_helpers import ServerProcess, free_port  # noqa: E402

SEPARATORS = ("|", "||", "&&", ";", "&")


class DocCommand(NamedTuple):
    """One documented ``python -m`` command: module, arguments, and where its input comes from."""

    page: str
    module: str
    args: Tuple[str, ...]
    stdin_text: Optional[str] = None  # ``echo TEXT | python -m ...``
    stdin_file: Optional[str] = None  # ``python -m ... < FILE``
    stdout_file: Optional[str] = None  # ``python -m ... > FILE``

    @property
    def key(self) -> str:
        return " ".join((self.module,) + self.args)


def code_blocks(path, language):
    """The ```language blocks of a Markdown file, with shell line continuations joined."""
    text = open(path, encoding="utf-8").read()
    blocks = re.findall(rf"^```{language}\n(.*?)^```", text, flags=re.S | re.M)
    return [block.replace("\\\n", " ") for block in blocks]


def shell_words(line):
    """Words and operators of one shell line, as the shell splits them (quotes removed, comments dropped)."""
    lexer = shlex.shlex(line, posix=True, punctuation_chars="|&;<>")
    lexer.whitespace_split = True
    return list(lexer)


def commands_of_line(page, line):
    found, words, previous, separator = [], [], None, None
    for word in shell_words(line) + [";"]:
        if word not in SEPARATORS:
            words.append(word)
            continue
        if len(words) >= 3 and words[0] in ("python", "python3") and words[1] == "-m":
            args, redirections, rest = [], {}, iter(words[3:])
            for argument in rest:
                if argument in ("<", ">"):
                    redirections[argument] = next(rest)
                else:
                    args.append(argument)
            echoed = previous[1:] if separator == "|" and previous and previous[0] == "echo" else None
            found.append(DocCommand(page, words[2], tuple(args), " ".join(echoed) if echoed else None,
                                    redirections.get("<"), redirections.get(">")))
        previous, separator, words = words, word, []
    return found


def python_commands(path):
    """Every ``python -m`` command of ``path``: its ```sh blocks' lines, then its inline code spans.

    An inline span without arguments (`python -m gnmt_tf.evaluate`) names a tool, not a command.
    """
    page = os.path.relpath(path, ROOT)
    found = [command for block in code_blocks(path, "sh") for line in block.splitlines()
             for command in commands_of_line(page, line)]
    prose = re.sub(r"^```.*?^```", "", open(path, encoding="utf-8").read(), flags=re.S | re.M)
    for span in re.findall(r"`(python3? -m [^`]*)`", prose):
        words = span.split()
        if len(words) > 3:
            found.append(DocCommand(page, words[2], tuple(words[3:])))
    return found


COMMANDS = [command for page in PAGES for command in python_commands(page)]

# Inline spans that show part of a command, not one to type.
FRAGMENTS = {
    "gnmt_tf.train --strategy NAME": "NAME stands for any of the strategies listed after it",
    "export --format saved_model": "names one option of the export command shown in full above it",
    "export ... --quantize int8": "the elided export command shown in full in docs/serving.md",
    "export ... --shortlist": "the elided export command shown in full in docs/tflite.md",
}

# Documented commands that are only parsed here, and why they cannot run in seconds.
PARSE_ONLY = {
    "pytest -q": "the test suite itself: test_the_readme_test_command_collects_the_suite collects it",
    "gnmt_tf.train": "trains the small config on the gettext catalogs for ten minutes",
    "gnmt_tf.train --config tiny --set model.vocab_size=1000 --max-steps 100 --model-dir runs/smoke":
        "the README's smoke run: two minutes of reading the gettext catalogs and training; tests/cli/test_train_cli.py "
        "runs the command on a small TSV",
    "gnmt_tf.train --target-lang de": "trains the small config on the gettext catalogs for ten minutes",
    "gnmt_tf.train --model-dir runs/en-fr --set localization.placeholders=true":
        "trains the small config for ten minutes (on runs/en-fr, the number model without slot tokens, it is "
        "refused); tests/cli/test_train_placeholders.py trains a tiny model with the option",
    "gnmt_tf.translate --model-dir runs/en-fr --glossary terms.tsv --input messages.txt":
        "a glossary needs a model trained with localization.placeholders, which the number model is not; "
        "tests/export/test_export_placeholders.py translates with a glossary",
    "gnmt_tf.train --set model.units=128 --max-steps 200": "200 steps of the small config: minutes",
    "gnmt_tf.train --config gnmt_wmt14_enfr --train train.tsv.gz --dev newstest2013.tsv --model-dir runs/wmt14-enfr":
        "the paper's recipe: WMT'14 data that is not here and days of training",
    "gnmt_tf.train --refine qat --init-from runs/en-fr --model-dir runs/en-fr-qat":
        "fine-tunes for the small config's ten minutes; tests/quantization/test_qat.py runs it for 30 steps",
    "gnmt_tf.train --refine rl --init-from runs/en-fr --model-dir runs/en-fr-rl":
        "refines until dev BLEU stalls: minutes; tests/training/test_reinforce.py runs it for 20 steps",
    "gnmt_tf.train --strategy mirrored --config gnmt_wmt14_enfr --train train.tsv.gz --dev newstest2013.tsv "
    "--set training.batch_size=1024": "several GPUs and WMT'14 data",
    "gnmt_tf.train --strategy mirrored --logical-cpus 2 --max-steps 100 --model-dir runs/en-fr-mirrored":
        "100 steps of the small config on two logical CPUs: minutes; tests/parallel/test_distributed.py "
        "trains the tiny config mirrored over two logical CPUs",
    "gnmt_tf.train --strategy multi_worker --config gnmt_wmt14_enfr --train /data/train.tsv.gz --dev "
    "/data/newstest2013.tsv --model-dir /shared/runs/wmt14-enfr --set training.batch_size=2048":
        "a cluster of machines (TF_CONFIG) and WMT'14 data; tests/parallel/test_distributed.py runs a local cluster",
    "gnmt_tf.train --strategy parameter_server":
        "a ps or worker task of a cluster of machines; tests/parallel/test_distributed.py runs a local cluster",
    "gnmt_tf.train --strategy parameter_server --config gnmt_wmt14_enfr --train train.tsv.gz --dev "
    "newstest2013.tsv --model-dir runs/wmt14-enfr":
        "the chief of a cluster of machines, WMT'14 data; tests/parallel/test_distributed.py runs a local cluster",
    "gnmt_tf.train --strategy tpu --config gnmt_wmt14_enfr --train train.tsv.gz --dev newstest2013.tsv "
    "--model-dir runs/wmt14-enfr --set training.batch_size=1024": "a TPU and WMT'14 data",
    "gnmt_tf.train --logical-cpus 2 --set parallel.mode=model --max-steps 100 --model-dir runs/en-fr-mp":
        "100 model-parallel steps of the small config: minutes; tests/parallel/test_model_parallel.py checks "
        "model-parallel outputs and gradients on two devices",
    "gnmt_tf.summary --config gnmt_wmt14_enfr":
        "builds the paper's 262M-parameter model: ~20 s and 2 GB; tests/cli/test_summary_cli.py checks the "
        "printed count against one by hand on other configs",
    "export --model-dir runs/en-fr --output serving_models/gnmt --format saved_model --quantize int8":
        "the same command line is run by tests/export/test_export_int8.py (int8_exports), a minute of exporting",
    "export --model-dir runs/en-fr --output tflite_models/gnmt --format tflite --quantize int8":
        "the same command line is run by tests/export/test_export_int8.py (int8_exports), a minute of exporting",
    "export --model-dir runs/en-fr --output serving_models/gnmt --format saved_model":
        "a SavedModel export: tests/cli/test_export_cli.py runs this command line (and its --beam-width and "
        "--xla variants) and checks what the artifacts translate",
    "export --model-dir runs/en-fr --output tflite_models/gnmt --format tflite":
        "a TFLite conversion: tests/export/test_export_saved_model.py runs this command line and translates "
        "with the result",
    "gnmt_tf.shortlist --model-dir runs/en-fr":
        "reads this machine's 60k gettext catalog pairs with the model's wordpieces; tests/cli/test_shortlist_cli.py "
        "runs the command with --train on the number task (the docs' world has a shortlist learned from it)",
    "gnmt_tf.shortlist --model-dir DIR": "DIR stands for a model; the command is the one above it",
    "export --model-dir runs/en-fr --output tflite_models/gnmt --format tflite --shortlist":
        "a TFLite conversion: tests/export/test_export_shortlist.py runs this command line on a model with a "
        "shortlist and translates with the result",
    "export.serving_runtime write-ops":
        "rewrites the committed op list from a TensorFlow 2.20 environment (a minute or two of pip on a new "
        "machine); tests/export/test_serving_runtime.py checks that the list is what it would write",
    "export.serving_runtime check serving_models/gnmt/1":
        "needs that TensorFlow 2.20 environment; tests/export/test_serving_runtime.py runs this command on the "
        "session's export",
    "serving.server --model_name gnmt --model_base_path $PWD/serving_models/gnmt":
        "docs/serving.md's server command, which runs here, with the ports 8500 and 8501 that may be taken "
        "on a shared machine",
    "gnmt_tf.train --train data/train.tsv --model-dir runs/my-model":
        "trains the small config for ten minutes on the reader's own file; tests/cli/test_train_cli.py trains "
        "from a TSV through the command line",
    "gnmt_tf.train --train data/train.en,data/train.fr --dev data/dev.en,data/dev.fr --model-dir runs/my-model":
        "trains the small config for ten minutes on the reader's own aligned files; tests/data/test_data.py "
        "reads aligned files (test_read_aligned)",
    "gnmt_tf.train --config gnmt_wmt14_ende --train tfds:wmt14_translate/de-en --dev tfds:wmt14_translate/de-en "
    "--target-lang de --model-dir runs/wmt14-ende":
        "downloads WMT'14 through tensorflow-datasets (internet, tens of GB) and trains the paper's model for days",
    "gnmt_tf.train --config small_long": "trains the small_long config on the gettext catalogs for an hour",
    "gnmt_tf.train --model-dir runs/en-fr":
        "resumes a run for the rest of its budget: minutes; tests/cli/test_train_cli.py resumes a killed run "
        "(test_killed_run_resumes_to_the_same_state)",
    # docs/ensembles_and_students.md: its commands need two trained models and minutes each.
    "gnmt_tf.train --model-dir runs/a": "trains the small config on the gettext catalogs for ten minutes",
    "gnmt_tf.train --model-dir runs/b --set training.seed=2 --vocab-and-splits-from runs/a":
        "ten minutes of training; tests/cli/test_train_held_out.py trains with --vocab-and-splits-from and "
        "decodes the two models as one ensemble",
    "gnmt_tf.evaluate --model-dir runs/a --model-dir runs/b --test runs/a/test.tsv":
        "needs the two models above; tests/inference/test_ensemble_translator.py evaluates an ensemble through "
        "the command line",
    "gnmt_tf.translate --model-dir runs/a --model-dir runs/b":
        "needs the two models above; tests/inference/test_ensemble_translator.py translates with an ensemble "
        "through the command line",
    "export --model-dir runs/a --model-dir runs/b --output serving_models/gnmt --format saved_model":
        "needs the two models above; tests/export/test_export_ensemble.py exports an ensemble through the "
        "command line and translates with the results",
    "gnmt_tf.evaluate --model-dir runs/a --last-checkpoints 4 --test runs/a/test.tsv":
        "needs runs/a's four newest checkpoints; tests/inference/test_ensemble_translator.py runs "
        "--last-checkpoints 2 on the fixture model",
    "gnmt_tf.distill --model-dir runs/a --model-dir runs/b --output runs/distilled.tsv":
        "translates the 60k built-in pairs with an ensemble: hours; tests/training/test_distillation.py "
        "distils a small TSV through the command line",
    "gnmt_tf.train --config student --model-dir runs/student --train runs/distilled.tsv --vocab-and-splits-from runs/a":
        "trains the student config for ten minutes on the distilled pairs",
    "gnmt_tf.summary --config small":
        "builds the small model: ~15 s; tests/cli/test_summary_cli.py checks the printed count against one by hand",
    "gnmt_tf.translate --model-dir runs/en-fr --po messages.pot --po-language fr --output fr.po":
        "needs a catalog of number sentences the docs' world does not have; tests/cli/test_translate_po.py runs "
        "this command line on a .pot of them and checks the catalog it writes, msgfmt --check included",
}

# Documented commands that run here (see test_documented_commands_run): every other one.
RUN_HERE = sorted({c.key for c in COMMANDS} - set(PARSE_ONLY) - set(FRAGMENTS))

# The sentences the docs' examples use, in the number model's language.
STAND_INS = {"Open the file": "three one four", "Save as...": "nine eight"}
IN_TXT = ["three one four", "", "nine", "two five eight nine", "seven six"]
# pairs.tsv for python -m gnmt_tf.score: right translations, a wrong one, an empty source.
PAIRS_TSV = [("three one four", "trois un quatre"), ("nine", "huit"), ("", "un"), ("seven six", "sept six")]


def french(sentence):
    """The number task's reference translation: word for word (tests/helpers.py: number_word_pairs)."""
    return " ".join(FRENCH_NUMBERS[ENGLISH_NUMBERS.index(word)] for word in sentence.split())


def number_sentence(text):
    """A documented example sentence as one the fixture model knows."""
    if all(word in ENGLISH_NUMBERS for word in text.split()):
        return text
    assert text in STAND_INS, f"no number sentence stands in for the documented {text!r}: add one to STAND_INS"
    return STAND_INS[text]


def test_the_docs_have_commands_for_every_user():
    modules = {command.module for command in COMMANDS}
    assert {"gnmt_tf.train", "gnmt_tf.translate", "gnmt_tf.evaluate", "gnmt_tf.average", "gnmt_tf.report",
            "gnmt_tf.summary", "gnmt_tf.shortlist", "export", "serving.server", "serving.client"} <= modules


def test_every_documented_command_is_run_or_says_why_not():
    documented = {command.key for command in COMMANDS}
    assert not set(PARSE_ONLY) - documented, "PARSE_ONLY lists commands the docs no longer have"
    assert not set(FRAGMENTS) - documented, "FRAGMENTS lists spans the docs no longer have"
    assert not set(PARSE_ONLY) & set(FRAGMENTS)
    checked = {key.split()[0] for key in RUN_HERE}
    assert checked <= set(CHECKS), f"no check for the documented commands of {checked - set(CHECKS)}"
    assert len(RUN_HERE) >= 14  # translate x4, evaluate, export x2, average, report, server, client x3, --help x2


# The documented commands of this project (pytest's line: test_the_readme_test_command_collects_the_suite).
OURS = [c for c in COMMANDS if c.key not in FRAGMENTS and c.module != "pytest"]


@pytest.mark.parametrize("command", OURS, ids=[f"{c.page}:{c.key[:60]}" for c in OURS])
def test_documented_command_lines_parse(command):
    module = importlib.import_module(f"{command.module}.__main__" if command.module == "export" else command.module)
    # export.serving_runtime also runs in TF Serving's runtime, without gnmt_tf: a parser of its own.
    build_parser = module.COMMAND.build_parser if hasattr(module, "COMMAND") else module.build_parser
    with contextlib.redirect_stderr(io.StringIO()) as errors, contextlib.redirect_stdout(io.StringIO()):
        try:
            build_parser().parse_args(list(command.args))
        except SystemExit as stop:
            if stop.code != 0:  # --help exits 0
                pytest.fail(f"{command.page}: python -m {command.key}: {errors.getvalue().strip()}")


def test_the_readme_test_command_collects_the_suite(monkeypatch):
    """The README's test command (what .ci/run runs on a fresh machine): its install names extras that
    setup.py defines, with pytest and the plugin pyproject.toml's pytest options need; pyproject.toml
    points pytest at tests/, and the command's pytest line collects every test file there (collected
    here, not run)."""
    [command] = re.findall(r"^<!-- test-command -->\n```sh\n(.*)\n```", open(PAGES[0], encoding="utf-8").read(),
                           flags=re.M)
    install, run = command.split(" && ")
    [extra] = re.fullmatch(r'pip install -e "\.\[(\w+)\]"', install).groups()
    requirements = {re.split(r"[<>=!~\[ ]", line)[0] for line in package_metadata().extras_require[extra]}
    assert "pytest" in requirements
    pytest_config = re.search(r"^\[tool\.pytest\.ini_options\]\n(.*?)(?:^\[|\Z)",
                              open(os.path.join(ROOT, "pyproject.toml"), encoding="utf-8").read(), flags=re.S | re.M)
    assert pytest_config and re.search(r'^testpaths = \["tests"\]$', pytest_config.group(1), flags=re.M)
    if re.search(r"^addopts = .*-n \d", pytest_config.group(1), flags=re.M):
        assert "pytest-xdist" in requirements  # the plugin that reads -n
    words = shlex.split(run)
    assert words[:3] == ["python", "-m", "pytest"]

    class Collected:  # the test ids of the session below
        ids = []

        def pytest_collection_finish(self, session):
            self.ids = [item.nodeid for item in session.items]

    # Collected in this process, from ROOT as the command runs, with one worker (-n 0 after the config's
    # -n): the collection is the check, not the workers. The test modules are imported already, so this
    # costs seconds where a new process (TensorFlow's import, then every module's) costs 15 CPU-s.
    collected = Collected()
    monkeypatch.chdir(ROOT)
    with contextlib.redirect_stdout(io.StringIO()) as output:
        code = pytest.main([*words[3:], "--collect-only", "-n", "0", "-p", "no:cacheprovider"],
                           plugins=[collected])
    assert code == pytest.ExitCode.OK, output.getvalue()[-3000:]
    files = {test_id.split("::")[0] for test_id in collected.ids}
    with_tests = {os.path.relpath(path, ROOT) for path in glob.glob(os.path.join(ROOT, "tests", "**", "test_*.py"),
                                                                     recursive=True)
                  if re.search(r"^def test_", open(path, encoding="utf-8").read(), flags=re.M)}
    assert files == with_tests and "tests/test_docs.py::test_the_readme_test_command_collects_the_suite" in \
        collected.ids


def test_the_readme_names_every_console_script():
    scripts = {entry.split(" = ")[0] for entry in package_metadata().entry_points["console_scripts"]}
    named = set(re.findall(r"`(gnmt-[a-z]+)`", open(PAGES[0], encoding="utf-8").read()))
    assert named == scripts


def test_documented_scripts_exist():
    for page in PAGES:
        for block in code_blocks(page, "sh"):
            for script in re.findall(r"(?:^|\s)((?:serving|benchmarks)/[\w./-]+\.(?:sh|py))", block):
                assert os.path.exists(os.path.join(ROOT, script)), f"{page} names {script}"


# ------------------------------------------------------------------------------------------ running them
class DocsWorld:
    """The places the documented commands name, laid out under a temporary directory."""

    PLACES = ("runs/", "in.txt", "out.txt", "pairs.tsv", "test.tsv", "pictures/", "serving_models/", "tflite_models/")

    def __init__(self, root, model_dir, served_base):
        self.root = str(root)
        self.model_dir = os.path.join(self.root, "runs", "en-fr")
        shutil.copytree(model_dir, self.model_dir)
        write_number_shortlist(self.model_dir)
        shutil.copy(os.path.join(self.model_dir, "test.tsv"), self.path("test.tsv"))  # held out from train and dev
        with open(self.path("in.txt"), "w", encoding="utf-8") as handle:
            handle.writelines(line + "\n" for line in IN_TXT)
        with open(self.path("pairs.tsv"), "w", encoding="utf-8") as handle:
            handle.writelines(f"{source}\t{target}\n" for source, target in PAIRS_TSV)
        self.served_base = served_base
        self.rest_port = free_port()

    def path(self, word):
        return os.path.join(self.root, word)

    def argument(self, word):
        """A documented argument as it is run here: paths into the world, ports the server really has."""
        if word.startswith("$PWD/serving_models/"):
            return self.served_base  # served from the start: the session's export
        if word.startswith(self.PLACES):
            return self.path(word)
        if word.startswith("serving/"):
            return os.path.join(ROOT, word)
        ports = {"8500": "0", "8501": str(self.rest_port)}  # gRPC: a free port the server picks and logs
        return ports.get(word, word)

    def argv(self, command, grpc_port=None):
        args = [self.argument(word) for word in command.args]
        args = [word.replace("localhost:8501", f"127.0.0.1:{self.rest_port}")
                .replace("localhost:8500", f"127.0.0.1:{grpc_port}") for word in args]
        return [sys.executable, "-m", command.module, *args]

    def stdin(self, command):
        if command.stdin_text is not None:
            return number_sentence(command.stdin_text) + "\n"
        if command.stdin_file is not None:
            with open(self.path(command.stdin_file), encoding="utf-8") as handle:
                return handle.read()
        return None


def write_number_shortlist(model_dir):
    """The vocabulary shortlist of the number task, as python -m gnmt_tf.shortlist --train would learn it."""
    from gnmt_tf import model_files
    from gnmt_tf.data import shortlist as shortlists

    _, tokenizer = model_files.load_metadata(model_dir)
    sources, targets = shortlists.wordpiece_pairs(number_word_pairs(2000, seed=1, min_len=1), tokenizer.tokenize)
    model_files.write_shortlist(model_dir, shortlists.learn_shortlist(sources, targets, tokenizer.vocab_size, top_k=3,
                                                                 frequent=0, iterations=5))


def add_third_checkpoint(model_dir):
    """The newest checkpoint saved again as a third one: `--last 3` needs three (tiny keeps two)."""
    import tensorflow as tf

    from gnmt_tf import model_files

    model, _, _ = model_files.load_model_dir(model_dir, which="latest")
    directory = model_files.checkpoint_dir(model_dir)
    manager = tf.train.CheckpointManager(tf.train.Checkpoint(model=model), directory, max_to_keep=3)
    assert len(manager.checkpoints) == 2
    manager.save(checkpoint_number=int(manager.latest_checkpoint.rsplit("-", 1)[1]) + 1)
    return [os.path.basename(path) for path in manager.checkpoints]


def translated_lines(command, result, world):
    if command.stdout_file:
        return open(world.path(command.stdout_file), encoding="utf-8").read().splitlines()
    if "--output" in command.args:
        output = command.args[command.args.index("--output") + 1]
        assert result.stdout == ""
        return open(world.path(output), encoding="utf-8").read().splitlines()
    return result.stdout.splitlines()


def check_translate(command, result, world):
    if "--input" in command.args:
        with open(world.path(command.args[command.args.index("--input") + 1]), encoding="utf-8") as handle:
            sources = handle.read().splitlines()
    else:
        sources = world.stdin(command).splitlines()
    lines = translated_lines(command, result, world)
    assert f"translated {len(sources)} line{'' if len(sources) == 1 else 's'}" in result.stderr
    if "--n-best" not in command.args:
        assert lines == [french(source) for source in sources]
    else:  # INDEX ||| TEXT ||| SCORE, at most N per line, the best first; a blank line gets none
        width = int(command.args[command.args.index("--n-best") + 1])
        entries = [line.split(" ||| ") for line in lines]
        indices = [int(index) for index, _, _ in entries]
        assert sorted(set(indices)) == [i for i, source in enumerate(sources) if source]
        for i in set(indices):
            texts = [text for index, text, _ in entries if int(index) == i]
            scores = [float(score) for index, _, score in entries if int(index) == i]
            assert 1 <= len(texts) <= width and texts[0] == french(sources[i]) and len(set(texts)) == len(texts)
            assert scores == sorted(scores, reverse=True) and all(score < 0 for score in scores)
    if "--plot-attention" in command.args:
        from matplotlib.image import imread

        directory = world.path(command.args[command.args.index("--plot-attention") + 1])
        names = sorted(os.listdir(directory))
        assert names == [f"{i:04d}.png" for i in range(1, len(sources) + 1)]  # one per input line
        heights, widths = zip(*(imread(os.path.join(directory, name)).shape[:2] for name in names))
        blank, short, long = sources.index(""), sources.index("nine"), sources.index("two five eight nine")
        assert heights[blank] < min(h for i, h in enumerate(heights) if i != blank)  # a one-line note
        assert widths[long] > widths[short]  # more source pieces, more columns


def check_evaluate(command, result, world):
    with open(world.path(command.args[command.args.index("--test") + 1]), encoding="utf-8") as handle:
        pairs = [line for line in handle if line.strip()]
    if "--json" not in command.args:  # the text report: BLEU, its signature, and how it was decoded
        bleu = float(re.match(r"BLEU = ([\d.]+) ", result.stdout).group(1))
        assert bleu > 70 and "signature: nrefs:1" in result.stdout, result.stdout
        assert f"({len(pairs)} sentences in " in result.stdout and "beam 4, alpha" in result.stdout, result.stdout
        return
    report = json.loads(result.stdout)
    assert report["sentences"] == len(pairs)
    assert report["bleu"] > 70 and report["bleu_text"].startswith(f"BLEU = {report['bleu']:.2f}")
    assert report["signature"].startswith("nrefs:1") and report["beam_width"] == 4  # the tiny config's
    assert report["shortlist"] is ("--shortlist" in command.args)  # decoding.use_shortlist's default: off


def check_score(command, result, world):
    """One line per pair, in order: an empty source gets an empty line; the right translation of
    a sentence scores above a wrong one of comparable length; log P <= 0; lengths count EOS."""
    lines = result.stdout.splitlines()
    assert len(lines) == len(PAIRS_TSV) and lines[2] == "", result.stdout
    (score_right, log_right, length_right), (score_wrong, log_wrong, _), _, (_, _, length_two) = [
        tuple(map(float, line.split("\t"))) if line else None for line in lines
    ]
    assert log_right < 0 and log_wrong < log_right and score_wrong < score_right
    assert length_right >= 4 and length_two >= 3  # at least a piece per word, plus EOS
    assert f"scored {len(PAIRS_TSV)} pairs" in result.stderr


def check_average(command, result, world):
    from gnmt_tf import model_files

    last = int(command.args[command.args.index("--last") + 1])
    averaged = world.checkpoints[-last:]
    assert f"averaged {last} checkpoints ({', '.join(averaged)})" in result.stdout
    sources = open(os.path.join(model_files.averaged_dir(world.model_dir), "sources.txt"), encoding="utf-8").read()
    assert sources.split() == averaged
    assert model_files.find_checkpoint(world.model_dir, "averaged")


def check_report(command, result, world):
    from matplotlib.image import imread

    picture = os.path.join(world.model_dir, "training_curves.png")
    assert result.stdout.splitlines()[0] == f"wrote {picture}"
    assert result.stdout.splitlines()[1].startswith(f"last step {world.result.step}, training loss ")
    assert imread(picture).shape[:2] == (750, 1100)


def check_help(command, result, world):
    assert result.stdout.startswith(f"usage: python -m {command.module} ")


def check_client(command, result, world):
    if "--status" in command.args:
        assert [entry["state"] for entry in json.loads(result.stdout)] == ["AVAILABLE"]
        return
    expected = french(number_sentence(command.stdin_text))
    if "--scores" in command.args:
        score, text = result.stdout.rstrip("\n").split("\t")
        assert text == expected and float(score) < 0
    else:
        assert result.stdout == expected + "\n"


CHECKS = {
    "gnmt_tf.translate": check_translate, "gnmt_tf.evaluate": check_evaluate,
    "gnmt_tf.average": check_average, "gnmt_tf.report": check_report, "gnmt_tf.train": check_help,
    "serving.server": check_help, "serving.client": check_client, "gnmt_tf.score": check_score,
}


def documented_commands_to_run():
    """One DocCommand per key of RUN_HERE (a command documented on two pages runs once)."""
    by_key = {}
    for command in COMMANDS:
        if command.key in RUN_HERE:
            by_key.setdefault(command.key, command)
    return [by_key[key] for key in RUN_HERE]


def is_server(command):
    return command.module == "serving.server" and "--help" not in command.args


def test_documented_commands_run(trained_number_model, exported_number_model, tmp_path):
    """Every command of RUN_HERE against the docs' world; then each one's output is checked.

    The documented server serves the session's export from the start (the docs export first and then
    serve; here the export command runs at the same time), and the clients run once it serves.
    """
    from conftest import copy_version

    model_dir, result = trained_number_model
    world = DocsWorld(tmp_path / "docs", model_dir, copy_version(exported_number_model, str(tmp_path / "served")))
    world.checkpoints = add_third_checkpoint(world.model_dir)
    world.result = result
    commands = documented_commands_to_run()
    [server_command] = [c for c in commands if is_server(c)]
    clients = [c for c in commands if c.module == "serving.client"]
    others = [c for c in commands if c not in clients and c is not server_command]

    # The server runs as a process, as documented; the other commands, its clients too, run in this
    # process while it loads (main(args): the command's whole work, without another TensorFlow start).
    server = ServerProcess(world.argv(server_command)[3:], watchdog_seconds=600)
    try:
        results = {c: run_in_process(world.argv(c), world.stdin(c)) for c in others}
        server.wait_until_serving()
        results.update((c, run_in_process(world.argv(c, grpc_port=server.grpc_port), world.stdin(c)))
                       for c in clients)
        assert server.process.poll() is None, server.log[-3000:]
    finally:
        server.kill()
    for command, result in results.items():
        assert result.returncode == 0, (command.key, result.stderr[-3000:])
        assert "Traceback" not in result.stderr, (command.key, result.stderr[-3000:])
        CHECKS[command.module](command, result, world)

    # docs/serving.md's SavedModel block loads what the documented export writes (the session's export).
    [block] = [b for b in code_blocks(os.path.join(ROOT, "docs", "serving.md"), "python") if "tf.saved_model.load" in b]
    block = block.replace('"serving_models/gnmt/1"', repr(os.path.join(world.served_base, "1")))
    _, _, value = run_python_block(block, "docs/serving.md")
    assert [text.decode() for text in value["translations"].numpy()] == ["trois un quatre"]
    assert value["scores"].shape == (1,) and float(value["scores"][0]) < 0


# ------------------------------------------------------------------------------------------ Python blocks
def run_python_block(code, page):
    """Run a documented Python block with its example sentences in the number model's language.

    Returns (namespace, what it printed, the value of its last line when that is an expression,
    as a notebook shows it).
    """
    for text, stand_in in STAND_INS.items():
        code = code.replace(repr(text).replace("'", '"'), repr(stand_in))
    tree = ast.parse(code)
    last = tree.body.pop() if tree.body and isinstance(tree.body[-1], ast.Expr) else None
    namespace, printed = {"__name__": "docs"}, io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(tree, page, "exec"), namespace)
        value = eval(compile(ast.Expression(last.value), page, "eval"), namespace) if last else None
    return namespace, printed.getvalue(), value


def pieces_of(tokenizer, sentence):
    return [piece for word in sentence.split() for piece in tokenizer.segment_word(word)]


def test_python_api_page_runs(trained_number_model, tmp_path, monkeypatch):
    """Each Python block of docs/python_api.md, with runs/en-fr standing for the trained model."""
    model_dir, _ = trained_number_model
    monkeypatch.chdir(tmp_path)
    blocks = code_blocks(os.path.join(ROOT, "docs", "python_api.md"), "python")
    assert len(blocks) == 4, "a new block of docs/python_api.md needs its checks here"
    blocks = [block.replace('"runs/en-fr"', repr(model_dir)) for block in blocks]

    # Building and training with Keras: fit lowers the loss; one decoding step gives what teacher
    # forcing gives at the first position.
    namespace, printed, _ = run_python_block(blocks[0], "docs/python_api.md")
    epochs = re.split(r"^Epoch \d+/\d+$", printed, flags=re.M)[1:]
    losses = [float(re.findall(r" loss: (\d+\.\d+)", epoch)[-1]) for epoch in epochs]  # each epoch's last
    assert len(losses) == 3 and losses[0] > losses[1] > losses[2], printed
    model, source, target_in = namespace["model"], namespace["source"], namespace["target_in"]
    vocab = namespace["config"].model.vocab_size
    assert namespace["logits"].shape == (1, vocab)
    np.testing.assert_allclose(namespace["logits"], model((source, target_in))[:, 0], rtol=1e-5, atol=1e-5)
    attention = namespace["attention"].numpy()
    assert attention.shape == (1, source.shape[1]) and attention.sum() == pytest.approx(1.0, abs=1e-5)

    # Translating: the stand-ins' translations, and attention over the pieces of both sentences.
    namespace, printed, _ = run_python_block(blocks[1], "docs/python_api.md")
    translations, best_line = printed.splitlines()
    assert translations == str(["trois un quatre", "neuf huit"])
    text, score, shape = re.fullmatch(r"(.*) (\S+) (\(\d+, \d+\))", best_line).groups()
    assert text == "trois un quatre" and float(score) < 0
    tokenizer = namespace["tokenizer"]
    expected_shape = (len(pieces_of(tokenizer, "trois un quatre")) + 1, len(pieces_of(tokenizer, "three one four")) + 1)
    assert shape == str(expected_shape)  # [target pieces + EOS, source pieces + EOS]
    best = namespace["nbest"][0]
    np.testing.assert_allclose(best.attention.sum(axis=1), 1.0, rtol=1e-5)
    assert 1 <= len(namespace["nbest"]) <= 4

    # int8 inference: the same translation from int8 weights, and a smaller model.
    namespace, printed, _ = run_python_block(blocks[3], "docs/python_api.md")
    translation, sizes = printed.splitlines()
    assert translation == "trois un quatre"
    sizes = ast.literal_eval(sizes)
    assert set(sizes) == {"int8_bytes", "float32_bytes"} and 0 < sizes["int8_bytes"] < sizes["float32_bytes"]
    float_bytes = sum(v.numpy().nbytes for v in namespace["model"].variables)
    assert sizes["float32_bytes"] == float_bytes

    # Scoring: the search's own best translation scores what the search reported.
    namespace, printed, _ = run_python_block(blocks[2], "docs/python_api.md")
    searched_log_prob, scored_log_prob, searched_score, scored_score = map(float, printed.split())
    assert namespace["best"][0].text == "trois un quatre" and searched_log_prob < 0
    assert scored_log_prob == pytest.approx(searched_log_prob, abs=1e-4)
    assert scored_score == pytest.approx(searched_score, abs=1e-4)
