"""The generated reference pages cannot drift: docs/configuration.md and docs/cli.md are what
``python docs/generate_reference.py --write`` writes now, and every config field and every flag of every
command is on its page (read back from the page, against the dataclasses and the parsers themselves).
Only parsers are built: no TensorFlow model, no TensorFlow start."""

import argparse
import dataclasses
import importlib.util
import os
import re

from helpers import ROOT, package_metadata

from gnmt_tf import config as config_module
from gnmt_tf.cli import common


def load_generator():
    """docs/generate_reference.py, a script of the checkout (not a package module), loaded by path."""
    spec = importlib.util.spec_from_file_location("generate_reference", os.path.join(ROOT, "docs",
                                                                                     "generate_reference.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


reference = load_generator()
CONFIG_PAGE = os.path.join(ROOT, "docs", "configuration.md")
CLI_PAGE = os.path.join(ROOT, "docs", "cli.md")
GLOSSARY = os.path.join(ROOT, "docs", "glossary.md")


def read(path):
    with open(path, encoding="utf-8") as handle:
        return handle.read()


def sections_of(text):
    """``## NAME`` headings of a page -> the text below each, up to the next such heading."""
    parts = re.split(r"^## (.+)$", text, flags=re.M)
    return dict(zip(parts[1::2], parts[2::2]))


def table_rows(text):
    """The body rows of the Markdown tables in ``text``, as lists of cells (escaped pipes kept in a cell)."""
    rows = []
    for line in text.splitlines():
        if line.startswith("| ") and not line.startswith("|---"):
            rows.append([cell.strip().replace("\\|", "|") for cell in re.split(r"(?<!\\)\|", line)[1:-1]])
    return [row for row in rows if row[0] not in ("field", "flag", "command")]


def console_commands():
    """(script, Command) of every console script setup.py installs, found from its entry point."""
    found = []
    for entry in package_metadata().entry_points["console_scripts"]:
        script, target = entry.split(" = ")
        module = importlib.import_module(target.split(":")[0])
        found.append((script, module.COMMAND))
    return found


def test_the_committed_pages_are_what_the_generator_writes():
    stale = reference.stale_pages(ROOT)
    shown = "\n".join(line for diff in stale.values() for line in diff[:40])
    assert not stale, f"stale: {', '.join(stale)}; run python docs/generate_reference.py --write\n{shown}"


def test_the_generator_documents_every_console_script():
    loaded = reference.load_commands()
    generated = {entry.script: command for entry, command in loaded}
    installed = dict(console_commands())
    assert sorted(generated) == sorted(installed)
    for script, command in generated.items():
        assert command is installed[script] and command.names.script == script
    # The page's table of commands (above the first command's section): the registry's, row by row.
    rows = table_rows(read(CLI_PAGE).split("\n## ", 1)[0])
    assert rows == [[f"[`{entry.script}`](#{entry.script})", f"`{entry.python_m}`", entry.summary]
                    for entry, _ in loaded]


def test_every_config_field_is_on_the_page_with_its_doc_and_default():
    sections = sections_of(read(CONFIG_PAGE))
    default = config_module.GNMTConfig()
    names = config_module.builtin_config_names()
    shipped = {name: config_module.load_config(name) for name in names}
    for section in (f.name for f in dataclasses.fields(config_module.GNMTConfig)):
        assert section in sections, f"docs/configuration.md has no section {section}"
        rows = {re.match(r"`(\w+)`", row[0]).group(1): row for row in table_rows(sections[section])}
        fields = dataclasses.fields(getattr(default, section))
        assert sorted(rows) == sorted(f.name for f in fields), section
        for f in fields:
            row = rows[f.name]
            assert len(row) == 3 + len(names), (section, f.name)
            doc = f.metadata.get("doc", "")
            assert len(doc) > 20, f"{section}.{f.name} has no real doc"
            assert row[1] == " ".join(doc.split()), f"{section}.{f.name}"
            value = getattr(getattr(default, section), f.name)
            assert row[2].strip("`") == reference.yaml_value(value), f"{section}.{f.name}"
            for name, cell in zip(names, row[3:]):
                shown = getattr(getattr(shipped[name], section), f.name)
                assert cell.strip("*`") == reference.yaml_value(shown), (name, section, f.name)
                assert cell.startswith("**") == (shown != value), (name, section, f.name)


def test_every_flag_of_every_command_is_on_the_page_with_its_help():
    sections = sections_of(read(CLI_PAGE))
    for script, command in console_commands():
        assert script in sections, f"docs/cli.md has no section {script}"
        # A flag cell is argparse's "--flag VALUE" or "--flag, --no-flag", in a code span.
        documented = {part.split()[0]: row for row in table_rows(sections[script])
                      for part in row[0].strip("`").split(", ")}
        parser = command.build_parser(prog=script)
        for action in parser._actions:
            if isinstance(action, argparse._HelpAction):
                continue
            assert action.help, f"{script} {action.option_strings}: no help"
            for flag in action.option_strings:
                assert flag in documented, f"{script} {flag} is not in docs/cli.md"
                # The help as the page shows it: %(default)s expanded, on one line.
                expanded = re.sub(r"%\((\w+)\)s", lambda m: str(getattr(action, m.group(1))), action.help)
                words = expanded.split()
                assert documented[flag][2] == " ".join(words), f"{script} {flag}"
        assert f"usage: {script} " in sections[script]


def test_the_confusable_flags_say_what_they_are():
    """--beam-width counts hypotheses, --beamsize is the paper's pruning margin (section 7): each help says
    so, and names the other."""
    parser = reference.build_parser(dict(console_commands())["gnmt-translate"])
    helps = {action.option_strings[0]: action.help for action in parser._actions if action.option_strings}
    assert "hypotheses" in helps["--beam-width"] and "--beamsize" in helps["--beam-width"]
    assert "pruning margin" in helps["--beamsize"] and "beam width" in helps["--beamsize"]


def test_a_changed_help_or_doc_makes_the_pages_stale(monkeypatch):
    monkeypatch.setitem(common.SEARCH_OPTION_HELP, "alpha", "a changed help text")
    monkeypatch.setattr(config_module.DecodingConfig, "__doc__", "A changed section docstring.")
    assert sorted(reference.stale_pages(ROOT)) == ["docs/cli.md", "docs/configuration.md"]


def test_check_exits_1_naming_a_stale_page(tmp_path, capsys):
    os.makedirs(tmp_path / "docs")
    for path, text in reference.generated_pages().items():
        (tmp_path / path).write_text(text, encoding="utf-8")
    root = ["--root", str(tmp_path)]
    assert reference.main(["--check", *root]) == 0
    page = tmp_path / "docs" / "cli.md"
    page.write_text(page.read_text(encoding="utf-8").replace("| `--retries RETRIES` |", "| `--tries N` |"),
                    encoding="utf-8")
    assert reference.main(["--check", *root]) == 1
    errors = capsys.readouterr().err
    assert "docs/cli.md is stale" in errors and "--retries RETRIES" in errors
    assert "configuration.md" not in errors
    assert reference.main(["--write", *root]) == 0 and reference.main(["--check", *root]) == 0


def test_the_output_does_not_depend_on_the_terminal(monkeypatch):
    pages = reference.generated_pages()
    monkeypatch.setenv("COLUMNS", "37")
    assert reference.generated_pages() == pages


def test_the_flags_and_fields_the_glossary_names_exist():
    """Every ``--flag`` and ``section.field`` in a code span of the glossary (written by hand) is a flag of
    some command and a field of the config: a renamed one fails here."""
    page = GLOSSARY
    flags = {flag for _, command in console_commands() for action in command.build_parser()._actions
             for flag in action.option_strings}
    fields = {f"{section.name}.{f.name}" for section in dataclasses.fields(config_module.GNMTConfig)
              for f in dataclasses.fields(getattr(config_module.GNMTConfig(), section.name))}
    spans = re.findall(r"`([^`]+)`", read(page))
    assert any(span.startswith("--") for span in spans)
    assert any(span.startswith("decoding.") for span in spans)
    for span in spans:
        for flag in re.findall(r"(?:^|\s)(--[a-z][\w-]*)", span):
            assert flag in flags, f"{os.path.relpath(page, ROOT)} names {flag}"
        for dotted in re.findall(r"^((?:model|training|decoding|data|parallel|rl)\.\w+)", span):
            assert dotted in fields, f"{os.path.relpath(page, ROOT)} names {dotted}"


def test_the_license_file_is_the_license_setup_py_names():
    assert package_metadata().get_license() == "Apache-2.0"
    text = read(os.path.join(ROOT, "LICENSE"))
    assert text.split()[:4] == ["Apache", "License", "Version", "2.0,"] and "END OF TERMS AND CONDITIONS" in text
