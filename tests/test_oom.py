"""The OOM ladder's rungs (pure)."""

from __future__ import annotations

import pytest

from hpsearch.recovery.oom import OomLadder
from hpsearch.spec.sections import DEFAULT_OOM_LADDER


def test_the_default_ladder_halves_twice_then_mixed_precision_then_checkpointing():
    ladder = OomLadder(DEFAULT_OOM_LADDER, min_batch_size=8)
    assert ladder.climb(128, True) == "halve_batch: batch size 128 -> 64"
    assert ladder.params({"batch_size": 128, "lr": 0.1}) == {"batch_size": 64, "lr": 0.1}
    assert ladder.climb(64, True) == "halve_batch: batch size 64 -> 32"
    assert ladder.climb(32, True) == "mixed_precision: 16-bit mixed precision"
    assert ladder.precision == "mixed"
    assert ladder.climb(32, True) == "grad_checkpointing: on"
    assert ladder.grad_checkpointing
    assert ladder.climb(32, True) is None
    assert len(ladder.taken) == 4


def test_rungs_that_cannot_apply_are_skipped_and_said():
    ladder = OomLadder(DEFAULT_OOM_LADDER, min_batch_size=16)
    assert ladder.climb(24, False) == "mixed_precision: 16-bit mixed precision"
    assert ladder.climb(24, False) is None
    assert ladder.taken == [
        "halve_batch: skipped (24 // 2 < min_batch_size 16)",
        "halve_batch: skipped (24 // 2 < min_batch_size 16)",
        "mixed_precision: 16-bit mixed precision",
        "grad_checkpointing: skipped (the model does not support it)",
    ]


def test_an_unknown_batch_size_cannot_be_halved():
    ladder = OomLadder(("halve_batch",))
    assert ladder.climb(None, True) is None
    assert ladder.taken == ["halve_batch: skipped (batch size unknown)"]
    assert ladder.params({"lr": 1}) == {"lr": 1}


def test_an_empty_ladder_gives_up_at_once():
    assert OomLadder(()).climb(64, True) is None


def test_unknown_rungs_are_refused():
    with pytest.raises(ValueError, match="unknown OOM step"):
        OomLadder(("shrink_model",)).climb(64, True)


def test_the_config_refuses_unknown_rungs_naming_the_field():
    from hpsearch.spec import config
    from hpsearch.spec import raw_yaml
    from hpsearch.errors import ConfigError

    raw = raw_yaml.read_yaml("search_spaces/digits_mlp.yaml")
    with pytest.raises(ConfigError) as info:
        config.load(raw, {"oom.ladder": ["halve_batch", "shrink_model"]})
    assert info.value.field == "oom.ladder[1]" and "shrink_model" in str(info.value)
    assert config.load(raw).oom.ladder == DEFAULT_OOM_LADDER
