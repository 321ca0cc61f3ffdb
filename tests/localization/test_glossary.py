"""Glossary files: entries read as written, every problem named with its file and line."""

import sys

import pytest

from gnmt_tf.localization.glossary import GlossaryError, read_glossary
from gnmt_tf.localization.placeholders import TERM, mask, restore
from helpers import run_in_process


def test_entries_are_read_in_order_skipping_blanks_and_comments(tmp_path):
    path = tmp_path / "terms.tsv"
    path.write_text("# software terms\nfile\tfichier\n\n  new folder \t nouveau dossier\n", encoding="utf-8")
    assert read_glossary(str(path)) == [("file", "fichier"), ("new folder", "nouveau dossier")]


@pytest.mark.parametrize("text, message", [
    ("file\tfichier\nfolder\n", ":2: expected 'source term<TAB>target term'"),
    ("file\tfichier\textra\n", ":1: expected"),
    ("file\t \n", ":1: expected"),
    ("# nothing\n\n", "the glossary has no entry"),
])
def test_a_bad_glossary_is_refused_with_its_line(tmp_path, text, message):
    path = tmp_path / "terms.tsv"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(GlossaryError, match=message):
        read_glossary(str(path))


def test_terms_are_masked_as_words_and_restored_as_their_targets():
    """The reference the in-graph masking is compared with (tests/localization/test_in_graph.py)."""
    masked = mask("Open the file, not the profile or file_1: %s", glossary=[("file", "fichier")])
    assert [(p.kind, p.text) for p in masked.placeholders] == [(TERM, "fichier"), ("printf", "%s")]
    assert restore(masked.text, masked.placeholders) == "Open the fichier, not the profile or file_1: %s"


def test_the_command_line_refuses_a_bad_glossary_before_loading_a_model(tmp_path):
    path = tmp_path / "terms.tsv"
    path.write_text("file fichier\n", encoding="utf-8")
    result = run_in_process([sys.executable, "-m", "gnmt_tf.translate", "--model-dir", "runs/none",
                             "--glossary", str(path)])
    assert result.returncode == 2 and "--glossary:" in result.stderr and ":1: expected" in result.stderr


def test_a_model_directory_s_glossary_is_read_when_there_is_one(tmp_path):
    from gnmt_tf import model_files

    assert model_files.read_model_glossary(str(tmp_path)) == []
    (tmp_path / model_files.GLOSSARY_FILE).write_text("file\tfichier\n", encoding="utf-8")
    assert model_files.read_model_glossary(str(tmp_path)) == [("file", "fichier")]


def test_a_model_glossary_needs_a_model_trained_with_placeholders():
    from gnmt_tf.config import LocalizationConfig
    from gnmt_tf.localization.in_graph import VERBATIM, text_masking

    assert text_masking(LocalizationConfig(placeholders=False), tokenizer=None) is VERBATIM
    with pytest.raises(ValueError, match="needs a model trained with localization.placeholders"):
        text_masking(LocalizationConfig(placeholders=False), tokenizer=None, glossary=[("file", "fichier")])
