"""Where the archive lives: `s3://BUCKET/PREFIX`, checked before anything is sent.

A module of its own, beside the settings that read it, so that the settings do
not load the archive (scheduler/bucket/) to check a URL.

The URL names the bucket and a prefix inside it; everything else comes the way
every S3 tool takes it, so that an operator's existing setup just works: the
endpoint from AWS_ENDPOINT_URL_S3 / AWS_ENDPOINT_URL (an S3-compatible server:
SeaweedFS, MinIO, Ceph) or AWS's own, the region from AWS_REGION /
AWS_DEFAULT_REGION, the credentials from AWS_ACCESS_KEY_ID +
AWS_SECRET_ACCESS_KEY, AWS_SHARED_CREDENTIALS_FILE, ~/.aws/credentials
(AWS_PROFILE), or the machine's role. None of them is a flag: a secret on a
command line is on every user's `ps`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from apollo11.scheduler.errors import BucketConfigError

SCHEME = "s3://"
# S3's rules for a bucket name (the strict, DNS-compatible ones every server takes)
_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
_PREFIX_PART = re.compile(r"^[A-Za-z0-9._=-]+$")
EXAMPLE = "s3://my-bucket/apollo11/prod"


@dataclass(frozen=True, slots=True)
class Target:
    bucket: str
    prefix: str  # "" or "a/b": no slash at either end

    @property
    def url(self) -> str:
        return f"{SCHEME}{self.bucket}/{self.prefix}" if self.prefix else f"{SCHEME}{self.bucket}"

    def key(self, name: str) -> str:
        """The object key of `name` (catalog.json, segments/...) under the prefix."""
        return f"{self.prefix}/{name}" if self.prefix else name


def parse_url(url: str) -> Target:
    """`s3://bucket/prefix` -> Target; anything else is refused, saying what is wrong."""
    if not url.startswith(SCHEME):
        raise BucketConfigError(
            f"--archive-url must start with {SCHEME} (got {url!r}); for example {EXAMPLE}"
        )
    bucket, _, prefix = url[len(SCHEME) :].partition("/")
    if not _BUCKET.match(bucket) or ".." in bucket:
        raise BucketConfigError(
            f"--archive-url names bucket {bucket!r}, which is no valid S3 bucket name "
            f"(3-63 characters: lowercase letters, digits, dots, hyphens); for example {EXAMPLE}"
        )
    prefix = prefix.strip("/")
    for part in prefix.split("/") if prefix else ():
        if not _PREFIX_PART.match(part) or part in (".", ".."):
            raise BucketConfigError(
                f"--archive-url's prefix {prefix!r} has an empty or unusual part {part!r} "
                f"(letters, digits, . _ = - between slashes)"
            )
    return Target(bucket, prefix)
