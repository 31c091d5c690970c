"""Adapters: the only modules that touch Ray, Optuna, torch and Lightning.

Each is imported lazily by :mod:`hpsearch.driver`, so the CLI and config validation stay
fast and the pure core stays testable without them.
"""
