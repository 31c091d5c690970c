"""What the curves say: one model of a configuration's metric over its hyperparameters
and its epochs (freeze-thaw), fitted on every partial curve of the study and of earlier
studies of the same space, and the choices it answers: which new configuration to start
(and the forecasts of partial curves it rates them against), and which paused trial to
resume instead, on the same scale.

Pure package (numpy; scikit-learn's trees, imported when a model is fitted). The Optuna
sampler (:mod:`hpsearch.adapters.optuna.curve_sampler`) and the benchmark's simulated
study drive the same :class:`~hpsearch.model.planner.Planner`.
"""
