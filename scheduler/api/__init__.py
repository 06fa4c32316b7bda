"""The gRPC API: server.py, codec.py (records -> messages), wire.py (what both ends share);
actions.py (operator actions) and listing.py (tasks, as-of, event pages), which the
web pages use too.

No imports here on purpose: the client imports `apollo11.scheduler.api.wire`, and a face
that loaded the server would load the engine and the store into every
application that embeds the client (tests/scheduler/client/test_imports.py).
"""
