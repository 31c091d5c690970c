"""The doctor's checks of a ``space.yaml``: whether it loads, and what a trial-hour of
it costs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from hpsearch.tools.doctor_checks import FAIL, OK, Check


def load_space(space: str | Path, overrides: Sequence[str],
               checks: list[Check]) -> tuple[Any, Any]:
    """``(config, catalog)`` of ``space`` (None for what does not load), its check
    appended to ``checks``; the pricing check reports a catalogue that does not load."""
    from hpsearch.errors import ConfigError
    from hpsearch.money import catalog as catalog_mod
    from hpsearch.spec import config as config_mod

    try:
        config = config_mod.load(space, list(overrides))
    except ConfigError as exc:
        checks.append(Check("space.yaml", FAIL, str(exc),
                            "fix the file; `python -m hpsearch validate SPACE.yaml` "
                            "checks it alone"))
        return None, None
    checks.append(Check("space.yaml", OK, f"{space}: {config.name}, "
                                          f"{len(config.space)} parameter(s)"))
    try:
        return config, catalog_mod.load(config.pricing.catalog)
    except ConfigError:
        return config, None


def pricing_check(config: Any) -> Check:
    """What a trial-hour costs at the config's pricing, or why it cannot be priced."""
    from hpsearch.adapters import nvml
    from hpsearch.money import pricing
    from hpsearch.money.fmt import fmt_money
    from hpsearch.errors import ConfigError

    try:
        price = pricing.resolve(config, gpu=nvml.for_pricing(config))
    except ConfigError as exc:
        return Check("pricing", FAIL, str(exc),
                     "`python -m hpsearch catalog` lists the catalogue's rows; or set "
                     "pricing.price_per_hour with pricing.currency")
    text = (f"a trial-hour costs {fmt_money(price.per_hour, price.currency)} on "
            f"{price.instance}{' (spot)' if price.spot else ''}")
    if price.note:
        text += f"; {price.note}"
    return Check("pricing", OK, text)
