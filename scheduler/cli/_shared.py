"""What the commands share: the connection's options and credentials, the output
(tables, JSON, one-line errors) and running a client call.

Imports nothing heavy: every command, `--help` included, loads this module; the
client, rich and asyncio are imported inside the helpers that need them.
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path
from typing import Annotated, Any

import orjson
import typer

from apollo11.scheduler.cli._exitcodes import ExitCode, code_for
from apollo11.scheduler.cli._output import Output, escape
from apollo11.scheduler.errors import ApolloError

out = Output()
err = Output(stderr=True)

# How client commands reach the nodes: the app's own options, before the command
# (filled by the app's callback, read by `client` and by `worker` and `health`).
connection: dict[str, Any] = {}

# The connection's credentials: before any client command (the app's callback), and
# on `worker`, whose process holds its own connection.
CaOption = Annotated[
    Path | None,
    typer.Option("--ca", envvar="APOLLO11_CA", help="CA that signed the nodes' certificates."),
]
CertOption = Annotated[
    Path | None,
    typer.Option("--cert", envvar="APOLLO11_CERT", help="Client certificate (PEM)."),
]
KeyOption = Annotated[
    Path | None, typer.Option("--key", envvar="APOLLO11_KEY", help="Its key (PEM).")
]
TokenFileOption = Annotated[
    Path | None,
    typer.Option("--token-file", envvar="APOLLO11_TOKEN_FILE", help="File holding the token."),
]
Server = Annotated[
    str | None,
    typer.Option(
        "--server",
        envvar="APOLLO11_SERVER",
        help="HOST:PORT[,HOST:PORT...] of any nodes (default 127.0.0.1:7411).",
    ),
]
AsJson = Annotated[bool, typer.Option("--json", help="Print JSON for scripts.")]


class Grid:
    """A table: drawn with rich on a terminal; in a pipe, plain columns two spaces
    apart with nothing cut (full task ids and addresses for grep, awk and cut)."""

    def __init__(self, *headers: str, title: str | None = None) -> None:
        self.headers = headers
        self.title = title
        self.rows: list[tuple[str, ...]] = []

    def add_row(self, *cells: str) -> None:
        self.rows.append(cells)

    def show(self) -> None:
        if out.is_terminal:
            from rich.table import Table
            from rich.text import Text

            table = Table(*self.headers, title=self.title)
            for row in self.rows:
                # Text, not markup: cells hold names and errors from submitted input
                table.add_row(*(Text(c) for c in row))
            out.print(table)
            return
        rows = [self.headers, *self.rows]
        widths = [max(len(r[i]) for r in rows) for i in range(len(self.headers))]
        for r in rows:
            line = "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True))
            sys.stdout.write(line.rstrip() + "\n")
        sys.stdout.flush()


def print_json(value: Any) -> None:
    sys.stdout.write(orjson.dumps(value, option=orjson.OPT_INDENT_2).decode() + "\n")


def fail(message: str, code: int = ExitCode.FAILED) -> typer.Exit:
    # escaped: a path or a reason may hold "[...]", which rich would read as markup
    err.print(f"[red]error:[/red] {escape(message)}")
    return typer.Exit(code)


def read_token(token_file: Path) -> str:
    try:
        return token_file.read_text().strip()
    except OSError as e:
        raise fail(f"--token-file {token_file}: {e.strerror}", 2) from e


def client(server: str | None) -> Any:
    from apollo11.scheduler.client import Client

    return Client(server, **connection)


def run(coro: Any) -> Any:
    """A client call to its end; the project's errors end the command in one line,
    with the exit code of what went wrong (cli/_exitcodes.py)."""
    import asyncio

    try:
        return asyncio.run(coro)
    except ApolloError as e:
        raise fail(str(e), code_for(e)) from e


def read_json(value: str | None, flag: str = "--input") -> Any:
    """A JSON option: the text itself, or @file holding it."""
    if value is None:
        return None
    text = value
    if value.startswith("@"):
        path = Path(value[1:])
        try:
            text = path.read_text()
        except OSError as e:
            raise fail(f"{flag} {value}: {e.strerror}", 2) from e
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError as e:
        raise fail(f"{flag} is not valid JSON: {e}", 2) from e


def clock(ms: int | None) -> str:
    """An event's time of day, to the millisecond ("" for none)."""
    if not ms:
        return ""
    import datetime

    return datetime.datetime.fromtimestamp(ms / 1000).strftime("%H:%M:%S.%f")[:-3]


def tracing(endpoint: str, service: str) -> None:
    """Traces to an OTLP collector, when one is named (here or by the standard variable)."""
    endpoint = endpoint or os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT", "")
    if not endpoint:
        return
    from apollo11.scheduler import tracing as traces

    try:
        logging.getLogger("apollo11").info("%s", traces.configure(endpoint, service=service))
    except RuntimeError as e:
        raise fail(str(e), 2) from e
