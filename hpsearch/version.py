"""hpsearch's version (a leaf: anything may import it without importing the package)."""

__version__ = "0.1.0"
