"""The archive from the command line (docs/archive.md): `restore` builds a node's data
directory from the bucket; `archive verify` reads every object back and checks it.
Both read the bucket directly, no node needed: the endpoint and credentials come
from the AWS_* variables or files, as the node's do."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from apollo11.scheduler.cli._shared import fail, out
from apollo11.scheduler.errors import ApolloError, BucketConfigError

ArchiveUrl = Annotated[
    str,
    typer.Option(
        "--archive-url",
        envvar="APOLLO11_ARCHIVE_URL",
        help="s3://BUCKET/PREFIX, as the nodes' --archive-url.",
    ),
]


def restore(
    archive_url: ArchiveUrl,
    data_dir: Annotated[
        Path, typer.Option("--data-dir", help="The data directory to build (absent or empty).")
    ],
    all_segments: Annotated[
        bool,
        typer.Option(
            "--all-segments", help="Every segment in the bucket, not only those after the snapshot."
        ),
    ] = False,
) -> None:
    """Build a node's data directory from the archive: the newest snapshot and the
    segments after it, each checked. Start the node on it: it follows its primary,
    or leads a new cluster when the whole cluster was lost."""
    from apollo11.scheduler.bucket import build_data_dir as build
    from apollo11.scheduler.bucket import open_bucket

    try:
        said = build(open_bucket(archive_url), data_dir, all_segments=all_segments, say=out.print)
    except BucketConfigError as e:
        raise fail(str(e), 2) from e
    except ApolloError as e:
        raise fail(str(e)) from e
    out.print(said)


def verify(
    archive_url: ArchiveUrl,
    repair_from: Annotated[
        Path | None,
        typer.Option(
            "--repair-from",
            help="A node's data directory: put back each corrupt object it holds the bytes of.",
        ),
    ] = None,
) -> None:
    """Read back every object the archive's catalog names and check it (checksums, every
    record's CRC, the chain); exit 1 naming each one that is wrong (and not repaired)."""
    from apollo11.scheduler.bucket import open_bucket, repair
    from apollo11.scheduler.bucket import verify_archive as check

    try:
        objects = open_bucket(archive_url)
        report = check(objects)
        if not report.ok and repair_from is not None:
            for line in repair(objects, report, repair_from):
                out.print(line)
            report = check(objects)
    except BucketConfigError as e:
        raise fail(str(e), 2) from e
    except ApolloError as e:
        raise fail(str(e)) from e
    if not report.ok:
        raise fail(str(report))
    out.print(str(report))
