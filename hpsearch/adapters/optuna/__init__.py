"""Optuna: the study of record, reading a study back for the report, optuna-dashboard,
and Optuna's pruners as core policies."""
