"""Reserved keys: result metrics, trial config entries and Optuna attributes.

Every key hpsearch adds to what a trial reports, to a trial's config or to an Optuna
trial's user attributes is declared here, once, with the shared ``hps_`` prefix.
"""

from __future__ import annotations

RESERVED_PREFIX = "hps_"

# Result keys a trial reports with every epoch.
EPOCH = "hps_epoch"  #: epochs completed (1-based), the step of every curve
EPOCH_TIME_S = "hps_epoch_time_s"  #: wall seconds of the epoch just finished
TRIAL_TIME_S = "hps_trial_time_s"  #: wall seconds of this process since it started
START_EPOCH = "hps_start_epoch"  #: epochs already done when this process started (resume)

# Trial config entries the driver adds beside the sampled params.
TRIAL_NUMBER = "hps_trial_number"  #: the Optuna trial number
TRIAL_SEED = "hps_seed"  #: the seed the trial runs with

# Optuna trial user attributes.
ATTR_RAY_TRIAL_ID = "ray_trial_id"
ATTR_ERROR = "error"
ATTR_STOP_REASON = "stop_reason"
ATTR_EPOCHS = "epochs"
ATTR_SEED = "seed"
ATTR_RESUMED_FROM = "resumed_from_epochs"  #: the epochs a restarted process resumed at

# Optuna study user attributes.
ATTR_CONFIG = "config"
ATTR_HPSEARCH_VERSION = "hpsearch_version"
