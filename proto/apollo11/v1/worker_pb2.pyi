from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class AttemptToken(_message.Message):
    __slots__ = ("term", "event_id")
    TERM_FIELD_NUMBER: _ClassVar[int]
    EVENT_ID_FIELD_NUMBER: _ClassVar[int]
    term: int
    event_id: int
    def __init__(self, term: _Optional[int] = ..., event_id: _Optional[int] = ...) -> None: ...

class WorkflowRef(_message.Message):
    __slots__ = ("name", "version")
    NAME_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    name: str
    version: int
    def __init__(self, name: _Optional[str] = ..., version: _Optional[int] = ...) -> None: ...

class RunningAttempt(_message.Message):
    __slots__ = ("token", "task_id", "step", "attempt", "heartbeat_json")
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_JSON_FIELD_NUMBER: _ClassVar[int]
    token: AttemptToken
    task_id: str
    step: str
    attempt: int
    heartbeat_json: bytes
    def __init__(self, token: _Optional[_Union[AttemptToken, _Mapping]] = ..., task_id: _Optional[str] = ..., step: _Optional[str] = ..., attempt: _Optional[int] = ..., heartbeat_json: _Optional[bytes] = ...) -> None: ...

class Register(_message.Message):
    __slots__ = ("name", "instance", "slots", "workflows", "labels", "running", "version", "packed_acks", "packed_assignments", "default_name")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    NAME_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_FIELD_NUMBER: _ClassVar[int]
    SLOTS_FIELD_NUMBER: _ClassVar[int]
    WORKFLOWS_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    RUNNING_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    PACKED_ACKS_FIELD_NUMBER: _ClassVar[int]
    PACKED_ASSIGNMENTS_FIELD_NUMBER: _ClassVar[int]
    DEFAULT_NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    instance: str
    slots: int
    workflows: _containers.RepeatedCompositeFieldContainer[WorkflowRef]
    labels: _containers.ScalarMap[str, str]
    running: _containers.RepeatedCompositeFieldContainer[RunningAttempt]
    version: str
    packed_acks: bool
    packed_assignments: bool
    default_name: bool
    def __init__(self, name: _Optional[str] = ..., instance: _Optional[str] = ..., slots: _Optional[int] = ..., workflows: _Optional[_Iterable[_Union[WorkflowRef, _Mapping]]] = ..., labels: _Optional[_Mapping[str, str]] = ..., running: _Optional[_Iterable[_Union[RunningAttempt, _Mapping]]] = ..., version: _Optional[str] = ..., packed_acks: _Optional[bool] = ..., packed_assignments: _Optional[bool] = ..., default_name: _Optional[bool] = ...) -> None: ...

class WorkerHeartbeat(_message.Message):
    __slots__ = ("running",)
    RUNNING_FIELD_NUMBER: _ClassVar[int]
    running: _containers.RepeatedCompositeFieldContainer[RunningAttempt]
    def __init__(self, running: _Optional[_Iterable[_Union[RunningAttempt, _Mapping]]] = ...) -> None: ...

class StepFailure(_message.Message):
    __slots__ = ("error_type", "message", "details_json", "declared", "mro")
    ERROR_TYPE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    DETAILS_JSON_FIELD_NUMBER: _ClassVar[int]
    DECLARED_FIELD_NUMBER: _ClassVar[int]
    MRO_FIELD_NUMBER: _ClassVar[int]
    error_type: str
    message: str
    details_json: bytes
    declared: bool
    mro: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, error_type: _Optional[str] = ..., message: _Optional[str] = ..., details_json: _Optional[bytes] = ..., declared: _Optional[bool] = ..., mro: _Optional[_Iterable[str]] = ...) -> None: ...

class StepResult(_message.Message):
    __slots__ = ("token", "task_id", "step", "attempt", "result_json", "failure", "cancelled", "seconds")
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    RESULT_JSON_FIELD_NUMBER: _ClassVar[int]
    FAILURE_FIELD_NUMBER: _ClassVar[int]
    CANCELLED_FIELD_NUMBER: _ClassVar[int]
    SECONDS_FIELD_NUMBER: _ClassVar[int]
    token: AttemptToken
    task_id: str
    step: str
    attempt: int
    result_json: bytes
    failure: StepFailure
    cancelled: bool
    seconds: float
    def __init__(self, token: _Optional[_Union[AttemptToken, _Mapping]] = ..., task_id: _Optional[str] = ..., step: _Optional[str] = ..., attempt: _Optional[int] = ..., result_json: _Optional[bytes] = ..., failure: _Optional[_Union[StepFailure, _Mapping]] = ..., cancelled: _Optional[bool] = ..., seconds: _Optional[float] = ...) -> None: ...

class Results(_message.Message):
    __slots__ = ("results", "ok_terms", "ok_event_ids", "ok_task_ids", "ok_steps", "ok_attempts", "ok_results_json", "ok_seconds")
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    OK_TERMS_FIELD_NUMBER: _ClassVar[int]
    OK_EVENT_IDS_FIELD_NUMBER: _ClassVar[int]
    OK_TASK_IDS_FIELD_NUMBER: _ClassVar[int]
    OK_STEPS_FIELD_NUMBER: _ClassVar[int]
    OK_ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    OK_RESULTS_JSON_FIELD_NUMBER: _ClassVar[int]
    OK_SECONDS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[StepResult]
    ok_terms: _containers.RepeatedScalarFieldContainer[int]
    ok_event_ids: _containers.RepeatedScalarFieldContainer[int]
    ok_task_ids: _containers.RepeatedScalarFieldContainer[str]
    ok_steps: _containers.RepeatedScalarFieldContainer[str]
    ok_attempts: _containers.RepeatedScalarFieldContainer[int]
    ok_results_json: _containers.RepeatedScalarFieldContainer[bytes]
    ok_seconds: _containers.RepeatedScalarFieldContainer[float]
    def __init__(self, results: _Optional[_Iterable[_Union[StepResult, _Mapping]]] = ..., ok_terms: _Optional[_Iterable[int]] = ..., ok_event_ids: _Optional[_Iterable[int]] = ..., ok_task_ids: _Optional[_Iterable[str]] = ..., ok_steps: _Optional[_Iterable[str]] = ..., ok_attempts: _Optional[_Iterable[int]] = ..., ok_results_json: _Optional[_Iterable[bytes]] = ..., ok_seconds: _Optional[_Iterable[float]] = ...) -> None: ...

class JournalRequest(_message.Message):
    __slots__ = ("id", "token", "task_id", "step", "record", "resolve_wait_json")
    ID_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    RECORD_FIELD_NUMBER: _ClassVar[int]
    RESOLVE_WAIT_JSON_FIELD_NUMBER: _ClassVar[int]
    id: int
    token: AttemptToken
    task_id: str
    step: str
    record: JournalRecord
    resolve_wait_json: bytes
    def __init__(self, id: _Optional[int] = ..., token: _Optional[_Union[AttemptToken, _Mapping]] = ..., task_id: _Optional[str] = ..., step: _Optional[str] = ..., record: _Optional[_Union[JournalRecord, _Mapping]] = ..., resolve_wait_json: _Optional[bytes] = ...) -> None: ...

class JournalRecord(_message.Message):
    __slots__ = ("checkpoints_json", "wait_json", "children_json")
    CHECKPOINTS_JSON_FIELD_NUMBER: _ClassVar[int]
    WAIT_JSON_FIELD_NUMBER: _ClassVar[int]
    CHILDREN_JSON_FIELD_NUMBER: _ClassVar[int]
    checkpoints_json: bytes
    wait_json: bytes
    children_json: bytes
    def __init__(self, checkpoints_json: _Optional[bytes] = ..., wait_json: _Optional[bytes] = ..., children_json: _Optional[bytes] = ...) -> None: ...

class WorkerMessage(_message.Message):
    __slots__ = ("register", "heartbeat", "results", "journal")
    REGISTER_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_FIELD_NUMBER: _ClassVar[int]
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    JOURNAL_FIELD_NUMBER: _ClassVar[int]
    register: Register
    heartbeat: WorkerHeartbeat
    results: Results
    journal: JournalRequest
    def __init__(self, register: _Optional[_Union[Register, _Mapping]] = ..., heartbeat: _Optional[_Union[WorkerHeartbeat, _Mapping]] = ..., results: _Optional[_Union[Results, _Mapping]] = ..., journal: _Optional[_Union[JournalRequest, _Mapping]] = ...) -> None: ...

class Assignment(_message.Message):
    __slots__ = ("token", "task_id", "step", "attempt", "workflow", "version", "input_json", "results_json", "timeout_s", "last_heartbeat_json", "node_id", "durable", "traceparent")
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    WORKFLOW_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    INPUT_JSON_FIELD_NUMBER: _ClassVar[int]
    RESULTS_JSON_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_S_FIELD_NUMBER: _ClassVar[int]
    LAST_HEARTBEAT_JSON_FIELD_NUMBER: _ClassVar[int]
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    DURABLE_FIELD_NUMBER: _ClassVar[int]
    TRACEPARENT_FIELD_NUMBER: _ClassVar[int]
    token: AttemptToken
    task_id: str
    step: str
    attempt: int
    workflow: str
    version: int
    input_json: bytes
    results_json: bytes
    timeout_s: float
    last_heartbeat_json: bytes
    node_id: str
    durable: DurableJournal
    traceparent: str
    def __init__(self, token: _Optional[_Union[AttemptToken, _Mapping]] = ..., task_id: _Optional[str] = ..., step: _Optional[str] = ..., attempt: _Optional[int] = ..., workflow: _Optional[str] = ..., version: _Optional[int] = ..., input_json: _Optional[bytes] = ..., results_json: _Optional[bytes] = ..., timeout_s: _Optional[float] = ..., last_heartbeat_json: _Optional[bytes] = ..., node_id: _Optional[str] = ..., durable: _Optional[_Union[DurableJournal, _Mapping]] = ..., traceparent: _Optional[str] = ...) -> None: ...

class DurableJournal(_message.Message):
    __slots__ = ("checkpoints_json", "wait_json", "first_event_id", "now_ms")
    CHECKPOINTS_JSON_FIELD_NUMBER: _ClassVar[int]
    WAIT_JSON_FIELD_NUMBER: _ClassVar[int]
    FIRST_EVENT_ID_FIELD_NUMBER: _ClassVar[int]
    NOW_MS_FIELD_NUMBER: _ClassVar[int]
    checkpoints_json: bytes
    wait_json: bytes
    first_event_id: int
    now_ms: int
    def __init__(self, checkpoints_json: _Optional[bytes] = ..., wait_json: _Optional[bytes] = ..., first_event_id: _Optional[int] = ..., now_ms: _Optional[int] = ...) -> None: ...

class Registered(_message.Message):
    __slots__ = ("node_id", "term", "heartbeat_interval_s", "heartbeat_timeout_s", "stale", "pings", "packed_results", "name")
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    TERM_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_INTERVAL_S_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_TIMEOUT_S_FIELD_NUMBER: _ClassVar[int]
    STALE_FIELD_NUMBER: _ClassVar[int]
    PINGS_FIELD_NUMBER: _ClassVar[int]
    PACKED_RESULTS_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    node_id: str
    term: int
    heartbeat_interval_s: float
    heartbeat_timeout_s: float
    stale: _containers.RepeatedCompositeFieldContainer[AttemptToken]
    pings: bool
    packed_results: bool
    name: str
    def __init__(self, node_id: _Optional[str] = ..., term: _Optional[int] = ..., heartbeat_interval_s: _Optional[float] = ..., heartbeat_timeout_s: _Optional[float] = ..., stale: _Optional[_Iterable[_Union[AttemptToken, _Mapping]]] = ..., pings: _Optional[bool] = ..., packed_results: _Optional[bool] = ..., name: _Optional[str] = ...) -> None: ...

class Assign(_message.Message):
    __slots__ = ("assignments", "node_id", "terms", "event_ids", "task_ids", "steps", "attempts", "workflows", "versions", "inputs_json", "results_json", "timeouts_s")
    ASSIGNMENTS_FIELD_NUMBER: _ClassVar[int]
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    TERMS_FIELD_NUMBER: _ClassVar[int]
    EVENT_IDS_FIELD_NUMBER: _ClassVar[int]
    TASK_IDS_FIELD_NUMBER: _ClassVar[int]
    STEPS_FIELD_NUMBER: _ClassVar[int]
    ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    WORKFLOWS_FIELD_NUMBER: _ClassVar[int]
    VERSIONS_FIELD_NUMBER: _ClassVar[int]
    INPUTS_JSON_FIELD_NUMBER: _ClassVar[int]
    RESULTS_JSON_FIELD_NUMBER: _ClassVar[int]
    TIMEOUTS_S_FIELD_NUMBER: _ClassVar[int]
    assignments: _containers.RepeatedCompositeFieldContainer[Assignment]
    node_id: str
    terms: _containers.RepeatedScalarFieldContainer[int]
    event_ids: _containers.RepeatedScalarFieldContainer[int]
    task_ids: _containers.RepeatedScalarFieldContainer[str]
    steps: _containers.RepeatedScalarFieldContainer[str]
    attempts: _containers.RepeatedScalarFieldContainer[int]
    workflows: _containers.RepeatedScalarFieldContainer[str]
    versions: _containers.RepeatedScalarFieldContainer[int]
    inputs_json: _containers.RepeatedScalarFieldContainer[bytes]
    results_json: _containers.RepeatedScalarFieldContainer[bytes]
    timeouts_s: _containers.RepeatedScalarFieldContainer[float]
    def __init__(self, assignments: _Optional[_Iterable[_Union[Assignment, _Mapping]]] = ..., node_id: _Optional[str] = ..., terms: _Optional[_Iterable[int]] = ..., event_ids: _Optional[_Iterable[int]] = ..., task_ids: _Optional[_Iterable[str]] = ..., steps: _Optional[_Iterable[str]] = ..., attempts: _Optional[_Iterable[int]] = ..., workflows: _Optional[_Iterable[str]] = ..., versions: _Optional[_Iterable[int]] = ..., inputs_json: _Optional[_Iterable[bytes]] = ..., results_json: _Optional[_Iterable[bytes]] = ..., timeouts_s: _Optional[_Iterable[float]] = ...) -> None: ...

class CancelAttempt(_message.Message):
    __slots__ = ("token", "reason")
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    token: AttemptToken
    reason: str
    def __init__(self, token: _Optional[_Union[AttemptToken, _Mapping]] = ..., reason: _Optional[str] = ...) -> None: ...

class ResultAck(_message.Message):
    __slots__ = ("token", "accepted", "reason")
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    ACCEPTED_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    token: AttemptToken
    accepted: bool
    reason: str
    def __init__(self, token: _Optional[_Union[AttemptToken, _Mapping]] = ..., accepted: _Optional[bool] = ..., reason: _Optional[str] = ...) -> None: ...

class Acks(_message.Message):
    __slots__ = ("acks", "accepted_term", "accepted_event_ids")
    ACKS_FIELD_NUMBER: _ClassVar[int]
    ACCEPTED_TERM_FIELD_NUMBER: _ClassVar[int]
    ACCEPTED_EVENT_IDS_FIELD_NUMBER: _ClassVar[int]
    acks: _containers.RepeatedCompositeFieldContainer[ResultAck]
    accepted_term: int
    accepted_event_ids: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, acks: _Optional[_Iterable[_Union[ResultAck, _Mapping]]] = ..., accepted_term: _Optional[int] = ..., accepted_event_ids: _Optional[_Iterable[int]] = ...) -> None: ...

class JournalReply(_message.Message):
    __slots__ = ("id", "error", "retry", "resolution_json", "children_json", "now_ms")
    ID_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    RETRY_FIELD_NUMBER: _ClassVar[int]
    RESOLUTION_JSON_FIELD_NUMBER: _ClassVar[int]
    CHILDREN_JSON_FIELD_NUMBER: _ClassVar[int]
    NOW_MS_FIELD_NUMBER: _ClassVar[int]
    id: int
    error: str
    retry: bool
    resolution_json: bytes
    children_json: bytes
    now_ms: int
    def __init__(self, id: _Optional[int] = ..., error: _Optional[str] = ..., retry: _Optional[bool] = ..., resolution_json: _Optional[bytes] = ..., children_json: _Optional[bytes] = ..., now_ms: _Optional[int] = ...) -> None: ...

class DispatchMessage(_message.Message):
    __slots__ = ("registered", "assign", "cancel", "acks", "journal")
    REGISTERED_FIELD_NUMBER: _ClassVar[int]
    ASSIGN_FIELD_NUMBER: _ClassVar[int]
    CANCEL_FIELD_NUMBER: _ClassVar[int]
    ACKS_FIELD_NUMBER: _ClassVar[int]
    JOURNAL_FIELD_NUMBER: _ClassVar[int]
    registered: Registered
    assign: Assign
    cancel: CancelAttempt
    acks: Acks
    journal: JournalReply
    def __init__(self, registered: _Optional[_Union[Registered, _Mapping]] = ..., assign: _Optional[_Union[Assign, _Mapping]] = ..., cancel: _Optional[_Union[CancelAttempt, _Mapping]] = ..., acks: _Optional[_Union[Acks, _Mapping]] = ..., journal: _Optional[_Union[JournalReply, _Mapping]] = ...) -> None: ...
