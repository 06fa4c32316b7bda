"""`apollo11 bench`: side-by-side measurements, as ratios to baselines run alongside."""
