"""Every hpsearch exception survives pickling (Ray ships a trial's error to the driver
that way), found dynamically so a new one cannot be forgotten."""

from __future__ import annotations

import importlib
import inspect
import pickle
import pkgutil
from pathlib import Path

import cloudpickle
import pytest

import hpsearch
from hpsearch.errors import ConfigError, HpsearchError


def _import_everything() -> None:
    for info in pkgutil.walk_packages(hpsearch.__path__, "hpsearch."):
        if info.name.rsplit(".", 1)[-1] != "__main__":  # that one runs the CLI
            importlib.import_module(info.name)


def _subclasses(cls: type) -> list[type]:
    out = []
    for sub in cls.__subclasses__():
        out += [sub, *_subclasses(sub)]
    return out


def every_error_class() -> list[type]:
    _import_everything()
    # Ours only: Ray derives classes from an error a task raised
    # (``RayTaskError(TrialOutOfMemory)``, made at run time in ray.exceptions).
    classes = [c for c in (HpsearchError, *_subclasses(HpsearchError))
               if c.__module__.startswith("hpsearch")]
    return sorted(set(classes), key=lambda c: f"{c.__module__}.{c.__qualname__}")


def _value(annotation: str, name: str, owner: str):
    """A distinct value of the annotated type (strings by default), so a mix-up of
    arguments shows."""
    text = str(annotation)
    if "dict" in text or "Mapping" in text:
        return {"pid": 4242, "host": f"{name}-host"}
    if text.startswith("int"):
        return sum(map(ord, name))
    if "Path" in text:
        return Path(f"/{name}-of-{owner}")
    return f"{name}-of-{owner}"


def sample(cls: type) -> HpsearchError:
    """An instance built from its constructor's signature: every required argument a
    distinct value of its annotated type."""
    params = list(inspect.signature(cls.__init__).parameters.values())[1:]
    args, kwargs = [], {}
    for p in params:
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) or p.default is not p.empty:
            continue
        value = _value(p.annotation, p.name, cls.__name__)
        if p.kind is p.KEYWORD_ONLY:
            kwargs[p.name] = value
        else:
            args.append(value)
    if not args and not kwargs:
        args = [f"message of {cls.__name__}"]
    return cls(*args, **kwargs)


def test_the_walk_finds_the_errors_of_several_modules():
    names = {c.__qualname__ for c in every_error_class()}
    assert {"HpsearchError", "ConfigError", "TrialSetupError", "RunAborted", "RunFailed",
            "RunInterrupted", "CurrencyError", "TrialOutOfMemory"} <= names


@pytest.mark.parametrize("dumps", [pickle.dumps, cloudpickle.dumps], ids=["pickle",
                                                                          "cloudpickle"])
def test_every_error_round_trips(dumps):
    # Found when the test runs (importing every module takes seconds: not at collection).
    for cls in every_error_class():
        error = sample(cls)
        back = pickle.loads(dumps(error))
        assert type(back) is cls, cls
        assert str(back) == str(error), cls
        assert back.args == error.args, cls
        assert back.exit_code == error.exit_code, cls
        assert vars(back) == vars(error), cls


def test_a_config_error_keeps_its_field_reason_and_value():
    for error in (ConfigError("space.lr.low", "must be > 0", 0.0),
                  ConfigError("trainable", "no module named 'x'"),
                  ConfigError("", "a reason without a field", None)):
        back = pickle.loads(pickle.dumps(error))
        assert (back.field, back.reason, back.value, str(back)) == \
            (error.field, error.reason, error.value, str(error))
        assert back.exit_code == 2
    # Where in space.yaml it was found travels too (an error raised in a trial process).
    located = ConfigError("space.lr.low", "must be > 0", 0.0)
    located.where = "space.yaml:6"
    back = pickle.loads(pickle.dumps(located))
    assert back.where == "space.yaml:6" and str(back) == str(located) == \
        "space.yaml:6: space.lr.low: must be > 0 (got 0.0)"


def test_an_error_raised_and_caught_round_trips_with_its_cause_text():
    try:
        try:
            raise KeyError("inner")
        except KeyError as inner:
            raise ConfigError("search.n_trials", "must be >= 1", 0) from inner
    except ConfigError as error:
        back = pickle.loads(pickle.dumps(error))
    assert str(back) == "search.n_trials: must be >= 1 (got 0)"


def test_exit_codes_match_the_reference_and_the_cli():
    import re
    from pathlib import Path

    from hpsearch import cli, errors

    reference = (Path(__file__).resolve().parents[1] / "docs" / "reference.md").read_text()
    rows = dict(re.findall(r"^\| `(\d+)` \| (.+) \|$", reference, re.M))
    assert set(rows) == {"0", "1", "2", "75", "130", "143"}
    assert "fail_fast" in rows["1"] and "no trial of the session completed" in rows["1"]
    assert "contract" in rows["2"] and "bad input" in rows["2"]
    assert (errors.RunFailed.exit_code, errors.RunAborted.exit_code,
            errors.ConfigError.exit_code, errors.TrialSetupError.exit_code,
            errors.RunInterrupted.exit_code) == (1, 2, 2, 2, 130)
    from hpsearch.recovery.faults import DiskFull

    assert DiskFull.exit_code == 75 and "disk" in rows["75"]
    for code in ("0: success", "1: the run could not succeed", "2: bad input", "75: the disk",
                 "130", "143"):
        assert code in cli.__doc__
    assert "exit codes: 0 done" in cli.DESCRIPTION


def test_the_reference_gives_fail_fasts_default():
    import re
    from pathlib import Path

    from hpsearch.spec.config import reference_keys

    reference = (Path(__file__).resolve().parents[1] / "docs" / "reference.md").read_text()
    (row,) = re.findall(r"^\| `search\.fail_fast` \| (\w+) \| (.+) \|$", reference, re.M)
    default = dict((k, d) for k, d, _ in reference_keys())["search.fail_fast"]
    assert row[0] == default == "3"
    assert "`0` = never" in row[1] and "code 1" in row[1]
