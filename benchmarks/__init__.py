"""Benchmarks: ratios against peers measured side by side in one run."""
