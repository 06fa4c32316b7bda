"""The cluster's credentials, made and kept offline: `certs` (a CA and each node's
certificate) and `token create|list|revoke` (the tokens file a node re-reads on
SIGHUP)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from apollo11.scheduler.cli._exitcodes import ExitCode
from apollo11.scheduler.cli._shared import err, fail


def certs(
    directory: Annotated[Path, typer.Option("--dir", help="Where the CA and certificates go.")],
    names: Annotated[
        str, typer.Option("--nodes", help="Node ids (and etcd members), comma-separated.")
    ],
    san: Annotated[
        list[str] | None, typer.Option("--san", help="Another name or IP for every cert.")
    ] = None,
    days: Annotated[int, typer.Option("--days", help="Validity.")] = 825,
) -> None:
    """Create the cluster CA (once) and a certificate for each node that has none."""
    from apollo11.scheduler.security import create_cluster_certs

    wanted = [n.strip() for n in names.split(",") if n.strip()]
    written = create_cluster_certs(directory, wanted, sans=san or [], days=days)
    for path in written:
        err.print(f"wrote {path}")
    if not written:
        err.print(f"{directory}: every certificate asked for exists already")


TokensFile = Annotated[
    Path,
    typer.Option("--tokens-file", envvar="APOLLO11_TOKENS_FILE", help="The node's tokens file."),
]


def token_create(
    name: Annotated[str, typer.Option("--name", help="Who the token is for.")],
    role: Annotated[str, typer.Option("--role", help="reader, submitter or operator.")],
    tokens_file: TokensFile,
) -> None:
    """Make a token: print it once, append its hash (send SIGHUP to running nodes)."""
    from apollo11.scheduler.security import Role, create_token

    try:
        made = create_token(tokens_file, name, Role.parse(role))
    except ValueError as e:
        raise fail(str(e), 2) from e
    print(made)
    err.print(
        f"token for {name} ({role}) added to {tokens_file}; it is shown only now. "
        f"Running nodes take it after SIGHUP."
    )


def token_list(tokens_file: TokensFile) -> None:
    """Who has which role (hashes are not shown)."""
    from apollo11.scheduler.security import list_tokens

    try:
        entries = list_tokens(tokens_file)
    except (OSError, ValueError) as e:
        raise fail(str(e), 2) from e
    for entry in entries:
        kind = "certificate" if entry.secret == "cert" else "token"
        print(f"{entry.name}\t{entry.role.value}\t{kind}")


def token_revoke(
    name: Annotated[str, typer.Option("--name", help="Whose entries to remove.")],
    tokens_file: TokensFile,
) -> None:
    """Remove every entry of NAME (running nodes refuse its tokens after SIGHUP)."""
    from apollo11.scheduler.security import revoke_token

    try:
        n = revoke_token(tokens_file, name)
    except OSError as e:
        raise fail(f"{tokens_file}: {e.strerror}", 2) from e
    if not n:
        raise fail(f"no entry for {name!r} in {tokens_file}", ExitCode.NOT_FOUND)
    err.print(f"removed {n} entr{'y' if n == 1 else 'ies'} of {name}; send SIGHUP to the nodes")
