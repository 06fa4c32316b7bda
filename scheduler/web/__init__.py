"""The node's HTTP side: Prometheus metrics (and the operator's pages)."""

from apollo11.scheduler.web.server import HttpServer

__all__ = ["HttpServer"]
