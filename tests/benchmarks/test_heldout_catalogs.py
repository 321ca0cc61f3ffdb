"""benchmarks/heldout_catalogs.py: which catalog entries of a wheel become held-out pairs."""

import zipfile

import polib

from gnmt_tf.data.catalogs import load_catalog_pairs
from helpers import load_benchmark

PO = r'''
msgid ""
msgstr "Content-Type: text/plain; charset=UTF-8\n"

msgid "Save the   event"
msgstr "Enregistrer\nl'événement"

#, fuzzy
msgid "A guess"
msgstr "Une supposition"

msgid "Not translated yet"
msgstr ""

msgid "One ticket"
msgid_plural "%(n)s tickets"
msgstr[0] "Un billet"
msgstr[1] "%(n)s billets"

#. Default: "Add a \"new\" page"
msgid "label_add_page"
msgstr "Ajouter une « nouvelle » page"

msgid "heading_without_default"
msgstr "Titre"

msgctxt "menu"
msgid "Open"
msgstr "Ouvrir"

#~ msgid "Obsolete"
#~ msgstr "Obsolète"
'''


def _mo_bytes(tmp_path, entries):
    catalog = polib.POFile()
    catalog.metadata = {"Content-Type": "text/plain; charset=UTF-8"}
    for source, target in entries:
        catalog.append(polib.POEntry(msgid=source, msgstr=target))
    path = tmp_path / "compiled.mo"
    catalog.save_as_mofile(str(path))
    return path.read_bytes()


def _wheel(path, files):
    with zipfile.ZipFile(path, "w") as wheel:
        for name, data in files.items():
            wheel.writestr(name, data)
    return str(path)


def test_translated_entries_become_pairs_and_a_message_id_gives_way_to_its_default_text(tmp_path):
    tool = load_benchmark("heldout_catalogs")
    wheel = _wheel(tmp_path / "app-1.0-py3-none-any.whl", {
        "app/locale/fr/LC_MESSAGES/django.po": PO,
        # Beside its .po, a .mo is not read: it is the same catalog without the comments and flags.
        "app/locale/fr/LC_MESSAGES/django.mo": _mo_bytes(tmp_path, [("Only in the mo", "Seulement dans le mo")]),
        "app/locale/de/LC_MESSAGES/django.po": PO.replace("Enregistrer", "Speichern"),  # not French
        "app/locale/fr.po": 'msgid "Tryton style"\nmsgstr "Style Tryton"\n',
        "other/locale/fr_FR/LC_MESSAGES/messages.mo": _mo_bytes(tmp_path, [("Alone", "Seul")]),
    })
    assert sorted(tool.wheel_pairs(wheel)) == sorted([
        ("Save the event", "Enregistrer l'événement"),  # whitespace folded on both sides
        ("One ticket", "Un billet"),  # the singular of a plural entry
        ('Add a "new" page', "Ajouter une « nouvelle » page"),
        ("Open", "Ouvrir"),  # the context dropped
        ("Tryton style", "Style Tryton"),
        ("Alone", "Seul"),
    ])


def test_pairs_of_the_built_in_data_and_repeats_across_wheels_are_dropped(tmp_path):
    tool = load_benchmark("heldout_catalogs")
    built_in_source = load_catalog_pairs("fr")[0][0][0]
    po = f'msgid "Check in"\nmsgstr "Enregistrer l\'arrivée"\n\nmsgid "{built_in_source}"\nmsgstr "déjà vu"\n'
    for name in ("first-1.0-py3-none-any.whl", "second-2.0-py3-none-any.whl"):
        _wheel(tmp_path / name, {"pkg/locale/fr/LC_MESSAGES/django.po": po})
    pairs, per_package, dropped = tool.collect(str(tmp_path))
    assert pairs == [("Check in", "Enregistrer l'arrivée")]
    assert per_package == {"first": 1} and dropped == 1
