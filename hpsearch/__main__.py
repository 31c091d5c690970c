"""``python -m hpsearch``: see :mod:`hpsearch.cli`."""

from hpsearch.cli import main

raise SystemExit(main())
