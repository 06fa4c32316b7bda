"""The `apollo11` command line: `app` (typer; tests drive it with CliRunner) and
`main` (the console script, and `python -m apollo11.scheduler.cli`).

Every command's module is loaded by `apollo11 --help`: they import nothing heavy at
the top (the client, the node, rich and asyncio inside the commands), and the node's
flags are made from its settings model only when `node` is parsed or helped.

_app.py          the app: its options, every command and group in order, main
_shared.py       the connection's options, tables, JSON, one-line errors, a client call
_node.py         node: settings, then the node until it stops
_nodeflags.py    node's flags, made from NodeSettings (scheduler/config.py)
_grpcenv.py      gRPC core's environment, set before grpc is imported
_worker.py       worker
_submit.py       submit, submit-many, event send
_schedules.py    schedule create|list|describe|update|pause|unpause|trigger|delete|next
_limits.py       limits show|set|reset (flow control at runtime)
_tasks.py        tasks, task, events; retry, skip, cancel
_show.py         how a task and its events are printed
_cluster.py      health, status, switchover, history, workflows, workers
_replay.py       replay, replay-check (a data directory, offline)
_credentials.py  certs, token create|list|revoke
_roster.py       roster list|remove, config show|set (what etcd keeps)
_tools.py        dev, bench ... (in front of scheduler/tools)
"""

from apollo11.scheduler.cli._app import app, main

__all__ = ["app", "main"]
