"""Commands that look before anything is spent: ``plan`` (memory and cost per catalogue
GPU) and ``doctor`` (this machine, the cluster, the run dir)."""
