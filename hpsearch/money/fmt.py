"""Money as people read it: the one formatter of the terminal, the report and plan.

Small sums keep their digits (a CPU trial costs fractions of a cent): two decimals from
10, four from 0.01, six below; exactly nothing is ``0``; an unknown sum is ``-``.
"""

from __future__ import annotations


def fmt_money(amount: float | None, currency: str | None = None) -> str:
    """``12.35 USD``, ``0.1234 USD``, ``0.000146 USD``, ``0 USD``; ``-`` when unknown.

    Args:
        amount: The sum (``None``: unknown).
        currency: Its ISO code, appended after a space; ``None`` for the bare number.
    """
    if amount is None:
        return "-"
    unit = f" {currency}" if currency else ""
    if amount == 0:
        return f"0{unit}"
    size = abs(amount)
    digits = 2 if size >= 10 else 4 if size >= 0.01 else 6
    return f"{amount:.{digits}f}{unit}"
