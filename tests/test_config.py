import glob
import os

import pytest
import yaml

from gnmt_tf.config import (
    ConfigError,
    GNMTConfig,
    builtin_config_names,
    field_doc,
    from_dict,
    load_config,
    parse_overrides,
)

CONFIG_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "configs")


@pytest.mark.parametrize("path", sorted(glob.glob(os.path.join(CONFIG_DIR, "*.yaml"))))
def test_every_shipped_config_loads_and_validates(path):
    config = load_config(path)
    assert isinstance(config, GNMTConfig)
    # Every key in the file is a real field (loading would have failed otherwise) and
    # every value in the file is what the loaded config holds.
    with open(path) as handle:
        raw = yaml.safe_load(handle)
    base = load_config(raw.pop("base")) if "base" in raw else GNMTConfig()
    for section, values in raw.items():
        for key, value in values.items():
            assert getattr(getattr(config, section), key) == value, f"{section}.{key}"
    # What the file leaves out is its base's (or the default).
    for section, values in base.to_dict().items():
        for key, value in values.items():
            if key not in raw.get(section, {}):
                assert getattr(getattr(config, section), key) == value, f"{section}.{key}"


def test_shipped_names_resolve():
    names = builtin_config_names()
    assert {"tiny", "small", "gnmt_wmt14_enfr", "gnmt_wmt14_ende"} <= set(names)
    assert load_config("tiny").model.units == 32


def test_paper_configs_hold_the_papers_numbers():
    for name, dropout in (("gnmt_wmt14_enfr", 0.2), ("gnmt_wmt14_ende", 0.3)):
        c = load_config(name)
        m, t, d = c.model, c.training, c.decoding
        assert (m.encoder_layers, m.decoder_layers, m.units, m.attention_units) == (8, 8, 1024, 1024)
        assert m.vocab_size == 32000 and m.residual_start == 3 and m.cell == "paper"
        assert m.dropout == dropout and m.logit_clip == 25.0 and m.init_scale == 0.04
        assert (t.delta_start, m.clip_delta) == (8.0, 1.0)
        assert (t.adam_learning_rate, t.adam_steps, t.sgd_learning_rate) == (0.0002, 60000, 0.5)
        assert (t.decay_start, t.decay_interval, t.decay_count) == (1200000, 200000, 4)
        assert t.batch_size == 128 and t.clip_norm == 5.0
        assert (d.alpha, d.beta, d.beamsize) == (0.2, 0.2, 3.0) and 4 <= d.beam_width <= 12


def test_a_base_config_is_overridden_field_by_field(tmp_path):
    (tmp_path / "parent.yaml").write_text("base: tiny\nmodel:\n  units: 48\n  dropout: 0.1\n")
    child = tmp_path / "child.yaml"
    child.write_text("base: parent.yaml\nmodel:\n  dropout: 0.3\ntraining:\n  batch_size: 5\n")
    config, tiny = load_config(str(child)), load_config("tiny")
    assert (config.model.units, config.model.dropout, config.training.batch_size) == (48, 0.3, 5)
    expected = tiny.replace(**{"model.units": 48, "model.dropout": 0.3, "training.batch_size": 5})
    assert config == expected
    # --set still comes last.
    assert load_config(str(child), overrides={"model.dropout": 0.0}).model.dropout == 0.0


@pytest.mark.parametrize("files, fragment", [
    ({"a.yaml": "base: b.yaml\n", "b.yaml": "base: a.yaml\n"},
     "its base: chain comes back to itself (a.yaml -> b.yaml -> a.yaml)"),
    ({"a.yaml": "base: nope\n"}, "base: no config file or shipped config named 'nope'"),
    ({"a.yaml": "base: [small]\n"}, "base: must name a shipped config or a YAML file, got ['small']"),
    ({"a.yaml": "base: tiny\nmodel:\n  unitz: 3\n"}, "model.unitz"),
    ({"a.yaml": "base: b.yaml\n", "b.yaml": "- 1\n"}, "b.yaml: a config must be a mapping of sections"),
])
def test_a_bad_base_is_refused_with_the_file_named(tmp_path, files, fragment):
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    with pytest.raises(ConfigError) as err:
        load_config(str(tmp_path / "a.yaml"))
    assert fragment in str(err.value) and str(tmp_path / "a.yaml") in str(err.value)


def test_typo_in_a_key_is_named(tmp_path):
    path = tmp_path / "typo.yaml"
    path.write_text("model:\n  unitz: 64\n")
    with pytest.raises(ConfigError) as err:
        load_config(str(path))
    message = str(err.value)
    assert "model.unitz" in message and "did you mean 'units'" in message and str(path) in message


def test_unknown_section_is_an_error():
    with pytest.raises(ConfigError, match="unknown key 'modle'.*did you mean 'model'"):
        from_dict({"modle": {}})


@pytest.mark.parametrize(
    "raw, fragment",
    [
        ({"model": {"units": "big"}}, "model.units: expected an integer, got 'big'"),
        ({"model": {"units": True}}, "model.units: expected an integer"),
        ({"model": {"dropout": 1.5}}, "model.dropout: must be in [0, 1), got 1.5"),
        ({"model": {"cell": "gru"}}, "model.cell: 'gru' is not one of 'paper', 'standard'"),
        ({"model": {"units": 33}}, "model.units: must be even"),
        ({"model": {"input_feeding": "yes"}}, "model.input_feeding: expected true or false"),
        ({"model": {"forget_bias": 1.0}}, "model.forget_bias: the 'paper' cell has no biases"),
        ({"training": {"adam_steps": -1}}, "training.adam_steps: must be >= 0"),
        ({"training": {"delta_start": 0.5}}, "training.delta_start: must be >= model.clip_delta"),
        ({"training": {"batch_cells": 0}}, "training.batch_cells: must be positive or null, got 0"),
        ({"training": {"batch_cells": 2600}, "data": {"max_length": 50}},
         "training.batch_cells: must be at least (data.max_length + 1) ** 2 (2601)"),
        ({"training": {"batch_tokens": 50}, "data": {"max_length": 50}},
         "training.batch_tokens: must be at least data.max_length + 1 (51)"),
        ({"decoding": {"n_best": 9, "beam_width": 4}}, "decoding.n_best: must not exceed beam_width"),
        ({"training": {"jit_compile": True, "objective": "rl"}},
         "training.jit_compile: only maximum-likelihood training is compiled with XLA"),
        ({"training": {"jit_compile": True}, "parallel": {"mode": "model", "devices": ["/cpu:0", "/cpu:1"]}},
         "training.jit_compile: XLA compiles the step for one device; parallel.mode 'model'"),
        ({"model": 3}, "model: must be a mapping"),
    ],
)
def test_bad_values_get_messages_naming_the_field(raw, fragment):
    with pytest.raises(ConfigError) as err:
        from_dict(raw)
    assert fragment in str(err.value)


@pytest.mark.parametrize("name, value, shown", [
    ("alpha", float("nan"), "nan"), ("alpha", float("inf"), "inf"), ("alpha", -1.0, "-1"), ("beta", -0.5, "-0.5"),
    ("beamsize", -5.0, "-5"), ("beamsize", float("inf"), "inf"), ("beamsize", 1e39, "1e+39"),
])
def test_search_options_must_be_finite_and_not_negative(name, value, shown):
    """The rule of gnmt_tf.decoding.options, with the field's dotted name; beamsize 0 (prune all but
    what ties with the best) and 1e9 (no pruning) are allowed."""
    hint = " (1e9 never prunes)" if name == "beamsize" else ""
    with pytest.raises(ConfigError) as err:
        from_dict({"decoding": {name: value}})
    assert str(err.value) == f"decoding.{name}: must be a finite float32 >= 0, got {shown}{hint}"
    config = from_dict({"decoding": {"alpha": 0.0, "beta": 0.0, "beamsize": 0.0}})
    assert (config.decoding.alpha, config.decoding.beta, config.decoding.beamsize) == (0.0, 0.0, 0.0)
    assert from_dict({"decoding": {"beamsize": 1e9}}).decoding.beamsize == 1e9
    with pytest.raises(ConfigError, match="decoding.beamsize: must be a finite float32 >= 0, got inf"):
        load_config("tiny", overrides=parse_overrides(["decoding.beamsize=.inf"]))


def test_overrides_are_parsed_and_validated():
    overrides = parse_overrides(["model.units=64", "model.cell=standard", "model.forget_bias=1.0"])
    config = load_config("tiny", overrides=overrides)
    assert (config.model.units, config.model.cell, config.model.forget_bias) == (64, "standard", 1.0)
    with pytest.raises(ConfigError, match="model.unitz"):
        load_config("tiny", overrides=parse_overrides(["model.unitz=3"]))
    with pytest.raises(ConfigError, match="expected section.field=value"):
        parse_overrides(["units"])


def test_a_decoder_that_cannot_read_the_source_is_refused():
    """One decoder layer without input feeding: the context goes to no layer (fig. 1) and the softmax reads
    the bottom layer alone, so the source could not change a translation."""
    with pytest.raises(ConfigError, match="model.decoder_layers: one decoder layer without input_feeding"):
        load_config("tiny", overrides={"model.decoder_layers": 1})
    assert load_config("tiny", overrides={"model.decoder_layers": 1, "model.input_feeding": True}).model.decoder_layers == 1
    assert load_config("tiny", overrides={"model.decoder_layers": 2}).model.decoder_layers == 2


def test_tied_embeddings_need_embeddings_as_wide_as_the_softmax_input():
    """The one table is the softmax kernel [units, vocab] (Press & Wolf 2017): its columns are units wide."""
    with pytest.raises(ConfigError) as err:
        from_dict({"model": {"tied_embeddings": True, "units": 512, "embedding_dim": 256}})
    assert str(err.value) == (
        "model.tied_embeddings: the one table is the softmax kernel, whose columns are units (512) wide, so the "
        "embeddings must be as wide; embedding_dim is 256. Set embedding_dim: null (or 512), or "
        "tied_embeddings: false")
    for embedding_dim in (None, 512):
        assert from_dict({"model": {"tied_embeddings": True, "units": 512, "embedding_dim": embedding_dim}})
    assert from_dict({"model": {"units": 512, "embedding_dim": 256}}).model.tied_embeddings is False


def test_missing_file_and_bad_yaml(tmp_path):
    with pytest.raises(ConfigError, match="no config file or shipped config named 'nope'"):
        load_config("nope")
    bad = tmp_path / "bad.yaml"
    bad.write_text("model: [unclosed\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(str(bad))


def test_save_and_reload_round_trip(tmp_path):
    config = load_config("small")
    path = tmp_path / "config.yaml"
    config.save(str(path))
    assert load_config(str(path)) == config


def test_every_field_is_documented():
    import dataclasses

    for section in dataclasses.fields(GNMTConfig):
        for f in dataclasses.fields(section.default_factory()):
            assert field_doc(section.name, f.name), f"{section.name}.{f.name} has no doc"


# What configs/small_long.yaml changes in `small` for runs of an hour or more (docs/training.md, "Long pairs").
SMALL_LONG_OVERRIDES = {"model.dropout": 0.2, "training.max_minutes": 60.0, "training.batch_cells": 107584,
                        "data.max_length": 100}


def test_small_long_is_small_with_the_documented_overrides():
    """small_long is `small` with exactly the documented fields changed: the file lists those and no
    others, each one differs from `small`'s value, and nothing else of the loaded config differs."""
    with open(os.path.join(CONFIG_DIR, "small_long.yaml"), encoding="utf-8") as handle:
        raw = yaml.safe_load(handle)
    assert raw.pop("base") == "small"
    assert {f"{section}.{key}" for section, values in raw.items() for key in values} == set(SMALL_LONG_OVERRIDES)
    small = load_config("small")
    for dotted, value in SMALL_LONG_OVERRIDES.items():
        section, key = dotted.split(".")
        assert getattr(getattr(small, section), key) != value, f"{dotted} is already {value!r} in small"
    assert small.replace(**SMALL_LONG_OVERRIDES) == load_config("small_long")


# What configs/student.yaml changes in `small` (docs/ensembles_and_students.md), and tiny_student.yaml in `tiny`.
STUDENT_OVERRIDES = {"model.decoder_layers": 2, "model.tied_embeddings": True}


@pytest.mark.parametrize("name, base", [("student", "small"), ("tiny_student", "tiny")])
def test_a_student_is_its_base_with_a_two_layer_decoder_and_tied_embeddings(name, base):
    with open(os.path.join(CONFIG_DIR, f"{name}.yaml"), encoding="utf-8") as handle:
        raw = yaml.safe_load(handle)
    assert raw.pop("base") == base
    assert {f"{section}.{key}" for section, values in raw.items() for key in values} == set(STUDENT_OVERRIDES)
    assert load_config(base).replace(**STUDENT_OVERRIDES) == load_config(name)
