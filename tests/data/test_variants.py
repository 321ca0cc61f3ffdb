"""Catalog-string variants share one split key, and the dev split keeps them on one side."""

import random
from collections import Counter

import pytest

from gnmt_tf.data import split_dev
from gnmt_tf.data.variants import variant_key

VARIANT_GROUPS = [
    # mnemonics (GTK, Qt), case, trailing punctuation and ellipsis, white space
    ["_Open File", "&Open File", "Open File", "open file", "Open File...", "Open File…", " Open  File: "],
    ["Save _As", "Save &As", "save as", "Save As…"],
    # format specifiers of every family: printf (positional, flags, length), %-mapping, braces, ${}
    ["Copying %s to %s", "Copying %d to %lu", "Copying %1$s to %2$s", "Copying %(src)s to %(dst)s",
     "Copying {0} to {1}", "Copying {src} to {dst}", "Copying ${src} to ${dst}", "copying %-10s to %.3f."],
]
DISTINCT = [
    "Open File", "Open Folder", "Save As", "Copying %s", "Copying %s to %s to %s", "100%% done",
    "snake_case name", "snakecase name", "R&D &amp; more", "R&D & more",
]


@pytest.mark.parametrize("group", VARIANT_GROUPS, ids=lambda group: group[0])
def test_the_variants_of_a_string_share_one_key(group):
    assert len({variant_key(text) for text in group}) == 1, {text: variant_key(text) for text in group}


def test_strings_that_differ_in_words_keep_distinct_keys():
    keys = [variant_key(text) for text in DISTINCT]
    assert len(set(keys)) == len(keys), dict(zip(DISTINCT, keys))


def test_an_entity_and_a_doubled_percent_are_text_not_markers():
    assert variant_key("Fish &amp; Chips") == "fish &amp; chips"
    assert variant_key("100%% done") == "100%% done"


def test_the_dev_split_puts_every_variant_of_a_source_on_one_side():
    rng = random.Random(0)
    pairs = []
    for i in range(400):
        base = f"Item number {i} of the list"
        for variant in (base, "_" + base, base.upper(), base + "…", base.replace("list", "%s list")):
            pairs.append((variant, f"t{i} {rng.random()}"))
    train, dev = split_dev(pairs, fraction=0.1, max_pairs=10_000, seed=5)
    assert dev and train
    train_keys = {variant_key(source) for source, _ in train}
    # Hashing the raw source would put about 9 in 10 variants of each dev string in train.
    assert not {variant_key(source) for source, _ in dev} & train_keys
    # Whole groups moved: each dev key has in dev every pair that has that key (4 for a base string).
    in_dev = Counter(variant_key(source) for source, _ in dev)
    in_all = Counter(variant_key(source) for source, _ in pairs)
    assert all(in_all[key] == count for key, count in in_dev.items())
    assert max(in_dev.values()) == 4


def test_train_dev_and_test_splits_share_no_variant_and_dev_is_the_dev_split_less_test():
    from gnmt_tf.data import split_held_out

    pairs = [(f"{prefix}Message {i}{suffix}", f"m{i}") for i in range(3000)
             for prefix, suffix in (("", ""), ("&", "…"))]
    train, dev, test = split_held_out(pairs, 0.05, 10_000, 0.05, 100, seed=11)
    assert sorted(train + dev + test) == sorted(pairs)
    keys = [{variant_key(source) for source, _ in split} for split in (train, dev, test)]
    assert not keys[0] & keys[1] and not keys[0] & keys[2] and not keys[1] & keys[2]
    assert len(test) == 100 and 200 < len(dev) < 400  # the cap, and about 5% of 6000
    # The test split is held out by a hash of its own, and the dev split is split_dev's, less the test pairs.
    _, whole_dev = split_dev(pairs, 0.05, 10_000, seed=11)
    assert dev == [pair for pair in whole_dev if pair not in set(test)]
    assert set(test) - set(whole_dev)  # not simply a part of the dev split
