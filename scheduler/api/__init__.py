"""The gRPC API inside the node: `ApiServer` (server.py: the Scheduler and Cluster
services, health, reflection), which only the node builds.

codec.py turns records into messages (scheduler/wire.py is what the server and the
client share); schedules.py does the schedule RPCs' work, flowlimits.py the limits'
(and reads a submission's priority); decode.py refuses bytes that are not the
request message; limits.py bounds what one peer may cost; connshed.py sheds new
connections in the kernel while gRPC core's handshakes take too much CPU. What the
API shares with the web pages (the node as both see it, the reads, the operator
actions) is scheduler/nodeview/, so that the pages load nothing of this package.
"""

from apollo11.scheduler.api.connshed import ConnectionShedder
from apollo11.scheduler.api.server import ApiServer

__all__ = ["ApiServer", "ConnectionShedder"]
