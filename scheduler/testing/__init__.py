"""Synthetic histories for tests and benchmarks (nothing a node runs imports this)."""
