"""The gRPC API: server.py, codec.py (records -> messages; scheduler/wire.py is what both
ends share); actions.py (operator actions) and listing.py (tasks, as-of, event pages),
which the web pages use too.

No imports here on purpose: the web pages take actions.py and listing.py, the node
server.py, and a face that loaded them all would load the gRPC server into every
page's import (the client shares only scheduler/wire.py, and
tests/scheduler/client/test_imports.py checks it loads no server module).
"""
