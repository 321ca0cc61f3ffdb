"""examples/quickstart.ipynb runs top to bottom and shows what it promises.

The notebook is executed with nbclient in a kernel started from this interpreter
(``sys.executable``, through a temporary kernelspec, so no globally installed kernel
is involved), with a small training budget (``GNMT_QUICKSTART_STEPS``) and its files
in pytest's temporary directory. Then the outputs are checked cell by cell: no
errors, the fit cell shows a loss, the translation cells print translations and
n-best scores, the attention cell shows a picture, both exports translate, and the
last cell says that Keras, SavedModel and TFLite agree.

Select it alone with ``pytest -k notebook``.
"""

import json
import os
import re
import sys
import time

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NOTEBOOK = os.path.join(ROOT, "examples", "quickstart.ipynb")
KERNEL_NAME = "gnmt-quickstart-test"
TEST_STEPS = 10  # two per epoch: enough to run every code path; translations are not yet good
CELL_TIMEOUT = 600

DEMO_SENTENCES = [
    "Python script", "Close window", "No files", "Cancel", "Settings",
    "Package files", "Maximize window", "Swahili (Tanzania)",
]


def _write_kernelspec(directory):
    """A kernelspec whose kernel is this interpreter, with the test's environment."""
    spec_dir = os.path.join(directory, KERNEL_NAME)
    os.makedirs(spec_dir)
    spec = {
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "gnmt_tf quickstart test",
        "language": "python",
    }
    with open(os.path.join(spec_dir, "kernel.json"), "w", encoding="utf-8") as handle:
        json.dump(spec, handle)
    return directory


def _text(cell):
    """Everything a code cell printed or displayed as text (streams, results, errors)."""
    parts = []
    for output in cell.get("outputs", []):
        if output["output_type"] == "stream":
            parts.append(output["text"])
        elif output["output_type"] in ("execute_result", "display_data"):
            parts.append(output.get("data", {}).get("text/plain", ""))
        elif output["output_type"] == "error":
            parts.append("\n".join(output.get("traceback", [])))
    return "".join(parts)


def _stdout(cell):
    return "".join(
        output["text"] for output in cell.get("outputs", [])
        if output["output_type"] == "stream" and output["name"] == "stdout"
    )


def _cell(code_cells, marker):
    """The one code cell whose source contains ``marker``."""
    found = [cell for cell in code_cells if marker in cell.source]
    assert len(found) == 1, f"expected one code cell containing {marker!r}, found {len(found)}"
    return found[0]


def _translation_lines(text):
    """``source -> translation`` lines for the demo sentences, as {source: rest of line}."""
    lines = {}
    for line in text.splitlines():
        source, arrow, rest = line.partition(" -> ")
        if arrow and source.strip() in DEMO_SENTENCES:
            lines[source.strip()] = rest
    return lines


def test_stored_notebook_shows_its_outputs():
    """The notebook is stored executed, so that it reads on a code host without running: every code
    cell ran once, in order, without an error, the run used the default budget (not a test's), the
    attention cell holds its picture and the last cell says the three translators agree."""
    nb = nbformat.read(NOTEBOOK, as_version=4)
    nbformat.validate(nb)
    assert nb.nbformat == 4
    code_cells = [cell for cell in nb.cells if cell.cell_type == "code"]
    assert [cell.execution_count for cell in code_cells] == list(range(1, len(code_cells) + 1)), \
        "store the notebook executed top to bottom (examples/README.md)"
    for cell in code_cells:
        assert cell.outputs and not [o for o in cell.outputs if o["output_type"] == "error"], cell.source
    sources = "\n".join(cell.source for cell in code_cells)
    assert 'os.environ.get("GNMT_QUICKSTART_STEPS", "1500")' in sources
    assert "GNMT_QUICKSTART_DIR" in sources
    assert re.search(r"^gnmt_tf .*: 1500 training steps, files in ", _stdout(_cell(code_cells, "GNMT_QUICKSTART_STEPS")),
                     flags=re.M)
    attention = _cell(code_cells, "best.attention")
    assert any("image/png" in output.get("data", {}) for output in attention.outputs)
    agree = _stdout(_cell(code_cells, "assert keras_translations =="))
    assert "Keras, SavedModel and TFLite agree on all 8 sentences" in agree
    fit = _text(_cell(code_cells, "model.fit("))
    assert "\b" not in fit and "\r" not in fit and "Epoch 5/5" in fit  # the progress bar as a terminal shows it


def _has_french_catalogs():
    from gnmt_tf.data.catalogs import available_languages

    return "fr" in available_languages()


@pytest.mark.skipif(
    not _has_french_catalogs(),
    reason="the notebook trains on the built-in data: /usr/share/locale/fr/LC_MESSAGES/*.mo (gettext catalogs)",
)
def test_quickstart_notebook_runs_and_shows_its_results(tmp_path):
    from jupyter_client.kernelspec import KernelSpecManager
    from jupyter_client.manager import AsyncKernelManager

    nb = nbformat.read(NOTEBOOK, as_version=4)
    work_dir = tmp_path / "work"
    env = dict(os.environ)
    env["GNMT_QUICKSTART_STEPS"] = str(TEST_STEPS)
    env["GNMT_QUICKSTART_DIR"] = str(work_dir)
    env["PYTHONPATH"] = os.pathsep.join([ROOT] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    env["TF_CPP_MIN_LOG_LEVEL"] = "2"
    env.pop("MPLBACKEND", None)  # the notebook's %matplotlib inline decides

    kernel_dirs = _write_kernelspec(str(tmp_path / "kernels"))
    manager = AsyncKernelManager(
        kernel_name=KERNEL_NAME, kernel_spec_manager=KernelSpecManager(kernel_dirs=[kernel_dirs])
    )
    client = nbclient.NotebookClient(
        nb, km=manager, timeout=CELL_TIMEOUT, allow_errors=False,
        resources={"metadata": {"path": str(tmp_path)}},
    )
    start = time.monotonic()
    try:
        client.execute(env=env)
    except nbclient.exceptions.CellExecutionError as error:  # show the failing cell's traceback
        pytest.fail(f"the notebook failed:\n{error}")
    finally:  # kept for a look after a failure: pytest --basetemp=DIR
        nbformat.write(nb, str(tmp_path / "quickstart.executed.ipynb"))
    elapsed = time.monotonic() - start
    print(f"quickstart notebook executed in {elapsed:.0f} s")

    code_cells = [cell for cell in nb.cells if cell.cell_type == "code"]
    # Every code cell ran, in order, and none produced an error output.
    assert [cell.execution_count for cell in code_cells] == list(range(1, len(code_cells) + 1))
    for cell in code_cells:
        assert not [o for o in cell.outputs if o["output_type"] == "error"], cell.source

    # The kernel was this interpreter, and it used the test's budget and directory.
    assert manager.kernel_spec.argv[0] == sys.executable
    setup = _stdout(_cell(code_cells, "GNMT_QUICKSTART_STEPS"))
    assert f"{TEST_STEPS} training steps, files in {work_dir}" in setup

    data = _stdout(_cell(code_cells, "load_catalog_pairs("))
    assert re.search(r"[\d,]+ short pairs", data), data

    pieces = _stdout(_cell(code_cells, "WordpieceTokenizer.learn("))
    assert "\u2581" in pieces, pieces  # the word-beginning mark of section 4.1

    assert re.search(r"[\d,]+ parameters", _stdout(_cell(code_cells, "GNMT(config.model)")))

    # model.fit showed Keras' progress bar with a finite loss.
    fit = _text(_cell(code_cells, "model.fit("))
    assert re.search(rf"{TEST_STEPS // 5}/{TEST_STEPS // 5} ", fit), fit[-2000:]
    assert "Epoch 5/5" in fit
    losses = [float(value) for value in re.findall(r"loss: ([0-9.]+)", fit)]
    assert losses and all(0 < loss < 20 for loss in losses), fit[-2000:]
    assert re.search(r"final training loss [0-9.]+ \(perplexity [0-9.]+\)", fit)

    # Beam search translated every demo sentence.
    keras_lines = _translation_lines(_stdout(_cell(code_cells, "translator.translate(sentences)")))
    assert sorted(keras_lines) == sorted(DEMO_SENTENCES)

    nbest = _stdout(_cell(code_cells, "return_attention=True"))
    scores = re.findall(r"^\d\. .* score +(-?[0-9.]+) +log P +(-?[0-9.]+)$", nbest, re.M)
    assert 1 <= len(scores) <= 4, nbest
    assert all(float(log_p) <= 0 for _, log_p in scores), nbest

    # The attention cell drew a picture.
    attention = _cell(code_cells, "best.attention")
    assert any("image/png" in output.get("data", {}) for output in attention.outputs), attention.outputs

    model_dir = _stdout(_cell(code_cells, "save_metadata("))
    assert "config.yaml" in model_dir and "wordpieces.txt" in model_dir and "checkpoints" in model_dir

    # Both exports were written, verified by the exporter, and translated every sentence.
    saved_model_cell = _stdout(_cell(code_cells, '"saved_model")'))
    assert "checked:" in saved_model_cell and "exported" in saved_model_cell, saved_model_cell
    assert sorted(_translation_lines(saved_model_cell)) == sorted(DEMO_SENTENCES)
    assert (work_dir / "serving" / "gnmt" / "1" / "saved_model.pb").is_file()

    tflite_cell = _stdout(_cell(code_cells, "TFLiteTranslator("))
    assert "checked:" in tflite_cell and "exported" in tflite_cell, tflite_cell
    assert sorted(_translation_lines(tflite_cell)) == sorted(DEMO_SENTENCES)
    assert (work_dir / "tflite" / "gnmt" / "1" / "translator.tflite").is_file()

    # The last cell asserted that the three agree, and said so.
    agree = _stdout(_cell(code_cells, "assert keras_translations =="))
    assert f"Keras, SavedModel and TFLite agree on all {len(DEMO_SENTENCES)} sentences (eq. 14 scores within" in agree
