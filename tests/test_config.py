"""Unit tests of hpsearch.spec.config: loading, validation, overrides and the key reference.

Pure: no Ray, torch, Lightning or Optuna is needed (nor imported) here.
"""

from __future__ import annotations

import copy
import math
from pathlib import Path
from typing import Any

import pytest
import yaml

from hpsearch.spec.config import (
    MAX_EPOCHS,
    Config,
    check_training_cpus,
    load,
    reference_keys,
    validate,
)
from hpsearch.spec.objective import mode_from_metric
from hpsearch.spec.raw_yaml import MAX_DEPTH, apply_overrides, parse_override, read_yaml
from hpsearch.spec.study_storage import check_storage
from hpsearch.errors import EXIT_CONFIG, ConfigError
from hpsearch.spec.space import CategoricalParam, FloatParam, IntParam

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = sorted((REPO / "search_spaces").glob("*.yaml"))

#: The smallest valid config: required keys only.
MINIMAL: dict[str, Any] = {
    "name": "demo",
    "trainable": "pkg.mod:build",
    "objective": {"metric": "val_acc"},
    "max_epochs": 10,
    "space": {
        "lr": {"type": "float", "low": 1.0e-4, "high": 0.1, "log": True},
        "units": {"type": "int", "low": 8, "high": 64},
        "opt": {"type": "categorical", "choices": ["adam", "sgd"]},
    },
}


def minimal(**top: Any) -> dict[str, Any]:
    """A deep copy of MINIMAL with top-level keys replaced."""
    raw = copy.deepcopy(MINIMAL)
    raw.update(top)
    return raw


def with_set(**dotted: Any) -> dict[str, Any]:
    """MINIMAL with ``{"a.b": v}`` overrides applied (keys use '__' for '.')."""
    return apply_overrides(MINIMAL, {k.replace("__", "."): v for k, v in dotted.items()})


def without(path: str) -> dict[str, Any]:
    """MINIMAL with the dotted key ``path`` removed."""
    raw = copy.deepcopy(MINIMAL)
    node = raw
    parts = path.split(".")
    for part in parts[:-1]:
        node = node[part]
    del node[parts[-1]]
    return raw


def config_error(raw: Any) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        validate(raw)
    return info.value


def assert_names(err: ConfigError, field: str, *fragments: str) -> None:
    """The error names ``field`` (as its field and in its text) and every fragment."""
    text = str(err)
    assert err.field == field, text
    where = f"{err.where}: " if err.where else ""  # path:line, when read from a file
    assert text.startswith(f"{where}{field}: "), text
    for fragment in fragments:
        assert fragment in text, f"{fragment!r} not in {text!r}"
    assert err.exit_code == EXIT_CONFIG


def write(tmp_path: Path, text: str, name: str = "space.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def leaf_paths(data: dict[str, Any], prefix: str = "") -> set[str]:
    """Dotted paths of the leaves of ``data``; ``space`` counts as one leaf."""
    out: set[str] = set()
    for key, value in data.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict) and path != "space":
            out |= leaf_paths(value, path + ".")
        else:
            out.add(path)
    return out


# ---------------------------------------------------------------------------------------
# Valid input.


def test_examples_exist():
    assert EXAMPLES, "search_spaces/*.yaml has no examples"


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_example_validates(path):
    config = load(path)
    assert isinstance(config, Config)
    assert len(config.space) >= 1
    assert config.name
    assert ":" in config.trainable


def test_digits_example_values():
    config = load(REPO / "search_spaces" / "digits_mlp.yaml")
    assert config.name == "digits-mlp"
    assert config.objective.metric == "val_acc"
    assert config.space["lr"] == FloatParam(1.0e-4, 0.3, log=True)
    assert config.space["hidden"] == IntParam(16, 256, log=True)
    assert config.space["dropout"] == FloatParam(0.0, 0.5, step=0.05)
    assert config.space["batch_size"] == CategoricalParam((32, 64, 128))
    assert config.search.concurrency == 2
    assert config.resources.cpu == 1.0 and isinstance(config.resources.cpu, float)


def test_defaults_are_filled_in():
    config = validate(MINIMAL)
    assert config.objective.mode == "max"
    assert config.search.sampler == "tpe"
    assert config.search.n_trials == 16
    assert config.search.concurrency is None
    assert config.search.seed == 0
    assert config.search.max_failures == 0
    assert config.resources.cpu == 1.0
    assert config.resources.gpu == 0.0
    assert config.pruning.policy == "none"
    assert config.pruning.min_epochs == 1
    assert config.pruning.reduction_factor == 3.0
    assert config.pruning.startup_trials == 5
    assert config.storage is None
    assert config.cluster.address is None
    assert list(config.space) == ["lr", "units", "opt"]
    assert config.space["units"] == IntParam(8, 64)


def test_null_sections_get_defaults():
    config = validate(minimal(search=None, resources=None, pruning=None, cluster=None))
    assert config == validate(MINIMAL)


def test_reference_defaults_match_a_minimal_config():
    plain = validate(MINIMAL).to_dict()
    for key, default, _doc in reference_keys():
        if default in ("required", "from the metric name"):
            continue
        node: Any = plain
        for part in key.split("."):
            node = node[part]
        shown = "null" if node is None else str(node)
        assert shown == default, key


def test_validate_does_not_mutate_input():
    raw = copy.deepcopy(MINIMAL)
    validate(raw)
    assert raw == MINIMAL


def test_config_is_immutable():
    config = validate(MINIMAL)
    with pytest.raises(Exception):
        config.name = "other"  # type: ignore[misc]
    with pytest.raises(Exception):
        config.search.n_trials = 3  # type: ignore[misc]


# ---------------------------------------------------------------------------------------
# Unknown and missing keys.


def test_unknown_top_level_key_suggests_the_close_one():
    err = config_error(minimal(serach={"n_trials": 3}))
    assert_names(err, "serach", "unknown key", "did you mean 'search'?")


def test_unknown_key_without_a_close_match_lists_known_keys():
    err = config_error(minimal(zzzqqq=1))
    assert_names(err, "zzzqqq", "unknown key", "known keys:", "trainable", "space")


def test_unknown_nested_key():
    err = config_error(with_set(search__n_trails=3))
    assert_names(err, "search.n_trails", "unknown key", "did you mean 'n_trials'?")


def test_unknown_key_inside_a_param():
    raw = with_set(space__lr__lo=0.1)
    err = config_error(raw)
    assert_names(err, "space.lr.lo", "unknown key", "low", "high")


@pytest.mark.parametrize("path", ["name", "trainable", "objective", "max_epochs", "space"])
def test_missing_required_top_level_key(path):
    assert_names(config_error(without(path)), path, "is required")


def test_missing_objective_metric():
    raw = minimal(objective={"mode": "min"})
    assert_names(config_error(raw), "objective.metric", "is required")


@pytest.mark.parametrize("key", ["low", "high"])
def test_missing_param_bound(key):
    raw = copy.deepcopy(MINIMAL)
    del raw["space"]["units"][key]
    assert_names(config_error(raw), f"space.units.{key}", "is required")


def test_missing_choices():
    raw = with_set(**{"space__opt": {"type": "categorical"}})
    assert_names(config_error(raw), "space.opt.choices", "is required")


LOCATED = """\
name: located
trainable: pkg.mod:build
objective: {metric: val_acc}
max_epochs: 5
space:
  lr:
    type: float
    low: 1.0e-4
    high: 0.3
    log: true
search:
  n_trails: 3
"""


def load_error(path: Path, overrides=None) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        load(path, overrides)
    return info.value


def test_an_error_in_a_file_names_its_line(tmp_path):
    """A field written in the file is named with ``path:line``, as compilers do; an
    override's value, or a mapping given in code, has no line to name."""
    path = write(tmp_path, LOCATED)
    err = load_error(path)
    assert str(err) == (f"{path}:12: search.n_trails: unknown key; did you mean "
                        "'n_trials'?"), str(err)
    assert err.field == "search.n_trails" and err.where == f"{path}:12"
    fixed = LOCATED.replace("n_trails", "n_trials")
    low = write(tmp_path, fixed.replace("low: 1.0e-4", "low: -1"), "low.yaml")
    assert str(load_error(low)).startswith(f"{low}:8: space.lr.low: must be > 0")
    # A missing key is named at its nearest written parent.
    missing = write(tmp_path, fixed.replace("objective: {metric: val_acc}", "objective: {}"),
                    "missing.yaml")
    assert str(load_error(missing)) == f"{missing}:3: objective.metric: is required"
    # The value an override set is not the file's: no line.
    err = load_error(path, ["search.n_trails=4"])
    assert err.where is None and str(err).startswith("search.n_trails: unknown key"), str(err)
    err = load_error(write(tmp_path, fixed, "fixed.yaml"), ["space.lr.low=-2"])
    assert err.where is None and str(err).startswith("space.lr.low: "), str(err)
    err = load_error(path, ["space.lr={type: float, low: -2, high: 1, log: true}"])
    assert err.where is None and str(err).startswith("space.lr.low: "), str(err)
    err = load_error(path, ["space.lr.high=0.5"])  # an override elsewhere: the line stays
    assert err.where == f"{path}:12", str(err)
    # hpsearch.run(path, trainable=...): the file's lines, but for the trainable it replaces.
    from hpsearch.driver.prepare import _load_config

    with pytest.raises(ConfigError) as info:
        _load_config(low, None, "pkg.other:build")
    assert info.value.where == f"{low}:8", str(info.value)
    # No file, no line.
    err = load_error(yaml.safe_load(LOCATED))
    assert err.where is None and str(err).startswith("search.n_trails: "), str(err)


# ---------------------------------------------------------------------------------------
# Bad values: every error names the dotted path and shows the bad value.

BAD_VALUES = [
    # (id, overrides applied to MINIMAL, field, fragments of the message)
    ("float-low-gt-high", {"space.lr": {"type": "float", "low": 0.5, "high": 0.1}},
     "space.lr.low", ["must be <= high (0.1)", "(got 0.5)"]),
    ("int-low-gt-high", {"space.units": {"type": "int", "low": 65, "high": 64}},
     "space.units.low", ["must be <= high (64)", "(got 65)"]),
    ("log-low-zero", {"space.lr.low": 0.0}, "space.lr.low", ["log: true", "(got 0.0)"]),
    ("log-low-negative", {"space.lr.low": -1.0}, "space.lr.low", ["log: true", "(got -1.0)"]),
    ("int-log-low-zero", {"space.units": {"type": "int", "low": 0, "high": 8, "log": True}},
     "space.units.low", ["log: true", "(got 0)"]),
    ("empty-choices", {"space.opt.choices": []}, "space.opt.choices",
     ["non-empty list", "(got [])"]),
    ("choices-not-a-list", {"space.opt.choices": "adam"}, "space.opt.choices",
     ["non-empty list", "(got 'adam')"]),
    ("duplicate-choice", {"space.opt.choices": ["adam", "sgd", "adam"]},
     "space.opt.choices[2]", ["duplicate", "(got 'adam')"]),
    ("duplicate-int-choice", {"space.opt.choices": [1, 2, 1]},
     "space.opt.choices[2]", ["duplicate", "(got 1)"]),
    ("list-choice", {"space.opt.choices": ["adam", [1, 2]]}, "space.opt.choices[1]",
     ["string, number, bool or null", "(got [1, 2])"]),
    ("dict-choice", {"space.opt.choices": [{"a": 1}]}, "space.opt.choices[0]",
     ["string, number, bool or null", "(got {'a': 1})"]),
    ("float-step-not-dividing",
     {"space.lr": {"type": "float", "low": 0.0, "high": 1.0, "step": 0.3}},
     "space.lr.step", ["must divide high - low (1)", "(got 0.3)"]),
    ("int-step-not-dividing", {"space.units.step": 5}, "space.units.step",
     ["must divide high - low (56)", "(got 5)"]),
    ("float-step-with-log", {"space.lr.step": 0.1}, "space.lr.step",
     ["cannot be combined with log", "(got 0.1)"]),
    ("int-step-with-log",
     {"space.units": {"type": "int", "low": 2, "high": 64, "log": True, "step": 2}},
     "space.units.step", ["cannot be combined with log", "(got 2)"]),
    ("float-step-zero", {"space.lr": {"type": "float", "low": 0.0, "high": 1.0, "step": 0.0}},
     "space.lr.step", ["must be > 0", "(got 0.0)"]),
    ("float-step-negative",
     {"space.lr": {"type": "float", "low": 0.0, "high": 1.0, "step": -0.5}},
     "space.lr.step", ["must be > 0", "(got -0.5)"]),
    ("int-step-zero", {"space.units.step": 0}, "space.units.step", ["must be > 0", "(got 0)"]),
    ("float-step-too-fine",
     {"space.lr": {"type": "float", "low": 0.0, "high": 1.0, "step": 1.0e-6}},
     "space.lr.step", ["more than 100000 values", "(got 1e-06)"]),
    ("int-low-fractional", {"space.units.low": 2.5}, "space.units.low",
     ["must be an integer", "(got 2.5)"]),
    ("int-step-fractional", {"space.units.step": 0.5}, "space.units.step",
     ["must be an integer", "(got 0.5)"]),
    ("max-epochs-fractional", {"max_epochs": 2.5}, "max_epochs",
     ["must be an integer", "(got 2.5)"]),
    ("n-trials-fractional", {"search.n_trials": 2.5}, "search.n_trials",
     ["must be an integer", "(got 2.5)"]),
    ("n-trials-zero", {"search.n_trials": 0}, "search.n_trials", [">= 1", "(got 0)"]),
    ("concurrency-zero", {"search.concurrency": 0}, "search.concurrency", [">= 1", "(got 0)"]),
    ("seed-negative", {"search.seed": -1}, "search.seed", [">= 0", "(got -1)"]),
    ("max-epochs-bool", {"max_epochs": True}, "max_epochs",
     ["must be an integer", "(got True)"]),
    ("seed-bool", {"search.seed": False}, "search.seed", ["must be an integer", "(got False)"]),
    ("float-low-bool", {"space.lr.low": True}, "space.lr.low", ["must be a number", "(got True)"]),
    ("int-high-bool", {"space.units.high": True}, "space.units.high",
     ["must be an integer", "(got True)"]),
    ("cpu-bool", {"resources.cpu": True}, "resources.cpu", ["must be a number", "(got True)"]),
    ("gpu-bool", {"resources.gpu": False}, "resources.gpu", ["must be a number", "(got False)"]),
    ("log-not-bool", {"space.lr.log": "yes"}, "space.lr.log",
     ["true or false", "(got 'yes')"]),
    ("float-low-word", {"space.lr.low": "small"}, "space.lr.low",
     ["must be a number", "(got 'small')"]),
    ("float-low-list", {"space.lr.low": [0.1]}, "space.lr.low",
     ["must be a number", "(got [0.1])"]),
    ("int-high-string", {"space.units.high": "64"}, "space.units.high",
     ["must be an integer", "(got '64')"]),
    ("float-low-inf", {"space.lr": {"type": "float", "low": -math.inf, "high": 1.0}},
     "space.lr.low", ["finite", "(got -inf)"]),
    ("float-high-inf", {"space.lr.high": math.inf}, "space.lr.high", ["finite", "(got inf)"]),
    ("float-high-nan", {"space.lr.high": math.nan}, "space.lr.high", ["finite", "(got nan)"]),
    ("float-high-inf-string", {"space.lr.high": "inf"}, "space.lr.high",
     ["finite", "(got 'inf')"]),
    ("cpu-inf", {"resources.cpu": math.inf}, "resources.cpu", ["finite", "(got inf)"]),
    ("reduction-nan", {"pruning.reduction_factor": math.nan}, "pruning.reduction_factor",
     ["finite", "(got nan)"]),
    ("float-range-overflows",
     {"space.lr": {"type": "float", "low": -1.0e308, "high": 1.0e308}},
     "space.lr.high", ["too large", "(got 1e+308)"]),
    ("param-type-unknown", {"space.lr.type": "double"}, "space.lr.type",
     ["float, int, categorical or const", "(got 'double')"]),
    ("param-type-missing", {"space.lr": {"low": 0.1, "high": 0.2}}, "space.lr.type",
     ["float, int, categorical or const", "(got None)"]),
    ("param-not-a-mapping", {"space.lr": [0.1]}, "space.lr", ["'type'", "(got [0.1])"]),
    ("param-null", {"space.lr": None}, "space.lr", ["'type'", "constant", "(got None)"]),
    ("space-empty", {"space": {}}, "space", ["non-empty mapping", "(got {})"]),
    ("space-a-list", {"space": ["lr"]}, "space", ["non-empty mapping", "(got ['lr'])"]),
    ("reserved-param-prefix", {"space.hps_lr": {"type": "float", "low": 0.1, "high": 0.2}},
     "space.hps_lr", ["'hps_'", "reserved"]),
    ("name-with-slash", {"name": "a/b"}, "name", ["letters, digits", "(got 'a/b')"]),
    ("name-empty", {"name": ""}, "name", ["non-empty string", "(got '')"]),
    ("name-starts-with-dot", {"name": ".hidden"}, "name", ["(got '.hidden')"]),
    ("name-not-a-string", {"name": 42}, "name", ["non-empty string", "(got 42)"]),
    ("trainable-without-colon", {"trainable": "pkg.mod.build"}, "trainable",
     ["package.module:function", "(got 'pkg.mod.build')"]),
    ("trainable-two-colons", {"trainable": "pkg:mod:build"}, "trainable",
     ["package.module:function", "(got 'pkg:mod:build')"]),
    ("trainable-path-syntax", {"trainable": "pkg/mod.py:build"}, "trainable",
     ["(got 'pkg/mod.py:build')"]),
    ("mode-unknown", {"objective.mode": "maximize"}, "objective.mode",
     ["one of max, min", "(got 'maximize')"]),
    ("metric-empty", {"objective.metric": "  "}, "objective.metric",
     ["non-empty string", "(got '  ')"]),
    ("sampler-unknown", {"search.sampler": "hyperopt"}, "search.sampler",
     ["one of tpe, random, cmaes, qmc, grid", "(got 'hyperopt')"]),
    ("grid-with-a-float", {"search.sampler": "grid"}, "search.sampler",
     ["grid needs", "space.lr is a continuous float", "(got 'grid')"]),
    ("policy-unknown", {"pruning.policy": "hyperband"}, "pruning.policy",
     ["one of none, asha, median", "(got 'hyperband')"]),
    ("min-epochs-equal-max", {"pruning.policy": "asha", "pruning.min_epochs": 10},
     "pruning.min_epochs", ["< max_epochs (10)", "(got 10)"]),
    ("min-epochs-above-max", {"pruning.policy": "median", "pruning.min_epochs": 11},
     "pruning.min_epochs", ["< max_epochs (10)", "(got 11)"]),
    ("min-epochs-zero", {"pruning.min_epochs": 0}, "pruning.min_epochs", [">= 1", "(got 0)"]),
    ("reduction-factor-one", {"pruning.reduction_factor": 1}, "pruning.reduction_factor",
     ["> 1", "(got 1)"]),
    ("gpu-one-and-a-half", {"resources.gpu": 1.5}, "resources.gpu",
     ["fraction <= 1 or a whole number", "(got 1.5)"]),
    ("gpu-negative", {"resources.gpu": -0.5}, "resources.gpu", [">= 0", "(got -0.5)"]),
    ("cpu-zero", {"resources.cpu": 0}, "resources.cpu", ["must be > 0", "(got 0)"]),
    ("cpu-negative", {"resources.cpu": -1}, "resources.cpu", ["must be > 0", "(got -1)"]),
    ("storage-not-a-url", {"storage": "optuna.db"}, "storage",
     ["storage URL", "(got 'optuna.db')"]),
    ("storage-not-a-string", {"storage": 5}, "storage", ["non-empty string", "(got 5)"]),
    ("address-not-a-string", {"cluster.address": 6379}, "cluster.address",
     ["non-empty string", "(got 6379)"]),
    ("section-not-a-mapping", {"search": 3}, "search", ["mapping", "(got 3)"]),
    ("section-a-list", {"resources": [1]}, "resources", ["mapping", "(got [1])"]),
]


@pytest.mark.parametrize(
    "overrides, field, fragments",
    [case[1:] for case in BAD_VALUES],
    ids=[case[0] for case in BAD_VALUES],
)
def test_bad_value_names_field_and_value(overrides, field, fragments):
    raw = apply_overrides(MINIMAL, overrides)
    err = config_error(raw)
    assert_names(err, field, *fragments)


def test_top_level_not_a_mapping():
    err = config_error(["name", "demo"])
    assert "must be a mapping" in str(err)
    assert "['name', 'demo']" in str(err)


@pytest.mark.parametrize("value", [[], 0, False, ""], ids=["list", "zero", "false", "empty"])
def test_falsy_non_mapping_section_is_rejected(value):
    # `search: []` (or 0, false, "") is not a mapping; it must not silently mean defaults
    # (only `search:` / null may). BUG: `raw[name] or {}` in config._build accepts them.
    err = config_error(minimal(search=value))
    assert_names(err, "search", "mapping", f"(got {value!r})")


@pytest.mark.parametrize("key, value", [("name", "demo\n"),
                                        ("cluster.address", "head:6379\n")])
def test_value_with_trailing_newline_is_rejected(key, value):
    # The name becomes the run dir `runs/<name>/` and the study name; a newline must not
    # slip through. BUG: _NAME_RE (and _HOST_PORT_RE) end with `$`, which also matches
    # before a final "\n"; `re.fullmatch` or `\Z` would not.
    err = config_error(apply_overrides(MINIMAL, {key: value}))
    assert_names(err, key, f"(got {value!r})")


# ---------------------------------------------------------------------------------------
# Accepted edge values.


@pytest.mark.parametrize("gpu", [0, 0.25, 0.5, 1, 2, 2.0, 8])
def test_gpu_fractions_and_whole_numbers_accepted(gpu):
    config = validate(with_set(resources__gpu=gpu))
    assert config.resources.gpu == float(gpu)
    assert isinstance(config.resources.gpu, float)


@pytest.mark.parametrize("cpu", [0.5, 1, 4])
def test_cpu_positive_accepted(cpu):
    assert validate(with_set(resources__cpu=cpu)).resources.cpu == float(cpu)


def test_min_epochs_may_reach_max_epochs_without_pruning():
    config = validate(with_set(pruning__min_epochs=50))
    assert config.pruning.policy == "none"
    assert config.pruning.min_epochs == 50


def test_min_epochs_below_max_epochs_with_pruning():
    config = validate(with_set(pruning__policy="asha", pruning__min_epochs=9))
    assert config.pruning.min_epochs == 9


@pytest.mark.parametrize(
    "url", ["sqlite:///runs/x/optuna.db", "postgresql://u:p@host:5432/db",
            "mysql+pymysql://u@h/db"],
)
def test_storage_urls_accepted(url):
    assert validate(minimal(storage=url)).storage == url


@pytest.mark.parametrize("address", [None, "auto", "head:6379", "10.0.0.1:6379",
                                     "node-1.example.org:6379"])
def test_cluster_addresses_accepted(address):
    assert validate(with_set(cluster__address=address)).cluster.address == address


@pytest.mark.parametrize(
    "address, fragment",
    [
        ("ray://head:10001", "Ray Client (ray://) is not supported"),
        ("head", "must be null, 'auto' or the head's 'host:port'"),
        ("head:port", "must be null, 'auto' or the head's 'host:port'"),
        ("http://head:8265", "must be null, 'auto' or the head's 'host:port'"),
        ("", "non-empty string"),
    ],
)
def test_cluster_addresses_rejected(address, fragment):
    err = config_error(with_set(cluster__address=address))
    assert_names(err, "cluster.address", fragment, f"(got {address!r})")


@pytest.mark.parametrize("name", ["digits-mlp", "a", "run_1.v2", "9lives"])
def test_names_accepted(name):
    assert validate(minimal(name=name)).name == name


def test_integral_float_accepted_for_int_fields():
    config = validate(with_set(max_epochs=12.0, space__units__low=8.0))
    assert config.max_epochs == 12 and type(config.max_epochs) is int
    assert config.space["units"].low == 8 and type(config.space["units"].low) is int


def test_int_bounds_accepted_for_float_params():
    config = validate(with_set(space__lr={"type": "float", "low": 0, "high": 1}))
    assert config.space["lr"] == FloatParam(0.0, 1.0)
    assert type(config.space["lr"].low) is float


def test_equal_bounds_accepted():
    config = validate(with_set(space__units={"type": "int", "low": 5, "high": 5}))
    assert config.space["units"] == IntParam(5, 5)


def test_steps_that_divide_accepted():
    config = validate(with_set(
        space__lr={"type": "float", "low": 0.1, "high": 0.7, "step": 0.2},
        space__units={"type": "int", "low": 8, "high": 64, "step": 8},
    ))
    assert config.space["lr"] == FloatParam(0.1, 0.7, step=0.2)
    assert config.space["units"] == IntParam(8, 64, step=8)


def test_int_log_with_step_one_accepted():
    config = validate(with_set(space__units__log=True, space__units__step=1))
    assert config.space["units"] == IntParam(8, 64, log=True, step=1)


def test_choices_of_different_types_are_kept():
    config = validate(with_set(space__opt__choices=[1, False, 2.5, None, "1"]))
    assert config.space["opt"].choices == (1, False, 2.5, None, "1")


@pytest.mark.parametrize("choices", [[1, True], [1, 1.0], [0, False], [2.0, 2]])
def test_choices_optuna_cannot_tell_apart_are_rejected(choices):
    with pytest.raises(ConfigError) as info:
        validate(with_set(space__opt__choices=choices))
    assert info.value.field == "space.opt.choices[1]"
    assert "Optuna cannot tell them apart" in str(info.value)


# ---------------------------------------------------------------------------------------
# Numbers written as YAML text: PyYAML reads `1e-4` (no dot) as a string.


SCIENTIFIC = """\
name: sci
trainable: pkg.mod:build
objective: {metric: loss, mode: min}
max_epochs: 5
space:
  lr: {type: float, low: 1e-4, high: 1e-1, log: true}
resources: {cpu: 5e-1}
"""


def test_yaml_reads_exponent_without_dot_as_string(tmp_path):
    raw = read_yaml(write(tmp_path, SCIENTIFIC))
    assert raw["space"]["lr"]["low"] == "1e-4"  # the premise of the rule


def test_exponent_string_accepted_for_float_fields(tmp_path):
    config = load(write(tmp_path, SCIENTIFIC))
    lr = config.space["lr"]
    assert lr == FloatParam(1.0e-4, 0.1, log=True)
    assert type(lr.low) is float and type(lr.high) is float
    assert config.resources.cpu == 0.5


def test_exponent_string_rejected_for_int_bounds(tmp_path):
    text = SCIENTIFIC.replace(
        "lr: {type: float, low: 1e-4, high: 1e-1, log: true}",
        "units: {type: int, low: 1e2, high: 200}",
    )
    path = write(tmp_path, text)
    assert read_yaml(path)["space"]["units"]["low"] == "1e2"
    with pytest.raises(ConfigError) as info:
        load(path)
    assert_names(info.value, "space.units.low", "must be an integer", "(got '1e2')")


def test_exponent_string_rejected_for_int_field(tmp_path):
    path = write(tmp_path, SCIENTIFIC.replace("max_epochs: 5", "max_epochs: 1e1"))
    with pytest.raises(ConfigError) as info:
        load(path)
    assert_names(info.value, "max_epochs", "must be an integer", "(got '1e1')")


@pytest.mark.parametrize("literal, shown", [(".inf", "inf"), ("-.inf", "-inf"),
                                            (".nan", "nan"), ("'nan'", "'nan'")])
def test_non_finite_yaml_floats_rejected(tmp_path, literal, shown):
    path = write(tmp_path, SCIENTIFIC.replace("high: 1e-1", f"high: {literal}"))
    with pytest.raises(ConfigError) as info:
        load(path)
    assert_names(info.value, "space.lr.high", "finite number", f"(got {shown})")


# ---------------------------------------------------------------------------------------
# Overrides.


@pytest.mark.parametrize(
    "text, key, value",
    [
        ("search.n_trials=3", "search.n_trials", 3),
        ("cluster.address=auto", "cluster.address", "auto"),
        ("space.lr.high=0.5", "space.lr.high", 0.5),
        ("space.lr.low=1e-4", "space.lr.low", "1e-4"),
        ("space.lr.log=true", "space.lr.log", True),
        ("search.concurrency=null", "search.concurrency", None),
        ("search.concurrency=", "search.concurrency", None),
        ("space.opt.choices=[a, b, 3]", "space.opt.choices", ["a", "b", 3]),
        ("objective={metric: loss, mode: min}", "objective", {"metric": "loss", "mode": "min"}),
        (" search.seed = 7 ", "search.seed", 7),
        ("storage=sqlite:///a=b.db", "storage", "sqlite:///a=b.db"),
        ("name='42'", "name", "42"),
    ],
)
def test_parse_override_types_like_yaml(text, key, value):
    got_key, got_value = parse_override(text)
    assert got_key == key
    assert got_value == value
    assert type(got_value) is type(value)


@pytest.mark.parametrize("text", ["search.n_trials", "=3", "a..b=1", ".a=1", "a.=1", ""])
def test_malformed_override_rejected(text):
    with pytest.raises(ConfigError) as info:
        parse_override(text)
    assert_names(info.value, "--set", "dotted.key=value", f"(got {text!r})")


def test_override_with_invalid_yaml_value():
    with pytest.raises(ConfigError) as info:
        parse_override("space.opt.choices=[a, b")
    assert_names(info.value, "space.opt.choices", "not valid YAML", "(got '[a, b')")


def test_overrides_applied_from_strings():
    config = load(MINIMAL, ["search.n_trials=3", "cluster.address=auto",
                            "space.lr.high=0.5", "objective.mode=min"])
    assert config.search.n_trials == 3
    assert config.cluster.address == "auto"
    assert config.space["lr"].high == 0.5
    assert config.objective.mode == "min"


def test_overrides_applied_from_mapping():
    config = load(MINIMAL, {"search.n_trials": 4, "space.units.high": 128})
    assert config.search.n_trials == 4
    assert config.space["units"].high == 128


def test_later_override_wins():
    config = load(MINIMAL, ["search.n_trials=3", "search.n_trials=5"])
    assert config.search.n_trials == 5


def test_override_on_a_file(tmp_path):
    path = REPO / "search_spaces" / "digits_mlp.yaml"
    config = load(path, ["search.n_trials=3", "space.lr.high=0.5"])
    assert config.search.n_trials == 3
    assert config.space["lr"].high == 0.5
    assert config.space["lr"].low == load(path).space["lr"].low


def test_override_creates_missing_section():
    assert "search" not in MINIMAL
    raw = apply_overrides(MINIMAL, ["search.n_trials=3"])
    assert raw["search"] == {"n_trials": 3}
    assert validate(raw).search.n_trials == 3


def test_override_fills_null_section():
    raw = apply_overrides(minimal(search=None), ["search.seed=9"])
    assert raw["search"] == {"seed": 9}


def test_override_creates_nested_param():
    raw = apply_overrides(MINIMAL, ["space.wd.type=float", "space.wd.low=0",
                                    "space.wd.high=0.1"])
    assert validate(raw).space["wd"] == FloatParam(0.0, 0.1)


def test_override_into_a_scalar_names_the_path():
    with pytest.raises(ConfigError) as info:
        apply_overrides(MINIMAL, ["name.first=3"])
    assert_names(info.value, "name", "not a mapping", "'name.first'", "(got 'demo')")


def test_override_below_a_scalar_deep_names_the_path():
    with pytest.raises(ConfigError) as info:
        apply_overrides(MINIMAL, {"space.lr.low.x": 1})
    assert_names(info.value, "space.lr.low", "not a mapping", "(got 0.0001)")


def test_override_into_a_list_names_the_path():
    with pytest.raises(ConfigError) as info:
        apply_overrides(MINIMAL, ["space.opt.choices.first=x"])
    assert_names(info.value, "space.opt.choices", "not a mapping", "(got ['adam', 'sgd'])")


def test_overrides_do_not_mutate_the_source():
    raw = copy.deepcopy(MINIMAL)
    out = apply_overrides(raw, ["space.lr.high=0.5", "search.n_trials=3"])
    assert raw == MINIMAL
    assert out["space"]["lr"]["high"] == 0.5


def test_no_overrides_returns_an_equal_copy():
    out = apply_overrides(MINIMAL, None)
    assert out == MINIMAL and out is not MINIMAL
    assert apply_overrides(MINIMAL, []) == MINIMAL


def test_bad_override_value_is_validated():
    with pytest.raises(ConfigError) as info:
        load(MINIMAL, ["search.n_trials=abc"])
    assert_names(info.value, "search.n_trials", "must be an integer", "(got 'abc')")


def test_unknown_override_key_is_rejected():
    with pytest.raises(ConfigError) as info:
        load(MINIMAL, ["search.n_trails=3"])
    assert_names(info.value, "search.n_trails", "did you mean 'n_trials'?")


# ---------------------------------------------------------------------------------------
# Reading files.


def test_read_yaml_returns_the_mapping(tmp_path):
    raw = read_yaml(write(tmp_path, "name: x\nmax_epochs: 3\n"))
    assert raw == {"name": "x", "max_epochs": 3}


def test_malformed_yaml_names_the_line(tmp_path):
    text = "name: x\ntrainable: a:b\nspace: {lr: {type: float, low: 1, high: 2}\nmax_epochs: 3\n"
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        read_yaml(path)
    message = str(info.value)
    assert "malformed YAML" in message
    assert "line 4" in message
    assert str(path) in message


def test_malformed_yaml_bad_indent_names_the_line(tmp_path):
    path = write(tmp_path, "name: x\nmax_epochs: 3\n  trainable: a:b\n")
    with pytest.raises(ConfigError) as info:
        load(path)
    assert "line 3" in str(info.value)


def test_tab_indented_yaml_names_the_line(tmp_path):
    path = write(tmp_path, "name: x\nspace:\n\tlr: 1\n")
    with pytest.raises(ConfigError) as info:
        read_yaml(path)
    assert "line 3" in str(info.value)


@pytest.mark.parametrize("text", ["", "\n\n", "# only a comment\n", "---\n"])
def test_empty_file_rejected(tmp_path, text):
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        read_yaml(path)
    assert "is empty" in str(info.value)
    assert str(path) in str(info.value)


@pytest.mark.parametrize("text, shown", [("- name\n- demo\n", "['name', 'demo']"),
                                         ("just text\n", "'just text'"),
                                         ("42\n", "42")])
def test_top_level_must_be_a_mapping(tmp_path, text, shown):
    with pytest.raises(ConfigError) as info:
        load(write(tmp_path, text))
    assert "top level must be a mapping" in str(info.value)
    assert f"(got {shown})" in str(info.value)


def test_missing_file_rejected(tmp_path):
    missing = tmp_path / "nope.yaml"
    with pytest.raises(ConfigError) as info:
        load(missing)
    assert "file not found" in str(info.value)
    assert str(missing) in str(info.value)


def test_directory_instead_of_file_rejected(tmp_path):
    with pytest.raises(ConfigError) as info:
        read_yaml(tmp_path)
    assert "cannot read file" in str(info.value)


def test_load_accepts_str_path(tmp_path):
    path = write(tmp_path, yaml.safe_dump(MINIMAL))
    assert load(str(path)) == validate(MINIMAL)


# ---------------------------------------------------------------------------------------
# Round trip and the key reference.


RICH = minimal(
    objective={"metric": "val_loss", "mode": "min"},
    space={
        "lr": {"type": "float", "low": "1e-5", "high": 0.1, "log": True},
        "dropout": {"type": "float", "low": 0.0, "high": 0.5, "step": 0.05},
        "units": {"type": "int", "low": 8, "high": 512, "log": True},
        "layers": {"type": "int", "low": 1, "high": 9, "step": 2},
        "act": {"type": "categorical", "choices": ["relu", 1, False, 2.5, None]},
        "channels": 16,
        "beta": {"type": "float", "low": 0.1, "high": 0.9, "condition": {"act": ["relu", 1]}},
    },
    search={"sampler": "random", "n_trials": 7, "concurrency": 3, "seed": 11,
            "max_failures": 2},
    resources={"cpu": 0.5, "gpu": 0.25},
    pruning={"policy": "median", "min_epochs": 3, "reduction_factor": 2,
             "startup_trials": 1},
    storage="sqlite:///elsewhere/study.db",
    cluster={"address": "auto"},
)


@pytest.mark.parametrize(
    "source", [MINIMAL, RICH, *EXAMPLES],
    ids=["minimal", "rich", *(p.name for p in EXAMPLES)],
)
def test_to_dict_round_trips(source):
    config = load(source)
    plain = config.to_dict()
    assert validate(plain) == config
    # ... and through YAML text, as `validate` prints it.
    assert validate(yaml.safe_load(yaml.safe_dump(plain, sort_keys=False))) == config


def test_to_dict_is_plain_data():
    plain = validate(RICH).to_dict()
    assert yaml.safe_load(yaml.safe_dump(plain)) == plain
    assert plain["space"]["act"] == {"type": "categorical",
                                     "choices": ["relu", 1, False, 2.5, None]}
    assert plain["space"]["layers"] == {"type": "int", "low": 1, "high": 9, "step": 2}
    assert plain["space"]["units"] == {"type": "int", "low": 8, "high": 512, "log": True}
    assert plain["space"]["lr"]["low"] == 1e-5


def test_reference_keys_cover_every_leaf():
    documented = [key for key, _default, _doc in reference_keys()]
    assert len(documented) == len(set(documented)), "a key is declared twice"
    for source in (MINIMAL, RICH):
        leaves = leaf_paths(validate(source).to_dict())
        assert leaves == set(documented)


def test_reference_keys_are_in_declaration_order():
    keys = [key for key, _default, _doc in reference_keys()]
    assert keys[:6] == ["name", "trainable", "objective.metric", "objective.mode",
                        "max_epochs", "space"]
    assert keys[-1] == "cluster.address"


def test_reference_keys_have_meanings_and_defaults():
    for key, default, doc in reference_keys():
        assert doc.strip(), key
        assert default, key
    required = {key for key, default, _doc in reference_keys() if default == "required"}
    assert required == {"name", "trainable", "objective.metric", "max_epochs", "space"}


def test_the_reference_documents_every_key():
    reference = REPO / "docs" / "reference.md"
    if not reference.is_file():
        pytest.fail("docs/reference.md does not exist, so it documents none of the config keys")
    text = reference.read_text(encoding="utf-8")
    # A row of the key table for each key, not a mention anywhere on the page.
    missing = [key for key, _d, _m in reference_keys() if f"\n| `{key}` | " not in text]
    assert not missing, f"docs/reference.md's key table lacks these keys: {missing}"



# ---------------------------------------------------------------------------------------
# Objective direction.


@pytest.mark.parametrize("metric, mode", [
    ("val_loss", "min"), ("loss", "min"), ("train_loss", "min"), ("valError", "min"),
    ("test_error_rate", "min"), ("val_mse", "min"), ("RMSE", "min"), ("val_mae", "min"),
    ("perplexity", "min"), ("val_Perplexity", "min"),
    ("val_acc", "max"), ("top1_acc", "max"), ("Accuracy", "max"), ("val_f1", "max"),
    ("F1_macro", "max"), ("roc_auc", "max"), ("AUC", "max"), ("precision@5", "max"),
    ("val_recall", "max"),
])
def test_mode_is_inferred_from_the_metric_name(metric, mode):
    assert mode_from_metric(metric) == mode
    config = validate(with_set(objective={"metric": metric}))
    assert config.objective.mode == mode
    assert config.warnings == ()
    assert config.to_dict()["objective"] == {"metric": metric, "mode": mode}


@pytest.mark.parametrize("metric", ["score", "reward", "val_ndcg", "acc_loss", "f1_error"])
def test_a_metric_name_that_does_not_say_needs_a_mode(metric):
    assert mode_from_metric(metric) is None
    err = config_error(with_set(objective={"metric": metric}))
    assert_names(err, "objective.mode", "is required", repr(metric), "set max or min")
    assert validate(with_set(objective={"metric": metric, "mode": "min"})).objective.mode == "min"


@pytest.mark.parametrize("metric, mode, usual", [("val_loss", "max", "minimised"),
                                                ("val_acc", "min", "maximised")])
def test_a_mode_that_contradicts_the_name_is_a_warning(metric, mode, usual):
    config = validate(with_set(objective={"metric": metric, "mode": mode}))
    assert config.objective.mode == mode  # as told
    (warning,) = config.warnings
    assert warning.startswith("objective.mode: ")
    assert f"{mode} contradicts the metric name {metric!r}" in warning and usual in warning
    assert "\n" not in warning


def test_warnings_are_not_a_key_and_do_not_change_equality():
    config = validate(with_set(objective={"metric": "val_loss", "mode": "max"}))
    assert "warnings" not in config.to_dict()
    assert validate(config.to_dict()) == config
    assert_names(config_error(minimal(warnings=["x"])), "warnings", "unknown key")


# ---------------------------------------------------------------------------------------
# Unknown keys: a key of another section is suggested by its dotted name.


@pytest.mark.parametrize("raw_key, suggested", [
    ("n_trials", "search.n_trials"), ("seed", "search.seed"), ("cpu", "resources.cpu"),
    ("min_epochs", "pruning.min_epochs"), ("n_trial", "search.n_trials"),
    ("max_cost", "budget.max_cost"),
])
def test_a_section_key_given_at_the_top_suggests_its_dotted_name(raw_key, suggested):
    err = config_error(apply_overrides(MINIMAL, [f"{raw_key}=4"]))
    assert_names(err, raw_key, "unknown key", f"did you mean '{suggested}'?")


def test_a_key_in_the_wrong_section_suggests_the_right_one():
    err = config_error(with_set(search__min_epochs=2))
    assert_names(err, "search.min_epochs", "did you mean 'pruning.min_epochs'?")


# ---------------------------------------------------------------------------------------
# Bounds the corpus found.


def test_max_epochs_has_a_sane_bound():
    assert validate(with_set(max_epochs=MAX_EPOCHS)).max_epochs == MAX_EPOCHS
    err = config_error(with_set(max_epochs=1_000_000_000))
    assert_names(err, "max_epochs", f"must be <= {MAX_EPOCHS}", "(got 1000000000)")


@pytest.mark.parametrize("max_epochs, min_epochs, field, fragment", [
    (10, 9, "pruning.min_epochs", "must be <= 8 with cost_aware"),
    (20, 18, "pruning.min_epochs", "must be <= 17 with cost_aware"),
    (2, 1, "max_epochs", "could never stop a trial"),
])
def test_cost_aware_that_could_never_decide_is_refused(max_epochs, min_epochs, field, fragment):
    # These were accepted: min_epochs < max_epochs, but cost_aware makes no decision in
    # the last tenth of the epochs (nor before epoch 2).
    err = config_error(with_set(max_epochs=max_epochs, pruning__policy="cost_aware",
                                pruning__min_epochs=min_epochs))
    assert_names(err, field, fragment)
    # One epoch earlier it can decide, and asha/median can too.
    if field == "pruning.min_epochs":
        validate(with_set(max_epochs=max_epochs, pruning__policy="cost_aware",
                          pruning__min_epochs=min_epochs - 1))
    validate(with_set(max_epochs=max_epochs, pruning__policy="asha",
                      pruning__min_epochs=min_epochs))


def test_cost_aware_decision_bound_matches_the_policy():
    from hpsearch.pruning.cost_aware import FINISH_SHARE

    # The last epoch config accepts for min_epochs is the last one at which the policy
    # does not continue unconditionally for being near the end (brute force here).
    for epochs in (3, 10, 20, 37, 101):
        last = max(e for e in range(1, epochs + 1) if epochs - e > FINISH_SHARE * epochs)
        validate(with_set(max_epochs=epochs, pruning__policy="cost_aware",
                          pruning__min_epochs=last))
        if last + 1 < epochs:
            config_error(with_set(max_epochs=epochs, pruning__policy="cost_aware",
                                  pruning__min_epochs=last + 1))


# ---------------------------------------------------------------------------------------
# CPU reservations a Lightning trial would not honour.


@pytest.mark.parametrize("cpu, gpu, devices, ok", [
    (1, 0, None, True), (4, 0, None, True), (1.5, 0, None, True), (2, 0, 2, True),
    (0.001, 0, None, False), (0.5, 0, None, False), (1, 0, 2, False), (1.5, 0, 2, False),
    (0.5, 0.5, None, True), (0.25, 1, None, True),
])
def test_cpu_only_trials_reserve_whole_cores(cpu, gpu, devices, ok):
    config = validate(with_set(resources={"cpu": cpu, "gpu": gpu, "devices": devices}))
    if ok:
        check_training_cpus(config)
        return
    with pytest.raises(ConfigError) as info:
        check_training_cpus(config)
    assert_names(info.value, "resources.cpu", "at least one whole core",
                 "max(1, int(cpu / processes))", f"(got {float(cpu)!r})")


# ---------------------------------------------------------------------------------------
# Storage URLs: checked without connecting.


def test_storage_check_accepts_installed_drivers(tmp_path):
    check_storage(f"sqlite:///{tmp_path / 'x.db'}")
    check_storage("sqlite:///relative.db")


@pytest.mark.parametrize("url, fragments", [
    ("foo://host/db", ["unknown database scheme 'foo'"]),
    ("postgresql+psycopg2://user:secret@host/db",
     ["driver 'psycopg2' is not installed", "pip install psycopg2-binary",
      "(got 'postgresql+psycopg2://user:***@host/db')"]),
    ("mysql+nosuchdriver://h/db", ["unknown database scheme 'mysql+nosuchdriver'"]),
    ("postgresql+asyncpg://h/db", ["asynchronous"]),
    ("sqlite://", ["in-memory"]),
    ("sqlite:////no/such/folder/x.db", ["folder", "does not exist"]),
    ("not a url://", ["not a database URL"]),
])
def test_storage_check_names_the_problem(url, fragments):
    pytest.importorskip("sqlalchemy")
    with pytest.raises(ConfigError) as info:
        check_storage(url)
    assert_names(info.value, "storage", *fragments)
    assert "secret" not in str(info.value)


# ---------------------------------------------------------------------------------------
# Samplers.


@pytest.mark.parametrize("sampler", ["tpe", "random", "cmaes", "qmc"])
def test_every_sampler_accepts_any_space(sampler):
    assert validate(with_set(search__sampler=sampler)).search.sampler == sampler


GRID_SPACE = {"opt": {"type": "categorical", "choices": ["adam", "sgd"]},
              "layers": {"type": "int", "low": 1, "high": 3}, "channels": 16}


def test_grid_runs_at_most_one_trial_per_point():
    config = validate(minimal(space=GRID_SPACE, search={"sampler": "grid", "n_trials": 6}))
    assert config.search.n_trials == 6 and config.warnings == ()
    config = validate(minimal(space=GRID_SPACE, search={"sampler": "grid", "n_trials": 16}))
    assert config.search.n_trials == 6
    (warning,) = config.warnings
    assert warning.startswith("search.n_trials: 16 is more than the grid's 6 configuration(s)")


# ---------------------------------------------------------------------------------------
# YAML: duplicate keys and depth.


@pytest.mark.parametrize("text, field, line, first", [
    ("name: a\nname: b\n", "name", 2, 1),
    ("space:\n  lr: {type: float, low: 0.1, high: 0.2}\n  opt: {type: const, value: 1}\n"
     "  lr: {type: float, low: 0.1, high: 0.3}\n", "space.lr", 4, 2),
    ("space:\n  lr:\n    type: float\n    low: 0.1\n    low: 0.2\n", "space.lr.low", 5, 4),
    ("search: {seed: 1, seed: 2}\n", "search.seed", 1, 1),
    ("a:\n  - {x: 1}\n  - {y: 1, y: 2}\n", "a[1].y", 3, 3),
    ("1: a\n1.0: b\n", "1.0", 2, 1),
])
def test_duplicate_keys_are_refused_with_path_and_line(tmp_path, text, field, line, first):
    with pytest.raises(ConfigError) as info:
        read_yaml(write(tmp_path, text))
    assert_names(info.value, field, f"duplicate key at line {line} (first at line {first})")


def test_yaml_merge_keys_are_not_duplicates(tmp_path):
    text = "base: &b {x: 1, y: 2}\nother:\n  <<: *b\n  y: 3\n"
    assert read_yaml(write(tmp_path, text))["other"] == {"x": 1, "y": 3}


@pytest.mark.parametrize("levels", [MAX_DEPTH + 1, 500, 5000])
def test_deeply_nested_yaml_is_one_error(tmp_path, levels):
    text = "name: x\nspace:\n  x:\n    type: categorical\n    choices: " + "[" * levels + \
        "]" * levels + "\n"
    with pytest.raises(ConfigError) as info:
        load(write(tmp_path, text))
    assert f"nested deeper than {MAX_DEPTH} levels" in str(info.value)
    assert "\n" not in str(info.value)


def test_deeply_nested_block_yaml_is_one_error(tmp_path):
    text = "".join("  " * i + "k:\n" for i in range(3000))
    with pytest.raises(ConfigError, match=f"nested deeper than {MAX_DEPTH} levels"):
        load(write(tmp_path, text))


def test_deeply_nested_mapping_source_is_one_error():
    deep: dict[str, Any] = {}
    node = deep
    for _ in range(20_000):
        node["k"] = {}
        node = node["k"]
    with pytest.raises(ConfigError) as info:
        load(minimal(extra=deep))
    assert f"nested deeper than {MAX_DEPTH} levels" in str(info.value)


def test_a_value_too_large_to_show_is_abridged_in_the_error():
    err = config_error(with_set(space__lr={"type": "categorical", "choices": list(range(10**5))},
                                space__units=list(range(10**5))))
    assert err.field == "space.units"
    assert len(str(err)) < 600


@pytest.mark.timeout(60)
def test_a_file_with_many_choices_loads_in_linear_time(tmp_path):
    # 100k choices: under a second, nearly all of it YAML parsing (libyaml); a quadratic
    # check would need 10^10 comparisons. (2M choices: validation 0.5 s, YAML parsing
    # 10-20 s here.)
    n = 100_000
    text = ("name: big\ntrainable: pkg.mod:build\nobjective: {metric: val_acc}\n"
            "max_epochs: 3\nspace:\n  x:\n    type: categorical\n    choices: ["
            + ", ".join(map(str, range(n))) + "]\n")
    config = load(write(tmp_path, text))
    assert len(config.space["x"].choices) == n


def test_a_median_pruner_that_would_wait_for_every_trial_is_a_warning():
    config = validate(with_set(pruning__policy="median", pruning__startup_trials=5,
                               search__n_trials=5))
    (warning,) = config.warnings
    assert warning.startswith("pruning.startup_trials: 5 >= search.n_trials (5)")
    assert validate(with_set(pruning__policy="median", pruning__startup_trials=4,
                             search__n_trials=5)).warnings == ()
