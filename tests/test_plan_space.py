"""plan.representative_params on spaces with constants and conditional params (pure)."""

from __future__ import annotations

from hpsearch.tools.plan_point import representative_params
from hpsearch.spec.space_parse import parse_space

SPACE = parse_space({
    "momentum": {"type": "float", "low": 0.5, "high": 0.9, "condition": {"optimizer": "sgd"}},
    "optimizer": {"type": "categorical", "choices": ["sgd", "adam"]},
    "beta": {"type": "float", "low": 0.8, "high": 0.99, "condition": {"optimizer": "adam"}},
    "hidden": {"type": "int", "low": 16, "high": 256, "log": True},
    "channels": 16,
})


def test_constants_keep_their_value_and_conditions_follow_the_picked_parents():
    mid = representative_params(SPACE, "mid")
    assert mid == {"optimizer": "sgd", "momentum": 0.7, "hidden": 64, "channels": 16}
    assert SPACE.contains(mid)
    high = representative_params(SPACE, "high")
    assert high == {"optimizer": "sgd", "momentum": 0.9, "hidden": 256, "channels": 16}
    assert SPACE.contains(high)


def test_a_param_whose_parent_picks_another_value_is_left_out():
    space = parse_space({"optimizer": {"type": "categorical", "choices": ["adam", "sgd"]},
                         "momentum": {"type": "float", "low": 0.5, "high": 0.9,
                                      "condition": {"optimizer": "sgd"}}})
    params = representative_params(space)
    assert params == {"optimizer": "adam"}
    assert space.contains(params)
