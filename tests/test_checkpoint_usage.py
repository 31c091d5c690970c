"""hpsearch.recovery.checkpoint_usage: the record of what checkpoints used (pure)."""

from __future__ import annotations

from hpsearch import keys
from hpsearch.recovery import checkpoint_usage as cu


def test_attempts_add_up_and_the_latest_holds_the_bytes():
    first = cu.CheckpointUse(3, 3000, 1.5, 10, 2, 2000, 100.0)
    second = cu.CheckpointUse(2, 2000, 1.0, 7, 3, 1500, 50.0)
    both = cu.combine([first, second])
    assert both == cu.CheckpointUse(5, 5000, 2.5, 17, 5, 1500, 150.0)
    assert cu.from_attrs(cu.to_attrs(both)) == both
    result = cu.to_result(first)
    assert set(result) == {keys.CKPT_COUNT, keys.CKPT_BYTES, keys.CKPT_S, keys.CKPT_WRITES,
                           keys.CKPT_READS, keys.CKPT_STORED_BYTES, keys.CKPT_BYTE_S}
    assert cu.from_result(result) == first
    assert cu.from_result({}) is None and cu.combine([]) == cu.CheckpointUse()
