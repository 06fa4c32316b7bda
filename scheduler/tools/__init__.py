"""What the apollo11 command offers besides a node, one program a module: `dev.run`
(etcd and three nodes on this machine), `bench/` (each `<name>_bench.py` has
`run(quick, workdir, progress)` and `summary_rows(result)`), and the doc generators
`apidoc.py` and `roledoc.py` (`make docs`). Nothing a node runs imports this.

No imports here on purpose: each program is loaded alone (a worker of `bench
workers` imports bench/workers_flows.py, `apollo11 dev` loads no bench), so the
CLI's cli/_tools.py, the one module outside that may, imports each as its command
runs (pyproject.toml's contract).
"""
