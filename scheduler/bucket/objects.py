"""The object store behind the archive: a port of seven blocking calls, and S3.

What the archive needs of a bucket is small: put an object whole, get it, ask
its size (absent: None), list keys under a prefix, and say at start whether the
bucket and the credentials are good; and, for the catalog, a read that returns
the object's ETag and a put conditional on it (If-Match, or If-None-Match: * for
the first), so that its check and its write are one step at the server. Every
call blocks (boto3 does): the shipper runs them on a thread of its own, never on
the event loop.

S3 semantics this relies on: a PUT is atomic (a reader sees the old object, the
new one or none, never a part), and a GET after a PUT sees the PUT. Both hold
on AWS S3 and on the S3-compatible servers named in docs/archive.md. Conditional
PUTs (If-Match and If-None-Match on PutObject): AWS S3 since 2024, SeaweedFS (4.48,
the version the tests and the compose run) answers 412 PreconditionFailed; a
server that ignores the headers writes unconditionally, which is the
compare-then-put of before (docs/archive.md, "Trade-offs").

boto3 rather than an asyncio client (aiobotocore, aioboto3): it is AWS's own,
kept in step with S3 and its checksums, reads every credential source an
operator already uses, and the archive makes a few calls a minute, on a thread,
so an async client would buy nothing and pin a second, faster-moving release
train (aiobotocore pins exact botocore versions).
"""

from __future__ import annotations

import logging
from typing import Any, Protocol

from apollo11.scheduler.archiveurl import Target, parse_url
from apollo11.scheduler.errors import BucketConfigError, BucketConflictError, BucketError

log = logging.getLogger(__name__)

CONNECT_TIMEOUT_S = 3.0
READ_TIMEOUT_S = 30.0
# S3 error codes that mean "your setup is wrong" rather than "try again later"
_CREDENTIALS_REFUSED = {"InvalidAccessKeyId", "SignatureDoesNotMatch", "InvalidToken"}


class ObjectStore(Protocol):
    """Blocking calls; each raises BucketError when the bucket cannot be reached or
    refuses (the caller waits and tries again)."""

    @property
    def describe(self) -> str:
        """`s3://bucket/prefix at http://endpoint`, for messages."""
        ...

    def put(self, name: str, data: bytes) -> None:
        """Write the object `name` (under the prefix) whole, atomically."""
        ...

    def get(self, name: str) -> bytes | None:
        """The object's bytes; None when there is no such object."""
        ...

    def get_tagged(self, name: str) -> tuple[bytes, str] | None:
        """The object's bytes and its ETag (the server's name for this version of
        it); None when there is no such object."""
        ...

    def put_if(self, name: str, data: bytes, *, etag: str | None) -> None:
        """Write `name` only if it is still the version `etag` names (If-Match), or,
        with None, only if there is no such object (If-None-Match: *);
        BucketConflictError when another writer came between."""
        ...

    def size(self, name: str) -> int | None:
        """The object's size; None when there is no such object."""
        ...

    def list(self, under: str) -> list[str]:
        """Names (relative to the prefix) of the objects under `under`, sorted."""
        ...

    def delete(self, name: str) -> None:
        """Remove the object (a redacted segment's old bytes); none there is fine."""
        ...

    def usage(self) -> tuple[int, int]:
        """The objects under the prefix and their bytes as stored, from one listing:
        what the bucket really holds (benchmarks; the catalog says what it names)."""
        ...

    def probe(self) -> str:
        """At start: BucketConfigError when the bucket does not exist or the
        credentials are refused; BucketError when it cannot be reached (the node
        starts anyway, and uploads wait). Returns a sentence."""
        ...


class S3Objects:
    """An ObjectStore on S3 (or an S3-compatible server), through boto3."""

    def __init__(self, target: Target) -> None:
        import boto3
        import botocore.config
        import botocore.exceptions

        self.target = target
        self._errors = botocore.exceptions
        session = boto3.Session()
        try:
            creds = session.get_credentials()
        except botocore.exceptions.PartialCredentialsError as e:
            raise BucketConfigError(
                f"incomplete S3 credentials for {target.url}: {e} (set both "
                f"AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or a credentials file)"
            ) from e
        except botocore.exceptions.BotoCoreError as e:
            raise BucketConfigError(f"cannot read S3 credentials for {target.url}: {e}") from e
        if creds is None:
            raise BucketConfigError(
                f"no S3 credentials for {target.url}: set AWS_ACCESS_KEY_ID and "
                f"AWS_SECRET_ACCESS_KEY, or AWS_SHARED_CREDENTIALS_FILE (or ~/.aws/credentials, "
                f"AWS_PROFILE); the endpoint comes from AWS_ENDPOINT_URL for an S3-compatible "
                f"server"
            )
        config = botocore.config.Config(
            connect_timeout=CONNECT_TIMEOUT_S,
            read_timeout=READ_TIMEOUT_S,
            # one retry inside boto3; the shipper's own backoff does the rest
            retries={"max_attempts": 2, "mode": "standard"},
            # path-style works on every S3-compatible server; AWS still accepts it
            s3={"addressing_style": "path"},
        )
        self._client: Any = session.client(
            "s3", region_name=session.region_name or "us-east-1", config=config
        )

    @property
    def describe(self) -> str:
        return f"{self.target.url} at {self._client.meta.endpoint_url}"

    def _fail(self, what: str, e: Exception) -> BucketError:
        code = _code(e)
        if code in _CREDENTIALS_REFUSED:
            return BucketConfigError(
                f"{what} on {self.describe}: the credentials were refused ({code}); check "
                f"AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY or the credentials file"
            )
        return BucketError(f"{what} on {self.describe}: {code or type(e).__name__}: {e}")

    def put(self, name: str, data: bytes) -> None:
        try:
            self._client.put_object(Bucket=self.target.bucket, Key=self.target.key(name), Body=data)
        except (self._errors.BotoCoreError, self._errors.ClientError) as e:
            raise self._fail(f"uploading {name}", e) from e

    def delete(self, name: str) -> None:
        try:
            self._client.delete_object(Bucket=self.target.bucket, Key=self.target.key(name))
        except (self._errors.BotoCoreError, self._errors.ClientError) as e:
            if _code(e) in ("NoSuchKey", "404"):
                return
            raise self._fail(f"deleting {name}", e) from e

    def get(self, name: str) -> bytes | None:
        tagged = self.get_tagged(name)
        return None if tagged is None else tagged[0]

    def get_tagged(self, name: str) -> tuple[bytes, str] | None:
        try:
            r = self._client.get_object(Bucket=self.target.bucket, Key=self.target.key(name))
            data: bytes = r["Body"].read()
            return data, str(r.get("ETag", ""))
        except (self._errors.BotoCoreError, self._errors.ClientError) as e:
            if _code(e) in ("NoSuchKey", "404"):
                return None
            raise self._fail(f"reading {name}", e) from e

    def put_if(self, name: str, data: bytes, *, etag: str | None) -> None:
        condition = {"IfNoneMatch": "*"} if etag is None else {"IfMatch": etag}
        try:
            self._client.put_object(
                Bucket=self.target.bucket, Key=self.target.key(name), Body=data, **condition
            )
        except (self._errors.BotoCoreError, self._errors.ClientError) as e:
            # 412, or 409 when AWS saw two conditional writes of the key at once
            if _code(e) in ("PreconditionFailed", "412", "ConditionalRequestConflict", "409"):
                raise BucketConflictError(
                    f"uploading {name} on {self.describe}: it changed since it was read "
                    f"({_code(e)})"
                ) from e
            raise self._fail(f"uploading {name}", e) from e

    def size(self, name: str) -> int | None:
        try:
            r = self._client.head_object(Bucket=self.target.bucket, Key=self.target.key(name))
            return int(r["ContentLength"])
        except (self._errors.BotoCoreError, self._errors.ClientError) as e:
            if _code(e) in ("NoSuchKey", "404", "NotFound"):
                return None
            raise self._fail(f"looking up {name}", e) from e

    def list(self, under: str) -> list[str]:
        prefix = self.target.key(under)
        cut = len(self.target.key(""))
        names: list[str] = []
        try:
            pages = self._client.get_paginator("list_objects_v2").paginate(
                Bucket=self.target.bucket, Prefix=prefix
            )
            for page in pages:
                names.extend(o["Key"][cut:] for o in page.get("Contents", ()))
        except (self._errors.BotoCoreError, self._errors.ClientError) as e:
            raise self._fail(f"listing {under}", e) from e
        return sorted(names)

    def usage(self) -> tuple[int, int]:
        count = total = 0
        try:
            pages = self._client.get_paginator("list_objects_v2").paginate(
                Bucket=self.target.bucket, Prefix=self.target.key("")
            )
            for page in pages:
                for o in page.get("Contents", ()):
                    count += 1
                    total += int(o["Size"])
        except (self._errors.BotoCoreError, self._errors.ClientError) as e:
            raise self._fail("listing the prefix", e) from e
        return count, total

    def probe(self) -> str:
        try:
            self._client.head_bucket(Bucket=self.target.bucket)
        except self._errors.ClientError as e:
            code = _code(e)
            if code in ("404", "NoSuchBucket", "NotFound"):
                raise BucketConfigError(
                    f"bucket {self.target.bucket!r} does not exist at "
                    f"{self._client.meta.endpoint_url}: create it, or fix --archive-url "
                    f"(or AWS_ENDPOINT_URL)"
                ) from e
            if code in ("403", "AccessDenied", *_CREDENTIALS_REFUSED):
                raise BucketConfigError(
                    f"{self.describe}: the credentials were refused ({code}); check "
                    f"AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY or the credentials file"
                ) from e
            raise self._fail("checking the bucket", e) from e
        except self._errors.BotoCoreError as e:
            raise self._fail("checking the bucket", e) from e
        return f"archive: {self.describe} reachable"


def open_bucket(url: str) -> S3Objects:
    """The bucket `url` names, with the endpoint and credentials of the environment;
    BucketConfigError (naming what is missing) when the URL or the credentials are."""
    return S3Objects(parse_url(url))


def _code(e: Exception) -> str:
    response = getattr(e, "response", None)
    if isinstance(response, dict):
        return str(response.get("Error", {}).get("Code", ""))
    return ""


class MemoryObjects:
    """An ObjectStore in a dict: for the fast tests of the shipper's decisions and
    of restore's checks. The archive's real tests run on SeaweedFS."""

    def __init__(self) -> None:
        self.objects: dict[str, bytes] = {}
        self.down = False  # True: every call fails as an unreachable bucket would
        self.puts = 0
        self.put_names: list[str] = []  # every put, in order

    @property
    def describe(self) -> str:
        return "memory://"

    def _check(self) -> None:
        if self.down:
            raise BucketError("memory://: unreachable (down)")

    def put(self, name: str, data: bytes) -> None:
        self._check()
        self.puts += 1
        self.put_names.append(name)
        self.objects[name] = bytes(data)

    def get(self, name: str) -> bytes | None:
        self._check()
        return self.objects.get(name)

    def delete(self, name: str) -> None:
        self._check()
        self.objects.pop(name, None)

    def get_tagged(self, name: str) -> tuple[bytes, str] | None:
        self._check()
        data = self.objects.get(name)
        return None if data is None else (data, _etag(data))

    def put_if(self, name: str, data: bytes, *, etag: str | None) -> None:
        self._check()
        now = self.objects.get(name)
        if (now is None) != (etag is None) or (now is not None and _etag(now) != etag):
            raise BucketConflictError(f"memory://{name}: it changed since it was read")
        self.put(name, data)

    def size(self, name: str) -> int | None:
        self._check()
        data = self.objects.get(name)
        return None if data is None else len(data)

    def list(self, under: str) -> list[str]:
        self._check()
        return sorted(k for k in self.objects if k.startswith(under))

    def usage(self) -> tuple[int, int]:
        self._check()
        return len(self.objects), sum(len(v) for v in self.objects.values())

    def probe(self) -> str:
        self._check()
        return "archive: memory:// reachable"


def _etag(data: bytes) -> str:
    """As S3 names a single-part object's version: the MD5 of its bytes, quoted."""
    import hashlib

    return '"' + hashlib.md5(data, usedforsecurity=False).hexdigest() + '"'
