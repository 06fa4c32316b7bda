"""`apollo11 bench`: side-by-side measurements (ratios against baselines run in the same process)."""
