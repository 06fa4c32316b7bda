"""The node's HTTP side: Prometheus metrics (and the operator's pages)."""

from scheduler.web.server import HttpServer

__all__ = ["HttpServer"]
