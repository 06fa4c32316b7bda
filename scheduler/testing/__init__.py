"""Synthetic histories for tests and benchmarks (nothing a node runs imports this):
`etl_history`, the drafts of many five-step pipelines, interleaved, some failing,
compensated, cancelled or overridden by an operator."""

from apollo11.scheduler.testing.history import etl_history

__all__ = ["etl_history"]
