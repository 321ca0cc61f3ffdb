"""Write the reference pages from the code they describe: ``python docs/generate_reference.py --write``.

docs/configuration.md is built from the config's own field documentation (:mod:`gnmt_tf.config`: each
field's ``_doc`` text, its type and default) and the shipped configs (configs/*.yaml); docs/cli.md from
the commands' own argparse parsers (each command's :class:`~gnmt_tf.cli.scaffold.Command`, in the order
and with the summaries of the command registry, :mod:`gnmt_tf.cli.commands`). Neither page
is edited by hand: change the doc string or help text at its source and run ``--write`` again.
``--check`` writes nothing and exits 1, naming the stale pages and the lines that differ, when a page is
not what ``--write`` would write now (tests/test_reference_docs.py runs the same check).

A tool of the source checkout, not of the installed package: it reads and writes the checkout it is in
(``--root`` another one), with gnmt_tf importable (``pip install -e .``).

The output depends on nothing of the machine: help is formatted at a fixed width, each command is named
by its console script, and the shipped configs come in name order.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import functools
import importlib
import os
import sys
import typing
from typing import Any, Dict, List, Optional, Sequence, Tuple

from gnmt_tf import config as config_module
from gnmt_tf.cli.commands import COMMANDS

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the checkout: docs/..
HELP_WIDTH = 100  # the usage lines' width, whatever the terminal's (argparse reads COLUMNS otherwise)

GENERATED_NOTE = (
    # No code span: tests/test_docs.py runs every `python -m` command it finds in code spans.
    "<!-- Generated from {source} by: python docs/generate_reference.py --write. Do not edit by hand. -->"
)


# ------------------------------------------------------------------------------------- helpers
def _cell(text: str) -> str:
    """``text`` as one Markdown table cell: on one line, its pipes escaped."""
    return " ".join(str(text).split()).replace("|", "\\|")


def _paragraphs(text: str) -> str:
    """A docstring's paragraphs as Markdown paragraphs (each paragraph's lines joined)."""
    return "\n\n".join(" ".join(block.split()) for block in text.strip().split("\n\n") if block.strip())


# ------------------------------------------------------------------------------------- configuration
def yaml_value(value: Any) -> str:
    """A config value as it is written in YAML or after ``--set``."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(yaml_value(item) for item in value) + "]"
    return str(value)


def type_name(hint: Any) -> str:
    """A field's type in words: ``int``, ``float or null``, ``'ml' or 'rl'``, ``list of str``."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is typing.Union:
        inner = [arg for arg in args if arg is not type(None)]
        return f"{type_name(inner[0])} or null"
    if origin is typing.Literal:
        return " or ".join(repr(arg) for arg in args)
    if origin in (list, List):
        return f"list of {type_name(args[0])}"
    return getattr(hint, "__name__", str(hint))


def config_sections() -> List[Tuple[str, type]]:
    """(section name, dataclass) of every config section, in the order of :class:`GNMTConfig`."""
    hints = typing.get_type_hints(config_module.GNMTConfig)
    return [(f.name, hints[f.name]) for f in dataclasses.fields(config_module.GNMTConfig)]


def configuration_page() -> str:
    names = config_module.builtin_config_names()
    shipped = {name: config_module.load_config(name) for name in names}
    default = config_module.GNMTConfig()
    lines = [
        GENERATED_NOTE.format(source="gnmt_tf/config.py and configs/*.yaml"),
        "",
        "# Configuration reference",
        "",
        "After this page you can read any config file, choose the fields to change for a run, and know what "
        "each shipped config sets. Every field of every section is listed with what it means, its type, its "
        "default and its value in each shipped config; a value in **bold** differs from the default. The "
        "default is what a config file that leaves the field out gets; `gnmt-train` without `--config` "
        "trains the `small` config. The paper's terms (δ, beamsize, wordpiece, ...) are explained in "
        "[glossary.md](glossary.md).",
        "",
        f"A config is a YAML file of up to {len(dataclasses.fields(config_module.GNMTConfig))} sections, or the name of a shipped config "
        f"({', '.join(f'`{name}`' for name in names)}: the files `configs/NAME.yaml`). "
        "A field the file leaves out has its default, or, when the file starts with `base: NAME` (a shipped "
        "config, or a file beside it), that config's value: such a file holds only the fields it changes. "
        "`gnmt-train --config NAME` reads one, and "
        "`--set section.field=value` overrides one field (the value as YAML: `null`, `true`, `0.5`); both "
        "are validated strictly: an unknown field or a value of the wrong type or range is refused with the "
        "field's dotted name. A trained model directory keeps the config it was trained with, and the "
        "decoding commands read their defaults from it.",
        "",
        "## Sections",
        "",
    ]
    for section, cls in config_sections():
        lines.append(f"- [`{section}`](#{section}): {_cell(_paragraphs(cls.__doc__).split(chr(10))[0])}")
    lines.append("")
    header = ["field", "meaning", "default"] + [f"`{name}`" for name in names]
    for section, cls in config_sections():
        lines += [f"## {section}", "", _paragraphs(cls.__doc__), ""]
        lines.append("| " + " | ".join(header) + " |")
        lines.append("|" + "|".join(["---"] * len(header)) + "|")
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            default_value = getattr(getattr(default, section), f.name)
            row = [
                f"`{f.name}`<br>{_cell(type_name(hints[f.name]))}",
                _cell(f.metadata.get("doc", "")),
                f"`{_cell(yaml_value(default_value))}`",
            ]
            for name in names:
                value = getattr(getattr(shipped[name], section), f.name)
                shown = f"`{_cell(yaml_value(value))}`"
                row.append(f"**{shown}**" if value != default_value else shown)
            lines.append("| " + " | ".join(row) + " |")
        lines.append("")
    return "\n".join(lines)


# ------------------------------------------------------------------------------------- command lines
def load_commands() -> List[Tuple[Any, Any]]:
    """(registry entry, Command) of every command, in the registry's order (:data:`COMMANDS`)."""
    return [(entry, importlib.import_module(entry.defined_in).COMMAND) for entry in COMMANDS]


def build_parser(command) -> argparse.ArgumentParser:
    """The command's parser, named by its console script and formatted at :data:`HELP_WIDTH` columns."""
    parser = command.build_parser(prog=command.names.script)
    parser.formatter_class = functools.partial(parser.formatter_class, width=HELP_WIDTH)
    return parser


def _flag(parser, action: argparse.Action) -> str:
    formatter = parser._get_formatter()
    return formatter._format_action_invocation(action)


def _default(parser: argparse.ArgumentParser, action: argparse.Action) -> str:
    if action.required:
        return "required"
    for group in parser._mutually_exclusive_groups:
        if group.required and action in group._group_actions:
            return "required: one of " + ", ".join(f"`{a.option_strings[0]}`" for a in group._group_actions)
    if isinstance(action, (argparse._StoreTrueAction, argparse._StoreFalseAction)):
        return "off" if not action.default else "on"
    if isinstance(action, argparse._AppendAction) and action.default == []:
        return "none"
    if action.default is None or action.default == argparse.SUPPRESS:
        return "—"
    return f"`{_cell(yaml_value(action.default))}`"


def _help(parser, action: argparse.Action) -> str:
    if not action.help:
        return ""
    return _cell(parser._get_formatter()._expand_help(action))


def cli_page() -> str:
    commands = load_commands()
    lines = [
        GENERATED_NOTE.format(source="the commands' argparse parsers"),
        "",
        "# Command-line reference",
        "",
        "After this page you can find every command of gnmt_tf, what it does, and each of its flags with "
        "its default. Each command is installed as a console script (`gnmt-train`, ...) and also runs as "
        "`python -m MODULE`; both take the same flags and print the same `--help`. Every command takes "
        "`--verbose` (TensorFlow's own start-up lines are hidden otherwise). Exit status 0 means done and 2 "
        "a usage error (a flag, config, data file or model directory that cannot be used; nothing was "
        "attempted); other statuses are the command's own, listed in its section. In the flag tables a "
        "default of — means the flag has no fixed default: its help says what happens without it. The "
        "paper's terms (beam width and beamsize, α and β, δ, dev split) are explained in "
        "[glossary.md](glossary.md).",
        "",
        "| command | `python -m` module | what it does |",
        "|---|---|---|",
    ]
    for entry, _ in commands:
        lines.append(f"| [`{entry.script}`](#{entry.script}) | `{entry.python_m}` | {_cell(entry.summary)} |")
    lines.append("")
    for entry, command in commands:
        parser = build_parser(command)
        lines += [f"## {entry.script}", "", f"Also `python -m {entry.python_m}`.", "", "```text",
                  parser.format_usage().rstrip(), "```", ""]
        if parser.description:
            lines += [_paragraphs(parser.description), ""]
        for group in parser._action_groups:
            actions = [action for action in group._group_actions
                       if action.option_strings and not isinstance(action, argparse._HelpAction)]
            if not actions:
                continue
            lines += [f"**{group.title}**", ""]
            if group.description:
                lines += [_paragraphs(group.description), ""]
            lines += ["| flag | default | what it does |", "|---|---|---|"]
            for action in actions:
                row = [f"`{_cell(_flag(parser, action))}`", _default(parser, action), _help(parser, action)]
                lines.append("| " + " | ".join(row) + " |")
            lines.append("")
        if parser.epilog:
            lines += ["```text", parser.epilog.strip(), "```", ""]
    return "\n".join(lines)


# ------------------------------------------------------------------------------------- write, check
PAGES = {
    "docs/configuration.md": configuration_page,
    "docs/cli.md": cli_page,
}


def generated_pages() -> Dict[str, str]:
    """Each page's path (relative to the repository) and the text ``--write`` writes there."""
    return {path: build().rstrip("\n") + "\n" for path, build in PAGES.items()}


def stale_pages(root: str) -> Dict[str, List[str]]:
    """The pages under the checkout ``root`` that differ from the generated text: path -> diff."""
    stale = {}
    for path, text in generated_pages().items():
        try:
            with open(os.path.join(root, path), encoding="utf-8") as handle:
                committed = handle.read()
        except FileNotFoundError:
            committed = ""
        if committed != text:
            stale[path] = list(difflib.unified_diff(
                committed.splitlines(), text.splitlines(), f"{path} (committed)", f"{path} (generated)",
                lineterm="",
            ))
    return stale


def write_pages(root: str) -> None:
    for path, text in generated_pages().items():
        with open(os.path.join(root, path), "w", encoding="utf-8") as handle:
            handle.write(text)
        print(f"wrote {path}")


def check_pages(root: str) -> int:
    """0 if every page under ``root`` is current; else 1, naming each stale page with its diff on stderr."""
    stale = stale_pages(root)
    for path, diff in stale.items():
        changed = sum(1 for line in diff if line[:1] in "+-" and line[:3] not in ("+++", "---"))
        print(f"{path} is stale ({changed} lines differ); run python docs/generate_reference.py --write",
              file=sys.stderr)
        print("\n".join(diff[:60] + (["..."] if len(diff) > 60 else [])), file=sys.stderr)
    return 1 if stale else 0


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python docs/generate_reference.py",
        description="Write (or check) docs/configuration.md and docs/cli.md from the config and the parsers.",
    )
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--write", action="store_true", help="write both pages")
    action.add_argument("--check", action="store_true",
                        help="write nothing; exit 1 with a diff summary if a page is stale")
    parser.add_argument("--root", default=ROOT, help="the checkout whose docs/ it writes or checks "
                        "(default: the one holding this file)")
    args = parser.parse_args(argv)
    if args.write:
        write_pages(args.root)
        return 0
    return check_pages(args.root)


if __name__ == "__main__":
    sys.exit(main())
