"""``python -m hpsearch``: see :mod:`hpsearch.cli`."""

from hpsearch.cli import console

raise SystemExit(console())
