"""`apollo11 bench`: side-by-side measurements, as ratios to baselines run alongside.

Each `<name>_bench.py` is its own program (`run`, `summary_rows`; `failed` where a
bench has a verdict), loaded only by its own command: see scheduler/tools/.
"""
