"""What a search is (pure): ``space.yaml`` validated into a Config, the search space and
its only conversion to Optuna, and the trainable's import path."""
