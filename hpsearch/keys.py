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
REMAINING_S = "hps_remaining_s"  #: expected seconds to the last epoch (runtime model)
CHECKPOINT_EPOCH = "hps_checkpoint_epoch"  #: the newest epoch saved in a checkpoint
PREEMPTED = "hps_preempted"  #: set (to the reason) on the last result before a preemption
NODE_ID = "hps_node_id"  #: the Ray node the trial runs on
OOM_STEPS = "hps_oom_steps"  #: the OOM ladder's rungs taken so far
GPU_IDS = "hps_gpu_ids"  #: the GPU ids Ray assigned to the trial (shared for fractions)
GPU_UTIL = "hps_gpu_util"  #: this process's mean GPU utilisation so far, % (NVML)
GPU_SAMPLED_S = "hps_gpu_sampled_s"  #: seconds this process has sampled its GPUs
GPU_MEM_PEAK_MIB = "hps_gpu_mem_peak_mib"  #: this process's peak device memory seen, MiB
GPU_TORCH_PEAK_MIB = "hps_gpu_torch_peak_mib"  #: torch's peak reserved memory, MiB
ATTEMPT = "hps_attempt"  #: a token unique to the trial process (one per start)
HISTORY = "hps_history"  #: [[epoch, objective], ...] restored from a checkpoint (1st result)
#: [[checkpoint, reason], ...]: checkpoints set aside (corrupt, or not loadable as data)
#: before this process resumed from an older one (its first result only)
CHECKPOINTS_REJECTED = "hps_checkpoints_rejected"
# What this process's checkpoints used so far
# (hpsearch.recovery.checkpoint_usage.CheckpointUse).
CKPT_COUNT = "hps_ckpt_count"  #: checkpoints written
CKPT_BYTES = "hps_ckpt_bytes"  #: bytes written (files and manifests)
CKPT_S = "hps_ckpt_s"  #: seconds spent checkpointing (write, hash, upload, manifest)
CKPT_WRITES = "hps_ckpt_writes"  #: write-class requests (PUT, POST, COPY, LIST)
CKPT_READS = "hps_ckpt_reads"  #: read-class requests (GET, HEAD)
CKPT_STORED_BYTES = "hps_ckpt_stored_bytes"  #: bytes the trial's checkpoints hold now
CKPT_BYTE_S = "hps_ckpt_byte_s"  #: bytes held x seconds while this process ran
CKPT_EVERY = "hps_ckpt_every"  #: epochs between checkpoints now (Young/Daly, or set)

# Trial config entries the driver adds beside the sampled params.
TRIAL_NUMBER = "hps_trial_number"  #: the Optuna trial number
TRIAL_SEED = "hps_seed"  #: the seed the trial runs with
SPOT_NODE = "hps_spot_node"  #: True/False: the node kind the trial is placed on

# Optuna trial user attributes.
ATTR_RAY_TRIAL_ID = "ray_trial_id"
ATTR_ERROR = "error"
ATTR_STOP_REASON = "stop_reason"
ATTR_EPOCHS = "epochs"
ATTR_SEED = "seed"
ATTR_RESUMED_FROM = "resumed_from_epochs"  #: the epochs a restarted process resumed at
ATTR_PREDICTED_FINAL = "predicted_final"  #: a stopped trial's predicted final objective
ATTR_COST_TO_FINISH = "cost_to_finish"  #: expected money of the trial's share to its last epoch
ATTR_REMAINING_S = "remaining_s"  #: expected seconds to its last epoch (the runtime model)
ATTR_SAVED_COST = "saved_cost"  #: money a stopped trial's remaining epochs would have cost
ATTR_PREEMPTIONS = "preemptions"  #: times the trial was preempted and restarted
ATTR_FAILURES = "failures"  #: times the trial's process failed and was restarted
ATTR_PAUSED_AT = "paused_at_epochs"  #: the epochs after which the trial was paused, oldest first
ATTR_RESUMES = "resumes"  #: times the trial was picked again after a pause
ATTR_OOM_STEPS = "oom_steps"  #: the OOM ladder's rungs the trial took
ATTR_GPU_IDS = "gpu_ids"  #: the GPU ids Ray assigned to the trial's latest attempt
ATTR_GPU_UTIL = "gpu_util_mean"  #: mean GPU utilisation over the trial's attempts, %
ATTR_GPU_SAMPLED_S = "gpu_sampled_s"  #: seconds of GPU sampling behind it
ATTR_GPU_MEM_PEAK_MIB = "gpu_mem_peak_mib"  #: peak device memory in use, MiB (NVML)
ATTR_GPU_TORCH_PEAK_MIB = "gpu_torch_peak_mib"  #: peak memory torch reserved, MiB
ATTR_NODE = "node"  #: the Ray node of the trial's latest result
ATTR_NODES = "nodes"  #: every Ray node the trial ran on, in order
ATTR_LIFECYCLE = "lifecycle"  #: the trial's lifecycle state (hpsearch.core.lifecycle)
ATTR_EPOCH_TIMES = "epoch_times_s"  #: measured seconds of each epoch, oldest first
ATTR_STARTUP_S = "startup_s"  #: seconds its first process spent before epoch 1
# What a trial's checkpoints cost over all its attempts (see the CKPT_ result keys).
ATTR_CKPT_COUNT = "checkpoints"
ATTR_CKPT_BYTES = "checkpoint_bytes"
ATTR_CKPT_S = "checkpoint_s"
ATTR_CKPT_WRITES = "checkpoint_writes"
ATTR_CKPT_READS = "checkpoint_reads"
ATTR_CKPT_STORED_BYTES = "checkpoint_stored_bytes"
ATTR_CKPT_BYTE_S = "checkpoint_byte_s"
# Money of a trial (mirrored from the ledger).
ATTR_COST = "cost"
ATTR_WASTED_COST = "wasted_cost"
ATTR_BILLED_S = "billed_s"
ATTR_INSTANCE = "instance"
ATTR_SPOT = "spot"
ATTR_CURRENCY = "currency"
ATTR_SPOT_COST = "spot_cost"  #: the part of ``cost`` billed at spot prices
ATTR_SHARE = "share"  #: the fraction of its node the trial paid for (latest interval)

# Optuna trial system attributes (not shown by the dashboard).
#: What the curve sampler's model was fitted on when it proposed this trial
#: (hpsearch.model.freeze_thaw.FitState): a continued run rebuilds the same model
SYSTEM_CURVE_FIT = "hps_curve_fit"

# Optuna study user attributes.
ATTR_CONFIG = "config"
ATTR_PRICE = "price"  #: the run's Price as a dict
ATTR_SPENT = "spent"  #: money spent by the whole study so far
#: The ledger's statement: total, work kept, wasted, idle and every node's rental
#: (:meth:`hpsearch.money.statement.Statement.attrs`)
ATTR_MONEY = "money"
ATTR_HPSEARCH_VERSION = "hpsearch_version"
ATTR_LEDGER_ID = "ledger_id"  #: id of the ledger (in one run dir) that holds its money
ATTR_RUN_DIR = "run_dir"  #: the run dir of its latest session (where that ledger was)
ATTR_CHECKPOINT_STORAGE = "checkpoint_storage"  #: where its trials' checkpoints are
ATTR_STORAGE_PRICE = "storage_price"  #: the StoragePrice of that storage, as a dict
