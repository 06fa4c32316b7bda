"""The node's HTTP side: Prometheus metrics and the operator's pages, served by
`HttpServer`, which only the node builds. The pages see their node as
scheduler/nodeview/ says (what they share with the gRPC API), and load nothing of
the gRPC server."""

from apollo11.scheduler.web.server import HttpServer

__all__ = ["HttpServer"]
