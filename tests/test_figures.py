"""Every measured figure of the README, docs/ and benchmarks/README.md names its results file and key.

A figure is cited as a Markdown link to a file under benchmarks/results/ whose title is the key path
of the value, e.g. ``[16.5](benchmarks/results/quality.json "runs[3].ours.decodings['greedy'].whole.bleu")``.
A key path is a chain of

- ``name`` or ``.name``: a key of an object;
- ``['any key']``: a key with spaces, dots or other punctuation;
- ``[3]``: an element of a list;
- ``[threads=1,batch=16]``: the one element of a list whose fields have those values (quote a value
  with a comma: ``[label='int8, fixed',batch=1]``).

The test reads each cited file, resolves the key and compares the stored value with the figure as
written: rounded to the decimals the text shows (``59`` matches 59.11, ``1.9`` matches 1.92; a
``%`` figure may also be a stored fraction; a figure in kB, MB or GB of a key ending in ``bytes``
is compared in that unit). A ratio such as ``2.25x`` must cite a stored ratio, not
two values to divide.
"""

import glob
import json
import os
import re


ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(ROOT, "benchmarks", "results")
PAGES = ([os.path.join(ROOT, "README.md"), os.path.join(ROOT, "benchmarks", "README.md")]
         + sorted(glob.glob(os.path.join(ROOT, "docs", "*.md"))))

# The target is relative to the page: benchmarks/results/... from the README, ../benchmarks/results/...
# from docs/, results/... from benchmarks/README.md.
CITATION = re.compile(r'\[([^\]\n]+)\]\(((?:\.\./)*(?:benchmarks/)?results/[\w./-]+\.json) "([^"\n]+)"\)')
NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?|-?\.\d+")
SELECTOR_FIELD = r"[\w-]+=(?:'[^']*'|[^,\]']*)"
KEY_PART = re.compile(rf"\.?([A-Za-z_][\w-]*)|\['([^']*)'\]|\[(\d+)\]|\[({SELECTOR_FIELD}(?:,{SELECTOR_FIELD})*)\]")
UNITS = {"kB": 1e3, "MB": 1e6, "GB": 1e9}  # a figure in these units of a value stored in bytes


class Citation:
    def __init__(self, page, line, text, target, key):
        self.page, self.line, self.text, self.target, self.key = page, line, text, target, key

    @property
    def where(self):
        return f"{os.path.relpath(self.page, ROOT)}:{self.line}: [{self.text}]({self.target} \"{self.key}\")"

    @property
    def path(self):
        return os.path.normpath(os.path.join(os.path.dirname(self.page), self.target))


def citations(path):
    text = open(path, encoding="utf-8").read()
    return [Citation(path, text.count("\n", 0, match.start()) + 1, *match.groups())
            for match in CITATION.finditer(text)]


def parse_key(key):
    """The steps of a key path: ('key', name), ('index', n) or ('select', {field: value})."""
    steps, position = [], 0
    while position < len(key):
        match = KEY_PART.match(key, position)
        if not match or match.end() == position:
            raise ValueError(f"cannot read the key path {key!r} at {key[position:]!r}")
        name, quoted, index, selector = match.groups()
        if name is not None or quoted is not None:
            steps.append(("key", name if name is not None else quoted))
        elif index is not None:
            steps.append(("index", int(index)))
        else:
            steps.append(("select", {field: quoted if quoted else plain for field, quoted, plain
                                     in re.findall(r"([\w-]+)=(?:'([^']*)'|([^,\]']*))", selector)}))
        position = match.end()
    return steps


def _matches(value, wanted):
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        try:
            return float(wanted) == value
        except ValueError:
            return False
    return str(value) == wanted


def resolve(document, key):
    value = document
    for kind, step in parse_key(key):
        if kind == "key":
            if not isinstance(value, dict) or step not in value:
                raise KeyError(f"no key {step!r} (keys: {sorted(value) if isinstance(value, dict) else type(value)})")
            value = value[step]
        elif kind == "index":
            if not isinstance(value, list) or step >= len(value):
                raise KeyError(f"no element [{step}]")
            value = value[step]
        else:
            if not isinstance(value, list):
                raise KeyError(f"[{step}] selects from a list, found {type(value).__name__}")
            found = [item for item in value if isinstance(item, dict)
                     and all(field in item and _matches(item[field], wanted) for field, wanted in step.items())]
            if len(found) != 1:
                raise KeyError(f"{len(found)} elements match {step}, not one")
            value = found[0]
    return value


def figure_matches(text, value, key=""):
    """Whether the figure written as ``text`` is ``value`` rounded to the decimals written."""
    numbers = NUMBER.findall(text)
    if len(numbers) != 1:
        raise ValueError(f"a cited figure is one number, got {text!r}")
    written = numbers[0].replace(",", "")
    decimals = len(written.split(".")[1]) if "." in written else 0
    half_unit = 0.5 * 10 ** -decimals + 1e-9
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    candidates = [value, value * 100] if "%" in text else [value]
    unit = re.search(r"\b(kB|MB|GB)\b", text)
    if unit and key.endswith("bytes"):
        candidates = [value / UNITS[unit.group(1)]]
    return any(abs(candidate - float(written)) <= half_unit for candidate in candidates)


def check(citation, results=None):
    """None when the citation holds, else what is wrong with it."""
    if not citation.path.startswith(RESULTS + os.sep) and results is None:
        return f"{citation.where}: cites a file outside benchmarks/results/"
    if results is None:
        if not os.path.exists(citation.path):
            return f"{citation.where}: no such results file"
        with open(citation.path, encoding="utf-8") as handle:
            results = json.load(handle)
    try:
        value = resolve(results, citation.key)
    except (KeyError, ValueError) as error:
        return f"{citation.where}: {error}"
    try:
        if not figure_matches(citation.text, value, citation.key):
            return f"{citation.where}: the file holds {value!r}"
    except ValueError as error:
        return f"{citation.where}: {error}"
    return None


ALL = [citation for page in PAGES for citation in citations(page)]


# The results files docs/benchmarks.md states today's figures from.
CITED_RESULTS = {"artifacts.json", "artifacts_trained.json", "decode.json", "int8_matmul.json", "localization.json",
                 "peer_decode.json",
                 "pareto.json", "quality.json", "serving_load.json", "shortlist.json", "tflite_profile.json", "training_levers.json",
                 "training_throughput.json"}


def test_the_docs_cite_their_figures():
    assert len(ALL) >= 20, "the README and docs cite their measured figures (see this module's docstring)"
    assert {os.path.basename(c.path) for c in ALL} >= CITED_RESULTS


def test_every_cited_figure_is_in_its_results_file():
    """One test for all citations: it lists every figure that its results file does not hold."""
    problems = [problem for problem in map(check, ALL) if problem is not None]
    assert not problems, "\n".join(problems)


def test_the_check_fails_on_a_wrong_figure():
    """The checker itself, on made-up results: a figure off by more than its last digit fails."""
    results = {"runs": [{"tag": "a", "bleu": 16.48, "cases": {"beam 4, alpha=0.2": {"ratio": 0.966}}},
                        {"tag": "b", "bleu": 33.39}, {"tag": "c, d", "size_bytes": 12225090}]}
    page = os.path.join(ROOT, "README.md")

    def problem(text, key):
        return check(Citation(page, 1, text, "benchmarks/results/x.json", key), results)

    assert problem("16.5", "runs[0].bleu") is None
    assert problem("16", "runs[0].bleu") is None
    assert problem("16.48", "runs[tag=a].bleu") is None
    assert problem("33.4", "runs[tag=b].bleu") is None
    assert problem("96.6%", "runs[0].cases['beam 4, alpha=0.2'].ratio") is None
    assert problem("0.97x", "runs[0].cases['beam 4, alpha=0.2'].ratio") is None
    assert problem("12.2 MB", "runs[tag='c, d'].size_bytes") is None
    assert problem("12 MB", "runs[2].size_bytes") is None
    assert problem("12.3 MB", "runs[2].size_bytes") is not None
    assert problem("16.4", "runs[0].bleu") is not None  # 16.48 rounds to 16.5
    assert problem("15", "runs[0].bleu") is not None
    assert problem("33.4", "runs[tag=c].bleu") is not None  # no such run
    assert problem("33.4", "runs[2].bleu") is not None
    assert problem("33.4", "runs.bleu") is not None  # a list needs an index or a selector
    assert problem("1 to 2", "runs[0].bleu") is not None  # one figure per citation
    assert problem("a", "runs[0].tag") is not None  # figures are numbers
