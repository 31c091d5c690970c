"""Where a pruning decision is made (pure): the decisions a policy returns, and the
policies of hpsearch's own (none, cost-aware). Ray's ASHA and Optuna's pruners are
wrapped as the same kind of policy in :mod:`hpsearch.adapters`."""
