"""Where money is counted (pure): the price catalogue, the price of a trial-hour, the
ledger (the one record of money: spent, wasted), the budget's admission control and caps,
the runtime model that estimates what is left, node kinds and GPU models."""
