from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ReadRecordsRequest(_message.Message):
    __slots__ = ("first_event_id", "last_event_id", "cluster_id")
    FIRST_EVENT_ID_FIELD_NUMBER: _ClassVar[int]
    LAST_EVENT_ID_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_ID_FIELD_NUMBER: _ClassVar[int]
    first_event_id: int
    last_event_id: int
    cluster_id: str
    def __init__(self, first_event_id: _Optional[int] = ..., last_event_id: _Optional[int] = ..., cluster_id: _Optional[str] = ...) -> None: ...

class Records(_message.Message):
    __slots__ = ("first_event_id", "last_event_id", "records")
    FIRST_EVENT_ID_FIELD_NUMBER: _ClassVar[int]
    LAST_EVENT_ID_FIELD_NUMBER: _ClassVar[int]
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    first_event_id: int
    last_event_id: int
    records: bytes
    def __init__(self, first_event_id: _Optional[int] = ..., last_event_id: _Optional[int] = ..., records: _Optional[bytes] = ...) -> None: ...

class TermStart(_message.Message):
    __slots__ = ("term", "first_event_id")
    TERM_FIELD_NUMBER: _ClassVar[int]
    FIRST_EVENT_ID_FIELD_NUMBER: _ClassVar[int]
    term: int
    first_event_id: int
    def __init__(self, term: _Optional[int] = ..., first_event_id: _Optional[int] = ...) -> None: ...

class Hello(_message.Message):
    __slots__ = ("node_id", "address", "first_event_id", "last_event_id", "last_term", "terms", "known_term", "cluster_id")
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    FIRST_EVENT_ID_FIELD_NUMBER: _ClassVar[int]
    LAST_EVENT_ID_FIELD_NUMBER: _ClassVar[int]
    LAST_TERM_FIELD_NUMBER: _ClassVar[int]
    TERMS_FIELD_NUMBER: _ClassVar[int]
    KNOWN_TERM_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_ID_FIELD_NUMBER: _ClassVar[int]
    node_id: str
    address: str
    first_event_id: int
    last_event_id: int
    last_term: int
    terms: _containers.RepeatedCompositeFieldContainer[TermStart]
    known_term: int
    cluster_id: str
    def __init__(self, node_id: _Optional[str] = ..., address: _Optional[str] = ..., first_event_id: _Optional[int] = ..., last_event_id: _Optional[int] = ..., last_term: _Optional[int] = ..., terms: _Optional[_Iterable[_Union[TermStart, _Mapping]]] = ..., known_term: _Optional[int] = ..., cluster_id: _Optional[str] = ...) -> None: ...

class Ack(_message.Message):
    __slots__ = ("durable_event_id", "applied_event_id")
    DURABLE_EVENT_ID_FIELD_NUMBER: _ClassVar[int]
    APPLIED_EVENT_ID_FIELD_NUMBER: _ClassVar[int]
    durable_event_id: int
    applied_event_id: int
    def __init__(self, durable_event_id: _Optional[int] = ..., applied_event_id: _Optional[int] = ...) -> None: ...

class StandbyMessage(_message.Message):
    __slots__ = ("hello", "ack")
    HELLO_FIELD_NUMBER: _ClassVar[int]
    ACK_FIELD_NUMBER: _ClassVar[int]
    hello: Hello
    ack: Ack
    def __init__(self, hello: _Optional[_Union[Hello, _Mapping]] = ..., ack: _Optional[_Union[Ack, _Mapping]] = ...) -> None: ...

class Welcome(_message.Message):
    __slots__ = ("node_id", "term", "from_event_id", "segment_max_bytes", "cluster_id")
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    TERM_FIELD_NUMBER: _ClassVar[int]
    FROM_EVENT_ID_FIELD_NUMBER: _ClassVar[int]
    SEGMENT_MAX_BYTES_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_ID_FIELD_NUMBER: _ClassVar[int]
    node_id: str
    term: int
    from_event_id: int
    segment_max_bytes: int
    cluster_id: str
    def __init__(self, node_id: _Optional[str] = ..., term: _Optional[int] = ..., from_event_id: _Optional[int] = ..., segment_max_bytes: _Optional[int] = ..., cluster_id: _Optional[str] = ...) -> None: ...

class Diverged(_message.Message):
    __slots__ = ("keep_through_event_id", "reason")
    KEEP_THROUGH_EVENT_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    keep_through_event_id: int
    reason: str
    def __init__(self, keep_through_event_id: _Optional[int] = ..., reason: _Optional[str] = ...) -> None: ...

class SnapshotChunk(_message.Message):
    __slots__ = ("name", "offset", "data", "last_of_file", "last", "watermark")
    NAME_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    LAST_OF_FILE_FIELD_NUMBER: _ClassVar[int]
    LAST_FIELD_NUMBER: _ClassVar[int]
    WATERMARK_FIELD_NUMBER: _ClassVar[int]
    name: str
    offset: int
    data: bytes
    last_of_file: bool
    last: bool
    watermark: int
    def __init__(self, name: _Optional[str] = ..., offset: _Optional[int] = ..., data: _Optional[bytes] = ..., last_of_file: _Optional[bool] = ..., last: _Optional[bool] = ..., watermark: _Optional[int] = ...) -> None: ...

class Batch(_message.Message):
    __slots__ = ("first_event_id", "last_event_id", "term", "records", "primary_durable_id", "sent_ms")
    FIRST_EVENT_ID_FIELD_NUMBER: _ClassVar[int]
    LAST_EVENT_ID_FIELD_NUMBER: _ClassVar[int]
    TERM_FIELD_NUMBER: _ClassVar[int]
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    PRIMARY_DURABLE_ID_FIELD_NUMBER: _ClassVar[int]
    SENT_MS_FIELD_NUMBER: _ClassVar[int]
    first_event_id: int
    last_event_id: int
    term: int
    records: bytes
    primary_durable_id: int
    sent_ms: int
    def __init__(self, first_event_id: _Optional[int] = ..., last_event_id: _Optional[int] = ..., term: _Optional[int] = ..., records: _Optional[bytes] = ..., primary_durable_id: _Optional[int] = ..., sent_ms: _Optional[int] = ...) -> None: ...

class Heartbeat(_message.Message):
    __slots__ = ("term", "primary_durable_id", "sent_ms")
    TERM_FIELD_NUMBER: _ClassVar[int]
    PRIMARY_DURABLE_ID_FIELD_NUMBER: _ClassVar[int]
    SENT_MS_FIELD_NUMBER: _ClassVar[int]
    term: int
    primary_durable_id: int
    sent_ms: int
    def __init__(self, term: _Optional[int] = ..., primary_durable_id: _Optional[int] = ..., sent_ms: _Optional[int] = ...) -> None: ...

class PrimaryMessage(_message.Message):
    __slots__ = ("welcome", "diverged", "snapshot", "batch", "heartbeat")
    WELCOME_FIELD_NUMBER: _ClassVar[int]
    DIVERGED_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_FIELD_NUMBER: _ClassVar[int]
    BATCH_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_FIELD_NUMBER: _ClassVar[int]
    welcome: Welcome
    diverged: Diverged
    snapshot: SnapshotChunk
    batch: Batch
    heartbeat: Heartbeat
    def __init__(self, welcome: _Optional[_Union[Welcome, _Mapping]] = ..., diverged: _Optional[_Union[Diverged, _Mapping]] = ..., snapshot: _Optional[_Union[SnapshotChunk, _Mapping]] = ..., batch: _Optional[_Union[Batch, _Mapping]] = ..., heartbeat: _Optional[_Union[Heartbeat, _Mapping]] = ...) -> None: ...
