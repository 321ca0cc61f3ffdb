"""Reading parallel text, the dev split, the tf.data pipeline and the gettext catalogs."""

import gzip
import importlib.util
import os
import random
import struct

import numpy as np
import pytest
import tensorflow as tf

from gnmt_tf.data.catalogs import CatalogReport, available_languages, load_catalog_pairs
from gnmt_tf.data import (
    DataError,
    count_filtered,
    make_dataset,
    read_aligned,
    read_parallel,
    read_tsv,
    split_dev,
)
from gnmt_tf.data.pipeline import cell_bounded_batch_sizes
from gnmt_tf.vocab import BOS_ID, EOS_ID, PAD_ID


# --------------------------------------------------------------------------------------
# Reading
# --------------------------------------------------------------------------------------
def _write(path, data: bytes):
    path.write_bytes(data)
    return str(path)


BAD_TSV = b"".join([
    b"hello\tbonjour\n",
    b"no tab on this line\n",
    b"a\tb\tc\n",                          # three columns
    b"   \tvide\n",                        # empty source side
    b"\n",                                  # blank line
    b"before\tavant\n",
    b"bad \xff\xfe bytes\tmauvais\n",       # invalid UTF-8 in the middle
    b"after\tapr\xc3\xa8s\r\n",             # survives; Windows line end stripped
    b"word " * 10000 + b"\tlong\n",         # 10,000 words
    b"world\tmonde",                        # last line without newline
])
GOOD = [("hello", "bonjour"), ("before", "avant"), ("after", "après"), ("world", "monde")]


def test_read_tsv_counts_every_bad_line(tmp_path):
    pairs, report = read_tsv(_write(tmp_path / "bad.tsv", BAD_TSV))
    assert pairs == GOOD
    assert report.lines == 10
    assert report.kept == 4
    assert report.skipped == {
        "no tab": 1, "too many columns": 1, "empty side": 1, "blank line": 1,
        "invalid UTF-8": 1, "too long": 1,
    }
    summary = report.summary()
    assert summary.startswith(f"read 10 lines from {tmp_path / 'bad.tsv'}: kept 4 pairs; skipped 6 (")
    for reason in report.skipped:
        assert f"{reason}: 1" in summary


def test_read_tsv_max_words_and_dedupe(tmp_path):
    path = _write(tmp_path / "d.tsv", b"a b c\tx\na\tb\na\tb\n a \t b\nc\td\n")
    pairs, report = read_tsv(path, max_words=2, dedupe=True)
    assert pairs == [("a", "b"), ("c", "d")]
    assert report.skipped == {"too long": 1, "duplicate": 2}  # " a \t b" strips to a duplicate
    pairs, report = read_tsv(path)
    assert len(pairs) == 5 and report.skipped == {}
    assert "skipped none" in report.summary()


def test_gzip_input_with_and_without_suffix(tmp_path):
    plain = read_tsv(_write(tmp_path / "p.tsv", BAD_TSV))
    for name in ("p.tsv.gz", "compressed.tsv"):
        assert read_tsv(_write(tmp_path / name, gzip.compress(BAD_TSV)))[0] == plain[0]
    assert read_parallel(str(tmp_path / "compressed.tsv"))[0] == plain[0]


def test_corrupt_gzip_is_a_data_error(tmp_path):
    data = gzip.compress(b"a\tb\n" * 1000)
    with pytest.raises(DataError, match="gzip"):
        read_tsv(_write(tmp_path / "t.gz", data[: len(data) // 2]))


def test_missing_and_empty_files(tmp_path):
    missing = str(tmp_path / "nope.tsv")
    with pytest.raises(DataError, match="nope.tsv"):
        read_tsv(missing)
    with pytest.raises(DataError, match="nope.tsv"):
        read_parallel(f"{missing},{missing}")
    with pytest.raises(DataError, match="no usable sentence pairs"):
        read_tsv(_write(tmp_path / "empty.tsv", b""))
    with pytest.raises(DataError, match=r"no usable sentence pairs.*no tab: 2"):
        read_tsv(_write(tmp_path / "junk.tsv", b"x\ny\n"))


def test_read_aligned(tmp_path):
    source = _write(tmp_path / "s.en", b"one\n\ntwo\t2\n\xffbad\nfour\n\n")
    target = _write(tmp_path / "t.fr", b"un\nvide\ndeux\nmauvais\nquatre\n\n")
    pairs, report = read_aligned(source, target)
    assert pairs == [("one", "un"), ("two\t2", "deux"), ("four", "quatre")]  # tabs are ordinary here
    assert report.lines == 6
    assert report.skipped == {"empty side": 1, "invalid UTF-8": 1, "blank line": 1}
    assert "line pairs" in report.summary()
    assert read_parallel(f"{source},{target}")[0] == pairs
    assert read_parallel((source, target))[0] == pairs
    gz = _write(tmp_path / "t.gz", gzip.compress((tmp_path / "t.fr").read_bytes()))
    assert read_aligned(source, gz)[0] == pairs


def test_read_aligned_different_lengths(tmp_path):
    source = _write(tmp_path / "s.en", b"a\nb\nc\n")
    target = _write(tmp_path / "t.fr", b"a\nb\nc\nd\ne\n")
    for args in ((source, target), (target, source)):
        with pytest.raises(DataError) as info:
            read_aligned(*args)
        message = str(info.value)
        assert f"{source} has 3" in message and f"{target} has 5" in message


def test_read_parallel_dispatch_errors(tmp_path):
    with pytest.raises(DataError, match="exactly two"):
        read_parallel(("a", "b", "c"))
    with pytest.raises(DataError, match="SOURCE_FILE,TARGET_FILE"):
        read_parallel("a,b,c")
    if importlib.util.find_spec("tensorflow_datasets") is None:
        with pytest.raises(DataError, match=r"pip install \"gnmt_tf\[tfds\]\""):
            read_parallel("tfds:wmt14_translate/fr-en")


# --------------------------------------------------------------------------------------
# Dev split
# --------------------------------------------------------------------------------------
def _sentences(n, seed=0):
    rng = random.Random(seed)
    return [(f"s{i} " + " ".join(str(rng.randint(4, 99)) for _ in range(3)), f"t{i}") for i in range(n)]


def test_split_dev_deterministic_disjoint_order_independent():
    pairs = _sentences(5000)
    train, dev = split_dev(pairs, fraction=0.05, max_pairs=10_000, seed=7)
    assert (train, dev) == split_dev(pairs, fraction=0.05, max_pairs=10_000, seed=7)
    assert not set(train) & set(dev)
    assert sorted(train + dev) == sorted(pairs)
    assert 150 < len(dev) < 350  # about 5% of 5000
    shuffled = list(pairs)
    random.Random(1).shuffle(shuffled)
    train2, dev2 = split_dev(shuffled, fraction=0.05, max_pairs=10_000, seed=7)
    assert set(dev2) == set(dev) and set(train2) == set(train)
    # Input order is kept on both sides.
    assert dev == [pair for pair in pairs if pair in set(dev)]
    # Another seed picks another split.
    assert set(split_dev(pairs, 0.05, 10_000, seed=8)[1]) != set(dev)


def test_split_dev_max_pairs_and_shared_sources():
    pairs = _sentences(5000)
    _, dev = split_dev(pairs, fraction=0.5, max_pairs=100, seed=0)
    assert len(dev) == 100
    # The capped split is still order-independent.
    assert set(split_dev(pairs[::-1], 0.5, 100, seed=0)[1]) == set(dev)
    # A source with several translations is entirely on one side.
    multi = [(f"src {i % 300}", f"tgt {i}") for i in range(3000)]
    train, dev = split_dev(multi, fraction=0.1, max_pairs=10_000, seed=3)
    assert dev and not {s for s, _ in train} & {s for s, _ in dev}
    assert split_dev(multi, 0.1, 0, seed=3) == (multi, [])


# --------------------------------------------------------------------------------------
# The tf.data pipeline, with a toy tokenizer: sentences are space-separated integers >= 4
# --------------------------------------------------------------------------------------
def toy_tokenize(strings):
    words = tf.strings.split(strings)
    return tf.ragged.map_flat_values(tf.strings.to_number, words, out_type=tf.int32)


def _numeric_pairs(n, max_len, seed=0):
    rng = np.random.default_rng(seed)
    pairs = []
    for _ in range(n):
        lengths = rng.integers(1, max_len + 1, size=2)
        pairs.append(tuple(" ".join(map(str, rng.integers(4, 1000, size=k))) for k in lengths))
    return pairs


def _ids(text):
    return [int(word) for word in text.split()]


def _batches(dataset):
    return [
        (source.numpy(), target_in.numpy(), target_out.numpy()) for (source, target_in), target_out in dataset
    ]


def _unpad(row):
    row = list(row)
    while row and row[-1] == PAD_ID:
        row.pop()
    return row


def _decoded_pairs(batches):
    """The (source tokens, target tokens) of every example, special ids checked and removed."""
    out = []
    for source, target_in, target_out in batches:
        for s, ti, to in zip(source, target_in, target_out):
            s, ti, to = _unpad(s), _unpad(ti), _unpad(to)
            assert s[-1] == EOS_ID and EOS_ID not in s[:-1]
            assert ti[0] == BOS_ID and to[-1] == EOS_ID
            assert ti[1:] == to[:-1]  # target_output is target_input shifted by one
            assert len(ti) == len(to)
            out.append((tuple(s[:-1]), tuple(to[:-1])))
    return out


PIPE = dict(max_length=20, bucket_width=5, shuffle_buffer=10_000)


def test_training_and_evaluation_datasets_have_tf_data_autotuning_off():
    """With autotuning on, the end of a training run sat idle for up to a minute while fit tore down
    its iterator (TensorFlow 2.21: the iterator waits out the tuning thread's sleep)."""
    pairs = _numeric_pairs(200, max_len=10)
    for training in (True, False):
        dataset = make_dataset(pairs, toy_tokenize, batch_size=8, seed=1, training=training, repeat=training,
                               **PIPE)
        assert dataset.options().autotune.enabled is False


def test_pipeline_shapes_padding_and_length_filter():
    pairs = _numeric_pairs(1500, max_len=30)
    dataset = make_dataset(pairs, toy_tokenize, batch_size=32, seed=1, **PIPE)
    spec = tf.TensorSpec([None, None], tf.int32)
    assert dataset.element_spec == ((spec, spec), spec)
    batches = _batches(dataset)
    for source, target_in, target_out in batches:
        assert source.dtype == np.int32 and target_in.shape == target_out.shape
        assert source.shape[0] == target_in.shape[0] <= 32
        # Right padding only: once a row has a 0 it has nothing else.
        for array in (source, target_in, target_out):
            for row in array:
                nonzero = np.flatnonzero(row != PAD_ID)
                assert len(nonzero) == nonzero[-1] + 1
    assert sum(b[0].shape[0] == 32 for b in batches) > len(batches) // 2
    kept = [(tuple(_ids(s)), tuple(_ids(t))) for s, t in pairs if max(len(s.split()), len(t.split())) <= 20]
    dropped = len(pairs) - len(kept)
    assert dropped > 100  # the data does exercise the filter
    assert count_filtered(pairs, toy_tokenize, max_length=20) == dropped
    # Every kept pair exactly once per epoch, no over-long one.
    assert sorted(_decoded_pairs(batches)) == sorted(kept)


def test_pipeline_buckets_group_similar_lengths():
    pairs = _numeric_pairs(3000, max_len=20, seed=2)
    batches = _batches(make_dataset(pairs, toy_tokenize, batch_size=16, seed=3, **PIPE))
    for source, _, target_out in batches:
        lengths = np.maximum((source != PAD_ID).sum(1), (target_out != PAD_ID).sum(1)) - 1
        assert lengths.max() - lengths.min() <= 5


def test_pipeline_token_budget():
    pairs = _numeric_pairs(2000, max_len=20, seed=4)
    batches = _batches(make_dataset(pairs, toy_tokenize, batch_size=1, batch_tokens=200, seed=5, **PIPE))
    for _, _, target_out in batches:
        assert target_out.shape[0] * target_out.shape[1] <= 200
    assert max(b[2].shape[0] for b in batches) > 20  # short buckets get big batches
    assert len(_decoded_pairs(batches)) == len(pairs)
    with pytest.raises(ValueError, match="batch_tokens"):
        make_dataset(pairs, toy_tokenize, batch_size=1, batch_tokens=10, seed=5, **PIPE)


def test_pipeline_cell_bound_caps_long_buckets_only_and_keeps_every_pair():
    # batch x widest source x widest target of a bucket (EOS included) within batch_cells; with
    # bucket_shapes the padded shape is exactly that bucket width, so the bound is checked on it.
    pairs = _numeric_pairs(3000, max_len=20, seed=9)
    cells = 16 * 11 * 11  # 16 pairs of the 6-10 bucket (11 ids); 7 of the 11-15 (16 ids); 4 of the 16-20 (21 ids)
    batches = _batches(make_dataset(pairs, toy_tokenize, batch_size=16, batch_cells=cells, seed=10,
                                    bucket_shapes=True, **PIPE))
    sizes = {}
    for source, _, target_out in batches:
        assert source.shape[0] * source.shape[1] * target_out.shape[1] <= cells
        sizes.setdefault(source.shape[1], set()).add(source.shape[0])
    assert sizes == {6: {16}, 11: {16}, 16: {cells // 16 ** 2}, 21: {cells // 21 ** 2}}, sizes
    # Without fixed shapes nothing is dropped: every pair once, the bound held on the true widths.
    batches = _batches(make_dataset(pairs, toy_tokenize, batch_size=16, batch_cells=cells, seed=10, **PIPE))
    assert all(s.shape[0] * s.shape[1] * t.shape[1] <= cells for s, _, t in batches)
    kept = [(tuple(_ids(s)), tuple(_ids(t))) for s, t in pairs if max(len(s.split()), len(t.split())) <= 20]
    assert sorted(_decoded_pairs(batches)) == sorted(kept)
    with pytest.raises(ValueError, match=r"batch_cells \(440\) must be at least \(max_length \+ 1\) \*\* 2 \(441\)"):
        make_dataset(pairs, toy_tokenize, batch_size=16, batch_cells=440, seed=10, **PIPE)


def test_pipeline_bucket_shapes_give_one_shape_per_bucket_and_the_same_pairs():
    # What an XLA-compiled step needs (training.jit_compile): a bounded set of batch shapes.
    pairs = _numeric_pairs(3000, max_len=24, seed=7)
    plain = _batches(make_dataset(pairs, toy_tokenize, batch_size=16, seed=8, **PIPE))
    shaped = _batches(make_dataset(pairs, toy_tokenize, batch_size=16, seed=8, bucket_shapes=True, **PIPE))
    # Buckets hold longer sides of 1-5, 6-10, 11-15, 16-20 wordpieces (boundaries 6, 11, 16, max 20):
    # padded with EOS/BOS to 6, 11, 16 and 21 ids.
    shapes = {source.shape for source, _, _ in shaped}
    assert shapes == {(16, 6), (16, 11), (16, 16), (16, 21)}, shapes
    for source, target_in, target_out in shaped:
        assert source.shape == target_in.shape == target_out.shape
    # The same batches in the same order, padded further; only each bucket's last, partial batch
    # is missing (a repeated dataset sees those pairs again in a later epoch).
    full = [batch for batch in plain if batch[0].shape[0] == 16]
    assert len(full) == len(shaped) and len(plain) - len(full) <= 4
    assert _decoded_pairs(full) == _decoded_pairs(shaped)
    assert all(np.array_equal(a[:, :b.shape[1]], b) and not a[:, b.shape[1]:].any()
               for batch, padded in zip(full, shaped) for a, b in zip(padded, batch))


def test_pipeline_seed_determinism_and_reshuffle():
    pairs = _numeric_pairs(1000, max_len=20, seed=6)

    def first_batches(seed, count=5, **kwargs):
        dataset = make_dataset(pairs, toy_tokenize, batch_size=8, seed=seed, **PIPE, **kwargs)
        return [source.tolist() for source, _, _ in _batches(dataset.take(count))]

    assert first_batches(11) == first_batches(11)
    assert first_batches(11) != first_batches(12)
    # Repeated data: a new order each epoch, every pair once per epoch.
    dataset = make_dataset(pairs, toy_tokenize, batch_size=50, seed=11, repeat=True, **PIPE)
    seen = _decoded_pairs(_batches(dataset.take(60)))  # more than two epochs of 1000 pairs
    first, second = seen[:1000], seen[1000:2000]
    assert sorted(first) == sorted(second) and first != second


def test_pipeline_evaluation_keeps_order_and_long_pairs():
    pairs = _numeric_pairs(300, max_len=30, seed=7)
    dataset = make_dataset(pairs, toy_tokenize, batch_size=64, seed=1, training=False, **PIPE)
    batches = _batches(dataset)
    assert [b[0].shape[0] for b in batches] == [64, 64, 64, 64, 44]
    assert _decoded_pairs(batches) == [(tuple(_ids(s)), tuple(_ids(t))) for s, t in pairs]


def test_evaluation_batches_bounded_in_cells_keep_order_and_stay_within_the_bound():
    # Lengths chosen so that one very long pair sits among short ones, as in a real dev split.
    pairs = _numeric_pairs(200, max_len=12, seed=8)
    pairs[70] = (" ".join(["5"] * 150), " ".join(["6"] * 160))
    cells = 64 * 21 * 21
    dataset = make_dataset(pairs, toy_tokenize, batch_size=64, seed=1, training=False, batch_cells=cells, **PIPE)
    batches = _batches(dataset)
    assert _decoded_pairs(batches) == [(tuple(_ids(s)), tuple(_ids(t))) for s, t in pairs]
    for source, _, target_out in batches:
        assert source.shape[0] == 1 or source.shape[0] * source.shape[1] * target_out.shape[1] <= cells
    assert [source.shape[0] for source, _, _ in batches if source.shape[1] == 151] == [1]  # the long pair alone


def test_cell_bounded_batch_sizes_are_the_greedy_cut_of_a_brute_force_reference():
    rng = np.random.default_rng(9)

    def reference(lengths, batch_size, batch_cells):
        # Take each batch as long as possible from the front: the longest prefix within both bounds.
        sizes, start = [], 0
        while start < len(lengths):
            size = 1
            for end in range(start + 2, min(start + batch_size, len(lengths)) + 1):
                chosen = lengths[start:end]
                if len(chosen) * max(s for s, _ in chosen) * max(t for _, t in chosen) > batch_cells:
                    break
                size = end - start
            sizes.append(size)
            start += size
        return sizes

    for _ in range(50):
        lengths = [tuple(int(v) for v in rng.integers(1, 80, size=2)) for _ in range(int(rng.integers(1, 120)))]
        batch_size, batch_cells = int(rng.integers(1, 40)), int(rng.integers(1, 60_000))
        assert cell_bounded_batch_sizes(lengths, batch_size, batch_cells) == reference(lengths, batch_size, batch_cells)


def test_pipeline_rejects_no_pairs():
    with pytest.raises(DataError):
        make_dataset([], toy_tokenize, batch_size=4, seed=0, **PIPE)


# --------------------------------------------------------------------------------------
# gettext catalogs
# --------------------------------------------------------------------------------------
def write_mo(path, messages):
    """Write a GNU .mo file (the documented binary format) from {msgid: msgstr} byte strings.

    Plural entries are ``msgid\\0msgid_plural`` -> ``form0\\0form1``; a context is
    ``ctx\\x04msgid``.  No hash table (allowed: its size may be 0).
    """
    keys = sorted(messages)
    ids = [k.encode() if isinstance(k, str) else k for k in keys]
    strs = [messages[k].encode() if isinstance(messages[k], str) else messages[k] for k in keys]
    count = len(keys)
    header_size = 7 * 4
    originals_offset = header_size
    translations_offset = originals_offset + 8 * count
    data_offset = translations_offset + 8 * count
    blob = b""
    tables = []
    for strings in (ids, strs):
        table = []
        for string in strings:
            table.append((len(string), data_offset + len(blob)))
            blob += string + b"\0"
        tables.append(table)
    out = struct.pack("<7I", 0x950412DE, 0, count, originals_offset, translations_offset, 0, data_offset)
    for table in tables:
        for length, offset in table:
            out += struct.pack("<2I", length, offset)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(out + blob)


HEADER = "Content-Type: text/plain; charset=UTF-8\nPlural-Forms: nplurals=2; plural=(n > 1);\n"


def test_catalogs_handle_header_context_plural_and_duplicates(tmp_path):
    messages = lambda: tmp_path / "locale" / "fr" / "LC_MESSAGES"  # noqa: E731
    write_mo(messages() / "a.mo", {
        "": HEADER,
        "Open": "Ouvrir",
        "menu\x04File": "Fichier",
        "%d file\0%d files": "%d fichier\0%d fichiers",
        "Untranslated": "",
        "OK": "OK",  # identical: kept
        "  \n": "  \n",  # whitespace-only source: skipped
    })
    write_mo(messages() / "b.mo", {"": HEADER, "Open": "Ouvrir", "Open ": "Ouvrir ", "Close": "Fermer"})
    (messages() / "c.mo").write_bytes(b"not a catalog at all")
    write_mo(tmp_path / "locale" / "de" / "LC_MESSAGES" / "x.mo", {"": HEADER, "Open": "Öffnen"})
    locale = str(tmp_path / "locale")

    pairs, report = load_catalog_pairs("fr", locale_dir=locale)
    # Files in sorted order, entries in file (= sorted msgid) order.
    assert pairs == [
        ("%d file", "%d fichier"), ("OK", "OK"), ("Open", "Ouvrir"), ("File", "Fichier"),
        ("Close", "Fermer"), ("Open ", "Ouvrir "),
    ]
    assert isinstance(report, CatalogReport)
    assert (report.files_found, report.files_read, report.files_failed) == (3, 2, 1)
    assert "c.mo" in report.failed
    assert report.entries == 9
    assert report.skipped == {"empty translation": 1, "empty source": 1}
    assert report.duplicates == 1 and report.pairs == 6
    assert report.summary() == (
        f"gettext catalogs for en->fr in {messages()}: 2 files, 1 unreadable (c.mo), 9 entries, "
        f"1 skipped (empty source), 1 skipped (empty translation), 1 duplicates dropped, 6 pairs"
    )
    assert available_languages(locale) == {"de": 1, "fr": 3}
    assert load_catalog_pairs("de", locale_dir=locale)[0] == [("Open", "Öffnen")]

    with pytest.raises(DataError) as info:
        load_catalog_pairs("pt-BR", locale_dir=locale)
    assert "pt_BR" in str(info.value) and "fr (3 files)" in str(info.value) and "--train" in str(info.value)
    with pytest.raises(DataError, match="(?i)no language has gettext catalogs"):
        load_catalog_pairs("fr", locale_dir=str(tmp_path / "nowhere"))


def test_catalogs_on_this_machine():
    if not os.path.isdir("/usr/share/locale/fr/LC_MESSAGES"):
        pytest.skip("no French gettext catalogs on this machine")
    pairs, report = load_catalog_pairs("fr")
    assert len(pairs) > 10_000 and report.pairs == len(pairs)
    assert len(set(pairs)) == len(pairs)
    assert all(source.strip() and target.strip() for source, target in pairs)
    assert not any("\x04" in source or "\x04" in target for source, target in pairs)
    assert f"{report.files_read} files" in report.summary()
    assert pairs == load_catalog_pairs("fr")[0]  # deterministic


def test_catalogs_errors():
    with pytest.raises(DataError) as info:
        load_catalog_pairs("xx")
    message = str(info.value)
    assert "'xx'" in message and "--train" in message
    if os.path.isdir("/usr/share/locale/fr/LC_MESSAGES"):
        assert "fr (" in message
    with pytest.raises(DataError, match="must be 'en'"):
        load_catalog_pairs("en", source_lang="fr")
