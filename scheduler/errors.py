"""One small error tree for the whole project.

Every error a user can meet says what was wrong and what to do about it.
The gRPC layer maps these to status codes; nothing else needs to know them.
"""

from __future__ import annotations


class ApolloError(Exception):
    """Root of every error Apollo-11 raises on purpose."""


class InvalidEventError(ApolloError, ValueError):
    """An event cannot be written as given (bad payload, oversize field, unknown type)."""


class PayloadTooLargeError(InvalidEventError):
    """A payload is over the configured cap. Never truncated silently."""


class PayloadTooDeepError(InvalidEventError):
    """A payload carries a value nested past json_max_depth (scheduler/jsondepth.py)."""


class LogError(ApolloError):
    """The event log cannot do what was asked."""


class FormatVersionError(LogError):
    """The data directory was written by an unknown on-disk format version."""


class CorruptLogError(LogError):
    """A record failed its checksum or framing where skipping it is not safe.

    Skipping could drop a SUCCEEDED event and re-run a step that must not run
    twice, so the range is refused instead; a peer can supply a good copy.
    """

    def __init__(self, message: str, *, path: str, offset: int) -> None:
        super().__init__(f"{message} (file {path}, offset {offset})")
        self.reason = message
        self.path = path
        self.offset = offset


class LogTruncatedError(CorruptLogError):
    """The log ends before the end its manifest recorded as durable.

    Those events were acknowledged (or may have been): starting without them
    would run finished steps again. `path` names the missing or short file,
    `offset` where its data now ends; `expected_id` and `found_id` the last
    event the manifest names and the last one the log still holds.
    """

    def __init__(
        self, message: str, *, path: str, offset: int, expected_id: int, found_id: int
    ) -> None:
        super().__init__(message, path=path, offset=offset)
        self.expected_id = expected_id
        self.found_id = found_id


class LogFailedError(LogError):
    """A write or fsync failed; the log refuses further appends until reopened.

    After a failed fsync the page cache can no longer be trusted (the
    PostgreSQL "fsyncgate" lesson), so retrying the write would be a lie.
    """


class SnapshotMismatchError(LogError):
    """A snapshot's watermark is not where the log can continue from."""


class LogClosedError(LogError):
    """The log was closed."""


class StaleTermError(ApolloError):
    """Something carries a term lower than one already seen: a deposed writer."""


class SnapshotError(ApolloError):
    """A snapshot is missing, unreadable or fails its checksum."""


class ArchiveLostError(SnapshotError):
    """A damaged archive chunk the log cannot rebuild (its events are no longer kept,
    or are damaged too); the message names the chunk and what to do."""


class HistoryGoneError(SnapshotError):
    """Events a data directory no longer keeps (log retention) and no snapshot it
    keeps covers: read them from the archive's bucket (--archive-url), if any."""

    def __init__(self, message: str, *, first: int) -> None:
        super().__init__(message)
        self.first = first  # the first event the directory still holds


class NotFoundError(ApolloError, LookupError):
    """An unknown workflow, task or step (gRPC NOT_FOUND)."""


class InvalidArgumentError(ApolloError, ValueError):
    """A request field is missing or malformed; the message names it (INVALID_ARGUMENT)."""


class FlowKeyError(InvalidArgumentError):
    """A submission's input gives no usable value for the key of a flow-control
    declaration (a limit, a rate, a debounce, the fairness): the message names the
    path, the limit and what was wrong (INVALID_ARGUMENT)."""


class AlreadyExistsError(ApolloError):
    """The name is taken by something else: an idempotency key reused for another
    submission (gRPC ALREADY_EXISTS; Stripe answers 422, Temporal raises
    WorkflowAlreadyStartedError). The message names the key and the task."""


class FailedPreconditionError(ApolloError):
    """The request is well formed but the state does not allow it now (FAILED_PRECONDITION)."""


class NotLeaderError(FailedPreconditionError):
    """A write went to a node that is not the primary; `leader` says where to go."""

    def __init__(self, message: str, *, leader: str | None = None) -> None:
        super().__init__(message)
        self.leader = leader


class ResourceExhaustedError(ApolloError):
    """A per-node limit is reached (open WatchTask streams, say); the message names the
    limit and the setting that raises it. Retry later, or poll (RESOURCE_EXHAUSTED).
    `retry_after_ms`, when set, travels as gRPC's `grpc-retry-pushback-ms` hint."""

    def __init__(self, message: str, *, retry_after_ms: int = 0) -> None:
        super().__init__(message)
        self.retry_after_ms = retry_after_ms


class NodeUnavailableError(ApolloError):
    """This node cannot serve the request right now (its store is being reopened, or
    it is stopping): retry, here shortly or on another node (UNAVAILABLE)."""


class NoLeaderError(ApolloError):
    """No primary is known right now (an election is under way): retry shortly (UNAVAILABLE)."""


class OutcomeUnknownError(ApolloError):
    """A write is durable on this node but could not be confirmed as committed
    (not enough standbys acknowledged in time, or the lease is in doubt).

    Reported as unknown, never as failed: it may well survive. Retry with the
    same idempotency key, or ask the primary. gRPC UNAVAILABLE.
    """


class LeaseLostError(OutcomeUnknownError):
    """The node is no longer sure it holds the lease: it must stop acting as primary."""


class WorkflowDefinitionError(ApolloError, ValueError):
    """A workflow cannot be registered as written; the message names the workflow and step."""


class ReplayError(ApolloError):
    """An event cannot be applied at all (for example an unknown event type)."""


class StalledError(FailedPreconditionError):
    """The testing kit (apollo11.testing): a task awaited can never finish as things
    stand: it waits for something no timer brings (an event nobody sent), and every
    other task waits too. The message says what it waits for and what to do."""


class BucketError(ApolloError):
    """The archive's bucket (scheduler/bucket/) cannot do what was asked: unreachable,
    refused, or misconfigured. Uploads wait and retry; a command says what to fix."""


class BucketConfigError(BucketError, ValueError):
    """--archive-url, the endpoint or the credentials are wrong or missing: refused at
    start, naming what is missing."""


class BucketConflictError(BucketError):
    """A conditional write refused: the object is no longer the one read (another
    writer came between), or exists where none was. Read it again, decide again."""


class CorruptObjectError(BucketError):
    """An object in the bucket does not match its checksum (or the manifest does not
    match its own): reported with its key, never skipped."""

    def __init__(self, message: str, *, key: str) -> None:
        super().__init__(f"{message} (object {key})")
        self.key = key
