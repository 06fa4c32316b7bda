from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class TaskState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TASK_STATE_UNSPECIFIED: _ClassVar[TaskState]
    TASK_STATE_PENDING: _ClassVar[TaskState]
    TASK_STATE_RUNNING: _ClassVar[TaskState]
    TASK_STATE_SUCCEEDED: _ClassVar[TaskState]
    TASK_STATE_FAILED: _ClassVar[TaskState]
    TASK_STATE_CANCELLED: _ClassVar[TaskState]
    TASK_STATE_WAITING: _ClassVar[TaskState]
    TASK_STATE_NONDETERMINISTIC: _ClassVar[TaskState]
    TASK_STATE_PAUSED: _ClassVar[TaskState]
    TASK_STATE_COMPENSATING: _ClassVar[TaskState]
    TASK_STATE_COMPENSATED: _ClassVar[TaskState]

class StepState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    STEP_STATE_UNSPECIFIED: _ClassVar[StepState]
    STEP_STATE_PENDING: _ClassVar[StepState]
    STEP_STATE_STARTED: _ClassVar[StepState]
    STEP_STATE_SUCCEEDED: _ClassVar[StepState]
    STEP_STATE_FAILED: _ClassVar[StepState]
    STEP_STATE_COMPENSATING: _ClassVar[StepState]
    STEP_STATE_COMPENSATED: _ClassVar[StepState]
    STEP_STATE_SKIPPED: _ClassVar[StepState]
    STEP_STATE_WAITING: _ClassVar[StepState]

class EventType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    EVENT_TYPE_UNSPECIFIED: _ClassVar[EventType]
    EVENT_TYPE_TASK_SUBMITTED: _ClassVar[EventType]
    EVENT_TYPE_STEP_STARTED: _ClassVar[EventType]
    EVENT_TYPE_STEP_SUCCEEDED: _ClassVar[EventType]
    EVENT_TYPE_STEP_FAILED: _ClassVar[EventType]
    EVENT_TYPE_STEP_COMPENSATING: _ClassVar[EventType]
    EVENT_TYPE_STEP_COMPENSATED: _ClassVar[EventType]
    EVENT_TYPE_MANUAL_OVERRIDE: _ClassVar[EventType]
    EVENT_TYPE_TASK_CANCELLED: _ClassVar[EventType]
    EVENT_TYPE_TERM_STARTED: _ClassVar[EventType]
    EVENT_TYPE_CHECKPOINT: _ClassVar[EventType]
    EVENT_TYPE_WAIT: _ClassVar[EventType]
    EVENT_TYPE_EVENT: _ClassVar[EventType]
    EVENT_TYPE_SCHEDULE: _ClassVar[EventType]
    EVENT_TYPE_OCCURRENCE: _ClassVar[EventType]
    EVENT_TYPE_DEBOUNCED: _ClassVar[EventType]
    EVENT_TYPE_LIMIT: _ClassVar[EventType]
    EVENT_TYPE_TASK_PAUSED: _ClassVar[EventType]
    EVENT_TYPE_TASK_COMPENSATING: _ClassVar[EventType]
    EVENT_TYPE_TASK_REDACTED: _ClassVar[EventType]
    EVENT_TYPE_TASK_HELD: _ClassVar[EventType]
    EVENT_TYPE_TASK_PURGED: _ClassVar[EventType]
TASK_STATE_UNSPECIFIED: TaskState
TASK_STATE_PENDING: TaskState
TASK_STATE_RUNNING: TaskState
TASK_STATE_SUCCEEDED: TaskState
TASK_STATE_FAILED: TaskState
TASK_STATE_CANCELLED: TaskState
TASK_STATE_WAITING: TaskState
TASK_STATE_NONDETERMINISTIC: TaskState
TASK_STATE_PAUSED: TaskState
TASK_STATE_COMPENSATING: TaskState
TASK_STATE_COMPENSATED: TaskState
STEP_STATE_UNSPECIFIED: StepState
STEP_STATE_PENDING: StepState
STEP_STATE_STARTED: StepState
STEP_STATE_SUCCEEDED: StepState
STEP_STATE_FAILED: StepState
STEP_STATE_COMPENSATING: StepState
STEP_STATE_COMPENSATED: StepState
STEP_STATE_SKIPPED: StepState
STEP_STATE_WAITING: StepState
EVENT_TYPE_UNSPECIFIED: EventType
EVENT_TYPE_TASK_SUBMITTED: EventType
EVENT_TYPE_STEP_STARTED: EventType
EVENT_TYPE_STEP_SUCCEEDED: EventType
EVENT_TYPE_STEP_FAILED: EventType
EVENT_TYPE_STEP_COMPENSATING: EventType
EVENT_TYPE_STEP_COMPENSATED: EventType
EVENT_TYPE_MANUAL_OVERRIDE: EventType
EVENT_TYPE_TASK_CANCELLED: EventType
EVENT_TYPE_TERM_STARTED: EventType
EVENT_TYPE_CHECKPOINT: EventType
EVENT_TYPE_WAIT: EventType
EVENT_TYPE_EVENT: EventType
EVENT_TYPE_SCHEDULE: EventType
EVENT_TYPE_OCCURRENCE: EventType
EVENT_TYPE_DEBOUNCED: EventType
EVENT_TYPE_LIMIT: EventType
EVENT_TYPE_TASK_PAUSED: EventType
EVENT_TYPE_TASK_COMPENSATING: EventType
EVENT_TYPE_TASK_REDACTED: EventType
EVENT_TYPE_TASK_HELD: EventType
EVENT_TYPE_TASK_PURGED: EventType

class SetLimitRequest(_message.Message):
    __slots__ = ("limit_id", "max", "rate", "per", "burst", "weights", "reset", "reason")
    class WeightsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    LIMIT_ID_FIELD_NUMBER: _ClassVar[int]
    MAX_FIELD_NUMBER: _ClassVar[int]
    RATE_FIELD_NUMBER: _ClassVar[int]
    PER_FIELD_NUMBER: _ClassVar[int]
    BURST_FIELD_NUMBER: _ClassVar[int]
    WEIGHTS_FIELD_NUMBER: _ClassVar[int]
    RESET_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    limit_id: str
    max: int
    rate: int
    per: str
    burst: int
    weights: _containers.ScalarMap[str, float]
    reset: bool
    reason: str
    def __init__(self, limit_id: _Optional[str] = ..., max: _Optional[int] = ..., rate: _Optional[int] = ..., per: _Optional[str] = ..., burst: _Optional[int] = ..., weights: _Optional[_Mapping[str, float]] = ..., reset: _Optional[bool] = ..., reason: _Optional[str] = ...) -> None: ...

class SetLimitResponse(_message.Message):
    __slots__ = ("event_id", "limit", "weights")
    class WeightsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    EVENT_ID_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    WEIGHTS_FIELD_NUMBER: _ClassVar[int]
    event_id: int
    limit: Limit
    weights: _containers.ScalarMap[str, float]
    def __init__(self, event_id: _Optional[int] = ..., limit: _Optional[_Union[Limit, _Mapping]] = ..., weights: _Optional[_Mapping[str, float]] = ...) -> None: ...

class ListLimitsRequest(_message.Message):
    __slots__ = ("all_keys",)
    ALL_KEYS_FIELD_NUMBER: _ClassVar[int]
    all_keys: bool
    def __init__(self, all_keys: _Optional[bool] = ...) -> None: ...

class ListLimitsResponse(_message.Message):
    __slots__ = ("limits", "weights")
    class WeightsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    LIMITS_FIELD_NUMBER: _ClassVar[int]
    WEIGHTS_FIELD_NUMBER: _ClassVar[int]
    limits: _containers.RepeatedCompositeFieldContainer[Limit]
    weights: _containers.ScalarMap[str, float]
    def __init__(self, limits: _Optional[_Iterable[_Union[Limit, _Mapping]]] = ..., weights: _Optional[_Mapping[str, float]] = ...) -> None: ...

class Limit(_message.Message):
    __slots__ = ("limit_id", "kind", "scope", "declared", "effective", "overridden", "on_full", "keys", "values")
    LIMIT_ID_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    DECLARED_FIELD_NUMBER: _ClassVar[int]
    EFFECTIVE_FIELD_NUMBER: _ClassVar[int]
    OVERRIDDEN_FIELD_NUMBER: _ClassVar[int]
    ON_FULL_FIELD_NUMBER: _ClassVar[int]
    KEYS_FIELD_NUMBER: _ClassVar[int]
    VALUES_FIELD_NUMBER: _ClassVar[int]
    limit_id: str
    kind: str
    scope: str
    declared: str
    effective: str
    overridden: bool
    on_full: str
    keys: _containers.RepeatedCompositeFieldContainer[KeyLoad]
    values: int
    def __init__(self, limit_id: _Optional[str] = ..., kind: _Optional[str] = ..., scope: _Optional[str] = ..., declared: _Optional[str] = ..., effective: _Optional[str] = ..., overridden: _Optional[bool] = ..., on_full: _Optional[str] = ..., keys: _Optional[_Iterable[_Union[KeyLoad, _Mapping]]] = ..., values: _Optional[int] = ...) -> None: ...

class KeyLoad(_message.Message):
    __slots__ = ("value", "running", "queued")
    VALUE_FIELD_NUMBER: _ClassVar[int]
    RUNNING_FIELD_NUMBER: _ClassVar[int]
    QUEUED_FIELD_NUMBER: _ClassVar[int]
    value: str
    running: int
    queued: int
    def __init__(self, value: _Optional[str] = ..., running: _Optional[int] = ..., queued: _Optional[int] = ...) -> None: ...

class ScheduleSpec(_message.Message):
    __slots__ = ("cron", "every", "at", "tz", "start", "end", "jitter", "catchup_window", "overlap", "nonexistent", "ambiguous")
    CRON_FIELD_NUMBER: _ClassVar[int]
    EVERY_FIELD_NUMBER: _ClassVar[int]
    AT_FIELD_NUMBER: _ClassVar[int]
    TZ_FIELD_NUMBER: _ClassVar[int]
    START_FIELD_NUMBER: _ClassVar[int]
    END_FIELD_NUMBER: _ClassVar[int]
    JITTER_FIELD_NUMBER: _ClassVar[int]
    CATCHUP_WINDOW_FIELD_NUMBER: _ClassVar[int]
    OVERLAP_FIELD_NUMBER: _ClassVar[int]
    NONEXISTENT_FIELD_NUMBER: _ClassVar[int]
    AMBIGUOUS_FIELD_NUMBER: _ClassVar[int]
    cron: str
    every: str
    at: str
    tz: str
    start: str
    end: str
    jitter: str
    catchup_window: str
    overlap: str
    nonexistent: str
    ambiguous: str
    def __init__(self, cron: _Optional[str] = ..., every: _Optional[str] = ..., at: _Optional[str] = ..., tz: _Optional[str] = ..., start: _Optional[str] = ..., end: _Optional[str] = ..., jitter: _Optional[str] = ..., catchup_window: _Optional[str] = ..., overlap: _Optional[str] = ..., nonexistent: _Optional[str] = ..., ambiguous: _Optional[str] = ...) -> None: ...

class Occurrence(_message.Message):
    __slots__ = ("nominal_time", "outcome", "reason", "task_id", "event_id")
    NOMINAL_TIME_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    EVENT_ID_FIELD_NUMBER: _ClassVar[int]
    nominal_time: str
    outcome: str
    reason: str
    task_id: str
    event_id: int
    def __init__(self, nominal_time: _Optional[str] = ..., outcome: _Optional[str] = ..., reason: _Optional[str] = ..., task_id: _Optional[str] = ..., event_id: _Optional[int] = ...) -> None: ...

class Schedule(_message.Message):
    __slots__ = ("schedule_id", "workflow", "spec", "input_json", "paused", "note", "by", "source", "created_ms", "updated_ms", "next", "last", "watermark", "occurrences", "backfills")
    SCHEDULE_ID_FIELD_NUMBER: _ClassVar[int]
    WORKFLOW_FIELD_NUMBER: _ClassVar[int]
    SPEC_FIELD_NUMBER: _ClassVar[int]
    INPUT_JSON_FIELD_NUMBER: _ClassVar[int]
    PAUSED_FIELD_NUMBER: _ClassVar[int]
    NOTE_FIELD_NUMBER: _ClassVar[int]
    BY_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    CREATED_MS_FIELD_NUMBER: _ClassVar[int]
    UPDATED_MS_FIELD_NUMBER: _ClassVar[int]
    NEXT_FIELD_NUMBER: _ClassVar[int]
    LAST_FIELD_NUMBER: _ClassVar[int]
    WATERMARK_FIELD_NUMBER: _ClassVar[int]
    OCCURRENCES_FIELD_NUMBER: _ClassVar[int]
    BACKFILLS_FIELD_NUMBER: _ClassVar[int]
    schedule_id: str
    workflow: str
    spec: ScheduleSpec
    input_json: str
    paused: bool
    note: str
    by: str
    source: str
    created_ms: int
    updated_ms: int
    next: _containers.RepeatedScalarFieldContainer[str]
    last: Occurrence
    watermark: str
    occurrences: int
    backfills: _containers.RepeatedCompositeFieldContainer[Backfill]
    def __init__(self, schedule_id: _Optional[str] = ..., workflow: _Optional[str] = ..., spec: _Optional[_Union[ScheduleSpec, _Mapping]] = ..., input_json: _Optional[str] = ..., paused: _Optional[bool] = ..., note: _Optional[str] = ..., by: _Optional[str] = ..., source: _Optional[str] = ..., created_ms: _Optional[int] = ..., updated_ms: _Optional[int] = ..., next: _Optional[_Iterable[str]] = ..., last: _Optional[_Union[Occurrence, _Mapping]] = ..., watermark: _Optional[str] = ..., occurrences: _Optional[int] = ..., backfills: _Optional[_Iterable[_Union[Backfill, _Mapping]]] = ...) -> None: ...

class Backfill(_message.Message):
    __slots__ = ("backfill_id", "from_time", "to_time", "overlap", "by")
    BACKFILL_ID_FIELD_NUMBER: _ClassVar[int]
    FROM_TIME_FIELD_NUMBER: _ClassVar[int]
    TO_TIME_FIELD_NUMBER: _ClassVar[int]
    OVERLAP_FIELD_NUMBER: _ClassVar[int]
    BY_FIELD_NUMBER: _ClassVar[int]
    backfill_id: int
    from_time: str
    to_time: str
    overlap: str
    by: str
    def __init__(self, backfill_id: _Optional[int] = ..., from_time: _Optional[str] = ..., to_time: _Optional[str] = ..., overlap: _Optional[str] = ..., by: _Optional[str] = ...) -> None: ...

class CreateScheduleRequest(_message.Message):
    __slots__ = ("schedule_id", "workflow", "spec", "input_json", "note")
    SCHEDULE_ID_FIELD_NUMBER: _ClassVar[int]
    WORKFLOW_FIELD_NUMBER: _ClassVar[int]
    SPEC_FIELD_NUMBER: _ClassVar[int]
    INPUT_JSON_FIELD_NUMBER: _ClassVar[int]
    NOTE_FIELD_NUMBER: _ClassVar[int]
    schedule_id: str
    workflow: str
    spec: ScheduleSpec
    input_json: str
    note: str
    def __init__(self, schedule_id: _Optional[str] = ..., workflow: _Optional[str] = ..., spec: _Optional[_Union[ScheduleSpec, _Mapping]] = ..., input_json: _Optional[str] = ..., note: _Optional[str] = ...) -> None: ...

class UpdateScheduleRequest(_message.Message):
    __slots__ = ("schedule_id", "workflow", "spec", "input_json", "note")
    SCHEDULE_ID_FIELD_NUMBER: _ClassVar[int]
    WORKFLOW_FIELD_NUMBER: _ClassVar[int]
    SPEC_FIELD_NUMBER: _ClassVar[int]
    INPUT_JSON_FIELD_NUMBER: _ClassVar[int]
    NOTE_FIELD_NUMBER: _ClassVar[int]
    schedule_id: str
    workflow: str
    spec: ScheduleSpec
    input_json: str
    note: str
    def __init__(self, schedule_id: _Optional[str] = ..., workflow: _Optional[str] = ..., spec: _Optional[_Union[ScheduleSpec, _Mapping]] = ..., input_json: _Optional[str] = ..., note: _Optional[str] = ...) -> None: ...

class PauseScheduleRequest(_message.Message):
    __slots__ = ("schedule_id", "note")
    SCHEDULE_ID_FIELD_NUMBER: _ClassVar[int]
    NOTE_FIELD_NUMBER: _ClassVar[int]
    schedule_id: str
    note: str
    def __init__(self, schedule_id: _Optional[str] = ..., note: _Optional[str] = ...) -> None: ...

class UnpauseScheduleRequest(_message.Message):
    __slots__ = ("schedule_id", "note")
    SCHEDULE_ID_FIELD_NUMBER: _ClassVar[int]
    NOTE_FIELD_NUMBER: _ClassVar[int]
    schedule_id: str
    note: str
    def __init__(self, schedule_id: _Optional[str] = ..., note: _Optional[str] = ...) -> None: ...

class TriggerScheduleRequest(_message.Message):
    __slots__ = ("schedule_id",)
    SCHEDULE_ID_FIELD_NUMBER: _ClassVar[int]
    schedule_id: str
    def __init__(self, schedule_id: _Optional[str] = ...) -> None: ...

class TriggerScheduleResponse(_message.Message):
    __slots__ = ("task_id",)
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    def __init__(self, task_id: _Optional[str] = ...) -> None: ...

class BackfillScheduleRequest(_message.Message):
    __slots__ = ("schedule_id", "from_time", "to_time", "overlap")
    SCHEDULE_ID_FIELD_NUMBER: _ClassVar[int]
    FROM_TIME_FIELD_NUMBER: _ClassVar[int]
    TO_TIME_FIELD_NUMBER: _ClassVar[int]
    OVERLAP_FIELD_NUMBER: _ClassVar[int]
    schedule_id: str
    from_time: str
    to_time: str
    overlap: str
    def __init__(self, schedule_id: _Optional[str] = ..., from_time: _Optional[str] = ..., to_time: _Optional[str] = ..., overlap: _Optional[str] = ...) -> None: ...

class BackfillScheduleResponse(_message.Message):
    __slots__ = ("backfill_id", "times")
    BACKFILL_ID_FIELD_NUMBER: _ClassVar[int]
    TIMES_FIELD_NUMBER: _ClassVar[int]
    backfill_id: int
    times: int
    def __init__(self, backfill_id: _Optional[int] = ..., times: _Optional[int] = ...) -> None: ...

class DeleteScheduleRequest(_message.Message):
    __slots__ = ("schedule_id",)
    SCHEDULE_ID_FIELD_NUMBER: _ClassVar[int]
    schedule_id: str
    def __init__(self, schedule_id: _Optional[str] = ...) -> None: ...

class DeleteScheduleResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListSchedulesRequest(_message.Message):
    __slots__ = ("page_size", "page_token")
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    page_size: int
    page_token: str
    def __init__(self, page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListSchedulesResponse(_message.Message):
    __slots__ = ("schedules", "next_page_token")
    SCHEDULES_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    schedules: _containers.RepeatedCompositeFieldContainer[Schedule]
    next_page_token: str
    def __init__(self, schedules: _Optional[_Iterable[_Union[Schedule, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class DescribeScheduleRequest(_message.Message):
    __slots__ = ("schedule_id", "page_size", "page_token", "newest_first", "next_count")
    SCHEDULE_ID_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    NEWEST_FIRST_FIELD_NUMBER: _ClassVar[int]
    NEXT_COUNT_FIELD_NUMBER: _ClassVar[int]
    schedule_id: str
    page_size: int
    page_token: str
    newest_first: bool
    next_count: int
    def __init__(self, schedule_id: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ..., newest_first: _Optional[bool] = ..., next_count: _Optional[int] = ...) -> None: ...

class DescribeScheduleResponse(_message.Message):
    __slots__ = ("schedule", "occurrences", "next_page_token")
    SCHEDULE_FIELD_NUMBER: _ClassVar[int]
    OCCURRENCES_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    schedule: Schedule
    occurrences: _containers.RepeatedCompositeFieldContainer[Occurrence]
    next_page_token: str
    def __init__(self, schedule: _Optional[_Union[Schedule, _Mapping]] = ..., occurrences: _Optional[_Iterable[_Union[Occurrence, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class ListWorkflowsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class WorkflowStep(_message.Message):
    __slots__ = ("name", "after", "idempotency", "attempts", "timeout", "labels", "compensated")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    NAME_FIELD_NUMBER: _ClassVar[int]
    AFTER_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_FIELD_NUMBER: _ClassVar[int]
    ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    COMPENSATED_FIELD_NUMBER: _ClassVar[int]
    name: str
    after: _containers.RepeatedScalarFieldContainer[str]
    idempotency: str
    attempts: int
    timeout: str
    labels: _containers.ScalarMap[str, str]
    compensated: bool
    def __init__(self, name: _Optional[str] = ..., after: _Optional[_Iterable[str]] = ..., idempotency: _Optional[str] = ..., attempts: _Optional[int] = ..., timeout: _Optional[str] = ..., labels: _Optional[_Mapping[str, str]] = ..., compensated: _Optional[bool] = ...) -> None: ...

class WorkflowInfo(_message.Message):
    __slots__ = ("name", "version", "description", "durable", "steps", "input_schema_json", "result_schema_json")
    NAME_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    DURABLE_FIELD_NUMBER: _ClassVar[int]
    STEPS_FIELD_NUMBER: _ClassVar[int]
    INPUT_SCHEMA_JSON_FIELD_NUMBER: _ClassVar[int]
    RESULT_SCHEMA_JSON_FIELD_NUMBER: _ClassVar[int]
    name: str
    version: int
    description: str
    durable: bool
    steps: _containers.RepeatedCompositeFieldContainer[WorkflowStep]
    input_schema_json: str
    result_schema_json: str
    def __init__(self, name: _Optional[str] = ..., version: _Optional[int] = ..., description: _Optional[str] = ..., durable: _Optional[bool] = ..., steps: _Optional[_Iterable[_Union[WorkflowStep, _Mapping]]] = ..., input_schema_json: _Optional[str] = ..., result_schema_json: _Optional[str] = ...) -> None: ...

class DescribeWorkflowRequest(_message.Message):
    __slots__ = ("name", "version")
    NAME_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    name: str
    version: int
    def __init__(self, name: _Optional[str] = ..., version: _Optional[int] = ...) -> None: ...

class ListWorkflowsResponse(_message.Message):
    __slots__ = ("workflows",)
    WORKFLOWS_FIELD_NUMBER: _ClassVar[int]
    workflows: _containers.RepeatedCompositeFieldContainer[WorkflowInfo]
    def __init__(self, workflows: _Optional[_Iterable[_Union[WorkflowInfo, _Mapping]]] = ...) -> None: ...

class SwitchoverRequest(_message.Message):
    __slots__ = ("to",)
    TO_FIELD_NUMBER: _ClassVar[int]
    to: str
    def __init__(self, to: _Optional[str] = ...) -> None: ...

class SwitchoverResponse(_message.Message):
    __slots__ = ("from_node", "to_node", "last_event_id", "sentence")
    FROM_NODE_FIELD_NUMBER: _ClassVar[int]
    TO_NODE_FIELD_NUMBER: _ClassVar[int]
    LAST_EVENT_ID_FIELD_NUMBER: _ClassVar[int]
    SENTENCE_FIELD_NUMBER: _ClassVar[int]
    from_node: str
    to_node: str
    last_event_id: int
    sentence: str
    def __init__(self, from_node: _Optional[str] = ..., to_node: _Optional[str] = ..., last_event_id: _Optional[int] = ..., sentence: _Optional[str] = ...) -> None: ...

class GetHistoryRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class TermInfo(_message.Message):
    __slots__ = ("term", "first_event_id", "node_id", "address", "started_ms", "began", "previous")
    TERM_FIELD_NUMBER: _ClassVar[int]
    FIRST_EVENT_ID_FIELD_NUMBER: _ClassVar[int]
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    STARTED_MS_FIELD_NUMBER: _ClassVar[int]
    BEGAN_FIELD_NUMBER: _ClassVar[int]
    PREVIOUS_FIELD_NUMBER: _ClassVar[int]
    term: int
    first_event_id: int
    node_id: str
    address: str
    started_ms: int
    began: str
    previous: str
    def __init__(self, term: _Optional[int] = ..., first_event_id: _Optional[int] = ..., node_id: _Optional[str] = ..., address: _Optional[str] = ..., started_ms: _Optional[int] = ..., began: _Optional[str] = ..., previous: _Optional[str] = ...) -> None: ...

class GetHistoryResponse(_message.Message):
    __slots__ = ("terms",)
    TERMS_FIELD_NUMBER: _ClassVar[int]
    terms: _containers.RepeatedCompositeFieldContainer[TermInfo]
    def __init__(self, terms: _Optional[_Iterable[_Union[TermInfo, _Mapping]]] = ...) -> None: ...

class SubmitTaskRequest(_message.Message):
    __slots__ = ("workflow", "input_json", "idempotency_key", "version", "priority")
    WORKFLOW_FIELD_NUMBER: _ClassVar[int]
    INPUT_JSON_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    workflow: str
    input_json: str
    idempotency_key: str
    version: int
    priority: int
    def __init__(self, workflow: _Optional[str] = ..., input_json: _Optional[str] = ..., idempotency_key: _Optional[str] = ..., version: _Optional[int] = ..., priority: _Optional[int] = ...) -> None: ...

class SubmitTasksRequest(_message.Message):
    __slots__ = ("tasks",)
    TASKS_FIELD_NUMBER: _ClassVar[int]
    tasks: _containers.RepeatedCompositeFieldContainer[SubmitTaskRequest]
    def __init__(self, tasks: _Optional[_Iterable[_Union[SubmitTaskRequest, _Mapping]]] = ...) -> None: ...

class SubmitTasksResponse(_message.Message):
    __slots__ = ("tasks",)
    TASKS_FIELD_NUMBER: _ClassVar[int]
    tasks: _containers.RepeatedCompositeFieldContainer[SubmitTaskResponse]
    def __init__(self, tasks: _Optional[_Iterable[_Union[SubmitTaskResponse, _Mapping]]] = ...) -> None: ...

class SubmitShellRequest(_message.Message):
    __slots__ = ("dag_json", "idempotency_key")
    DAG_JSON_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    dag_json: str
    idempotency_key: str
    def __init__(self, dag_json: _Optional[str] = ..., idempotency_key: _Optional[str] = ...) -> None: ...

class SubmitTaskResponse(_message.Message):
    __slots__ = ("task_id", "created", "event_id")
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    CREATED_FIELD_NUMBER: _ClassVar[int]
    EVENT_ID_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    created: bool
    event_id: int
    def __init__(self, task_id: _Optional[str] = ..., created: _Optional[bool] = ..., event_id: _Optional[int] = ...) -> None: ...

class GetTaskRequest(_message.Message):
    __slots__ = ("task_id", "as_of_event_id")
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    AS_OF_EVENT_ID_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    as_of_event_id: int
    def __init__(self, task_id: _Optional[str] = ..., as_of_event_id: _Optional[int] = ...) -> None: ...

class Override(_message.Message):
    __slots__ = ("action", "operator", "reason", "event_id", "shown_as")
    ACTION_FIELD_NUMBER: _ClassVar[int]
    OPERATOR_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    EVENT_ID_FIELD_NUMBER: _ClassVar[int]
    SHOWN_AS_FIELD_NUMBER: _ClassVar[int]
    action: str
    operator: str
    reason: str
    event_id: int
    shown_as: str
    def __init__(self, action: _Optional[str] = ..., operator: _Optional[str] = ..., reason: _Optional[str] = ..., event_id: _Optional[int] = ..., shown_as: _Optional[str] = ...) -> None: ...

class Step(_message.Message):
    __slots__ = ("name", "state", "attempt", "error", "result_json", "started_ms", "finished_ms", "after", "final", "lost", "compensations", "compensation_error", "owed", "override", "anomaly", "losses")
    NAME_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    RESULT_JSON_FIELD_NUMBER: _ClassVar[int]
    STARTED_MS_FIELD_NUMBER: _ClassVar[int]
    FINISHED_MS_FIELD_NUMBER: _ClassVar[int]
    AFTER_FIELD_NUMBER: _ClassVar[int]
    FINAL_FIELD_NUMBER: _ClassVar[int]
    LOST_FIELD_NUMBER: _ClassVar[int]
    COMPENSATIONS_FIELD_NUMBER: _ClassVar[int]
    COMPENSATION_ERROR_FIELD_NUMBER: _ClassVar[int]
    OWED_FIELD_NUMBER: _ClassVar[int]
    OVERRIDE_FIELD_NUMBER: _ClassVar[int]
    ANOMALY_FIELD_NUMBER: _ClassVar[int]
    LOSSES_FIELD_NUMBER: _ClassVar[int]
    name: str
    state: StepState
    attempt: int
    error: str
    result_json: str
    started_ms: int
    finished_ms: int
    after: _containers.RepeatedScalarFieldContainer[str]
    final: bool
    lost: bool
    compensations: int
    compensation_error: str
    owed: bool
    override: Override
    anomaly: str
    losses: int
    def __init__(self, name: _Optional[str] = ..., state: _Optional[_Union[StepState, str]] = ..., attempt: _Optional[int] = ..., error: _Optional[str] = ..., result_json: _Optional[str] = ..., started_ms: _Optional[int] = ..., finished_ms: _Optional[int] = ..., after: _Optional[_Iterable[str]] = ..., final: _Optional[bool] = ..., lost: _Optional[bool] = ..., compensations: _Optional[int] = ..., compensation_error: _Optional[str] = ..., owed: _Optional[bool] = ..., override: _Optional[_Union[Override, _Mapping]] = ..., anomaly: _Optional[str] = ..., losses: _Optional[int] = ...) -> None: ...

class Task(_message.Message):
    __slots__ = ("task_id", "workflow", "version", "state", "input_json", "steps", "submitted_ms", "updated_ms", "first_event_id", "last_event_id", "idempotency_key", "cancelled", "anomalies", "as_of_event_id", "durable_json", "parent_json", "blocked", "schedule_json", "waiting", "priority", "held_json")
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    WORKFLOW_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    INPUT_JSON_FIELD_NUMBER: _ClassVar[int]
    STEPS_FIELD_NUMBER: _ClassVar[int]
    SUBMITTED_MS_FIELD_NUMBER: _ClassVar[int]
    UPDATED_MS_FIELD_NUMBER: _ClassVar[int]
    FIRST_EVENT_ID_FIELD_NUMBER: _ClassVar[int]
    LAST_EVENT_ID_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    CANCELLED_FIELD_NUMBER: _ClassVar[int]
    ANOMALIES_FIELD_NUMBER: _ClassVar[int]
    AS_OF_EVENT_ID_FIELD_NUMBER: _ClassVar[int]
    DURABLE_JSON_FIELD_NUMBER: _ClassVar[int]
    PARENT_JSON_FIELD_NUMBER: _ClassVar[int]
    BLOCKED_FIELD_NUMBER: _ClassVar[int]
    SCHEDULE_JSON_FIELD_NUMBER: _ClassVar[int]
    WAITING_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    HELD_JSON_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    workflow: str
    version: int
    state: TaskState
    input_json: str
    steps: _containers.RepeatedCompositeFieldContainer[Step]
    submitted_ms: int
    updated_ms: int
    first_event_id: int
    last_event_id: int
    idempotency_key: str
    cancelled: Override
    anomalies: _containers.RepeatedScalarFieldContainer[str]
    as_of_event_id: int
    durable_json: str
    parent_json: str
    blocked: str
    schedule_json: str
    waiting: str
    priority: int
    held_json: str
    def __init__(self, task_id: _Optional[str] = ..., workflow: _Optional[str] = ..., version: _Optional[int] = ..., state: _Optional[_Union[TaskState, str]] = ..., input_json: _Optional[str] = ..., steps: _Optional[_Iterable[_Union[Step, _Mapping]]] = ..., submitted_ms: _Optional[int] = ..., updated_ms: _Optional[int] = ..., first_event_id: _Optional[int] = ..., last_event_id: _Optional[int] = ..., idempotency_key: _Optional[str] = ..., cancelled: _Optional[_Union[Override, _Mapping]] = ..., anomalies: _Optional[_Iterable[str]] = ..., as_of_event_id: _Optional[int] = ..., durable_json: _Optional[str] = ..., parent_json: _Optional[str] = ..., blocked: _Optional[str] = ..., schedule_json: _Optional[str] = ..., waiting: _Optional[str] = ..., priority: _Optional[int] = ..., held_json: _Optional[str] = ...) -> None: ...

class ListTasksRequest(_message.Message):
    __slots__ = ("state", "workflow", "page_size", "page_token", "schedule", "held")
    STATE_FIELD_NUMBER: _ClassVar[int]
    WORKFLOW_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    SCHEDULE_FIELD_NUMBER: _ClassVar[int]
    HELD_FIELD_NUMBER: _ClassVar[int]
    state: TaskState
    workflow: str
    page_size: int
    page_token: str
    schedule: str
    held: bool
    def __init__(self, state: _Optional[_Union[TaskState, str]] = ..., workflow: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ..., schedule: _Optional[str] = ..., held: _Optional[bool] = ...) -> None: ...

class TaskSummary(_message.Message):
    __slots__ = ("task_id", "workflow", "state", "submitted_ms", "updated_ms", "steps_done", "steps_total", "name")
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    WORKFLOW_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    SUBMITTED_MS_FIELD_NUMBER: _ClassVar[int]
    UPDATED_MS_FIELD_NUMBER: _ClassVar[int]
    STEPS_DONE_FIELD_NUMBER: _ClassVar[int]
    STEPS_TOTAL_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    workflow: str
    state: TaskState
    submitted_ms: int
    updated_ms: int
    steps_done: int
    steps_total: int
    name: str
    def __init__(self, task_id: _Optional[str] = ..., workflow: _Optional[str] = ..., state: _Optional[_Union[TaskState, str]] = ..., submitted_ms: _Optional[int] = ..., updated_ms: _Optional[int] = ..., steps_done: _Optional[int] = ..., steps_total: _Optional[int] = ..., name: _Optional[str] = ...) -> None: ...

class ListTasksResponse(_message.Message):
    __slots__ = ("tasks", "next_page_token")
    TASKS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    tasks: _containers.RepeatedCompositeFieldContainer[TaskSummary]
    next_page_token: str
    def __init__(self, tasks: _Optional[_Iterable[_Union[TaskSummary, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class WatchTaskRequest(_message.Message):
    __slots__ = ("task_id",)
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    def __init__(self, task_id: _Optional[str] = ...) -> None: ...

class Event(_message.Message):
    __slots__ = ("event_id", "term", "instance_id", "task_id", "step_name", "event_type", "payload_json", "timestamp_ms", "attempt")
    EVENT_ID_FIELD_NUMBER: _ClassVar[int]
    TERM_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    STEP_NAME_FIELD_NUMBER: _ClassVar[int]
    EVENT_TYPE_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_JSON_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_MS_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    event_id: int
    term: int
    instance_id: str
    task_id: str
    step_name: str
    event_type: EventType
    payload_json: str
    timestamp_ms: int
    attempt: int
    def __init__(self, event_id: _Optional[int] = ..., term: _Optional[int] = ..., instance_id: _Optional[str] = ..., task_id: _Optional[str] = ..., step_name: _Optional[str] = ..., event_type: _Optional[_Union[EventType, str]] = ..., payload_json: _Optional[str] = ..., timestamp_ms: _Optional[int] = ..., attempt: _Optional[int] = ...) -> None: ...

class GetEventsRequest(_message.Message):
    __slots__ = ("task_id", "from_event_id", "to_event_id", "limit")
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    FROM_EVENT_ID_FIELD_NUMBER: _ClassVar[int]
    TO_EVENT_ID_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    from_event_id: int
    to_event_id: int
    limit: int
    def __init__(self, task_id: _Optional[str] = ..., from_event_id: _Optional[int] = ..., to_event_id: _Optional[int] = ..., limit: _Optional[int] = ...) -> None: ...

class GetEventsResponse(_message.Message):
    __slots__ = ("events", "next_event_id", "durable_event_id", "bucket_before", "gone_before")
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    NEXT_EVENT_ID_FIELD_NUMBER: _ClassVar[int]
    DURABLE_EVENT_ID_FIELD_NUMBER: _ClassVar[int]
    BUCKET_BEFORE_FIELD_NUMBER: _ClassVar[int]
    GONE_BEFORE_FIELD_NUMBER: _ClassVar[int]
    events: _containers.RepeatedCompositeFieldContainer[Event]
    next_event_id: int
    durable_event_id: int
    bucket_before: int
    gone_before: int
    def __init__(self, events: _Optional[_Iterable[_Union[Event, _Mapping]]] = ..., next_event_id: _Optional[int] = ..., durable_event_id: _Optional[int] = ..., bucket_before: _Optional[int] = ..., gone_before: _Optional[int] = ...) -> None: ...

class GetTasksRequest(_message.Message):
    __slots__ = ("task_ids",)
    TASK_IDS_FIELD_NUMBER: _ClassVar[int]
    task_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, task_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class TaskWithEvents(_message.Message):
    __slots__ = ("task_id", "found", "task", "events", "next_event_id", "bucket_before", "gone_before")
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    FOUND_FIELD_NUMBER: _ClassVar[int]
    TASK_FIELD_NUMBER: _ClassVar[int]
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    NEXT_EVENT_ID_FIELD_NUMBER: _ClassVar[int]
    BUCKET_BEFORE_FIELD_NUMBER: _ClassVar[int]
    GONE_BEFORE_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    found: bool
    task: Task
    events: _containers.RepeatedCompositeFieldContainer[Event]
    next_event_id: int
    bucket_before: int
    gone_before: int
    def __init__(self, task_id: _Optional[str] = ..., found: _Optional[bool] = ..., task: _Optional[_Union[Task, _Mapping]] = ..., events: _Optional[_Iterable[_Union[Event, _Mapping]]] = ..., next_event_id: _Optional[int] = ..., bucket_before: _Optional[int] = ..., gone_before: _Optional[int] = ...) -> None: ...

class GetTasksResponse(_message.Message):
    __slots__ = ("tasks",)
    TASKS_FIELD_NUMBER: _ClassVar[int]
    tasks: _containers.RepeatedCompositeFieldContainer[TaskWithEvents]
    def __init__(self, tasks: _Optional[_Iterable[_Union[TaskWithEvents, _Mapping]]] = ...) -> None: ...

class StepActionRequest(_message.Message):
    __slots__ = ("task_id", "step", "operator", "reason")
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    OPERATOR_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    step: str
    operator: str
    reason: str
    def __init__(self, task_id: _Optional[str] = ..., step: _Optional[str] = ..., operator: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class CancelTaskRequest(_message.Message):
    __slots__ = ("task_id", "operator", "reason")
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    OPERATOR_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    operator: str
    reason: str
    def __init__(self, task_id: _Optional[str] = ..., operator: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class RedactTaskRequest(_message.Message):
    __slots__ = ("task_id", "operator", "reason")
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    OPERATOR_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    operator: str
    reason: str
    def __init__(self, task_id: _Optional[str] = ..., operator: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class HoldTaskRequest(_message.Message):
    __slots__ = ("task_id", "reason")
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    reason: str
    def __init__(self, task_id: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class ActionResponse(_message.Message):
    __slots__ = ("event_id",)
    EVENT_ID_FIELD_NUMBER: _ClassVar[int]
    event_id: int
    def __init__(self, event_id: _Optional[int] = ...) -> None: ...

class SendEventRequest(_message.Message):
    __slots__ = ("key", "payload_json", "idempotency_key")
    KEY_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_JSON_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    key: str
    payload_json: str
    idempotency_key: str
    def __init__(self, key: _Optional[str] = ..., payload_json: _Optional[str] = ..., idempotency_key: _Optional[str] = ...) -> None: ...

class SendEventResponse(_message.Message):
    __slots__ = ("event_id", "created")
    EVENT_ID_FIELD_NUMBER: _ClassVar[int]
    CREATED_FIELD_NUMBER: _ClassVar[int]
    event_id: int
    created: bool
    def __init__(self, event_id: _Optional[int] = ..., created: _Optional[bool] = ...) -> None: ...

class GetStatusRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class LeaderInfo(_message.Message):
    __slots__ = ("node_id", "address", "term")
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    TERM_FIELD_NUMBER: _ClassVar[int]
    node_id: str
    address: str
    term: int
    def __init__(self, node_id: _Optional[str] = ..., address: _Optional[str] = ..., term: _Optional[int] = ...) -> None: ...

class LeaseInfo(_message.Message):
    __slots__ = ("ttl_s", "remaining_s")
    TTL_S_FIELD_NUMBER: _ClassVar[int]
    REMAINING_S_FIELD_NUMBER: _ClassVar[int]
    ttl_s: float
    remaining_s: float
    def __init__(self, ttl_s: _Optional[float] = ..., remaining_s: _Optional[float] = ...) -> None: ...

class Member(_message.Message):
    __slots__ = ("node_id", "role", "address", "last_event_id", "term", "lag_events", "lag_ms", "connected", "synchronous", "ack_p50_ms", "ack_p99_ms")
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    LAST_EVENT_ID_FIELD_NUMBER: _ClassVar[int]
    TERM_FIELD_NUMBER: _ClassVar[int]
    LAG_EVENTS_FIELD_NUMBER: _ClassVar[int]
    LAG_MS_FIELD_NUMBER: _ClassVar[int]
    CONNECTED_FIELD_NUMBER: _ClassVar[int]
    SYNCHRONOUS_FIELD_NUMBER: _ClassVar[int]
    ACK_P50_MS_FIELD_NUMBER: _ClassVar[int]
    ACK_P99_MS_FIELD_NUMBER: _ClassVar[int]
    node_id: str
    role: str
    address: str
    last_event_id: int
    term: int
    lag_events: int
    lag_ms: float
    connected: bool
    synchronous: bool
    ack_p50_ms: float
    ack_p99_ms: float
    def __init__(self, node_id: _Optional[str] = ..., role: _Optional[str] = ..., address: _Optional[str] = ..., last_event_id: _Optional[int] = ..., term: _Optional[int] = ..., lag_events: _Optional[int] = ..., lag_ms: _Optional[float] = ..., connected: _Optional[bool] = ..., synchronous: _Optional[bool] = ..., ack_p50_ms: _Optional[float] = ..., ack_p99_ms: _Optional[float] = ...) -> None: ...

class ClusterStatus(_message.Message):
    __slots__ = ("node_id", "role", "term", "leader", "lease", "members", "last_event_id", "applied_event_id", "recovery", "running_steps", "active_tasks", "security", "notice", "workers", "execution", "terms_started")
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    TERM_FIELD_NUMBER: _ClassVar[int]
    LEADER_FIELD_NUMBER: _ClassVar[int]
    LEASE_FIELD_NUMBER: _ClassVar[int]
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    LAST_EVENT_ID_FIELD_NUMBER: _ClassVar[int]
    APPLIED_EVENT_ID_FIELD_NUMBER: _ClassVar[int]
    RECOVERY_FIELD_NUMBER: _ClassVar[int]
    RUNNING_STEPS_FIELD_NUMBER: _ClassVar[int]
    ACTIVE_TASKS_FIELD_NUMBER: _ClassVar[int]
    SECURITY_FIELD_NUMBER: _ClassVar[int]
    NOTICE_FIELD_NUMBER: _ClassVar[int]
    WORKERS_FIELD_NUMBER: _ClassVar[int]
    EXECUTION_FIELD_NUMBER: _ClassVar[int]
    TERMS_STARTED_FIELD_NUMBER: _ClassVar[int]
    node_id: str
    role: str
    term: int
    leader: LeaderInfo
    lease: LeaseInfo
    members: _containers.RepeatedCompositeFieldContainer[Member]
    last_event_id: int
    applied_event_id: int
    recovery: str
    running_steps: int
    active_tasks: int
    security: str
    notice: str
    workers: _containers.RepeatedCompositeFieldContainer[WorkerInfo]
    execution: str
    terms_started: int
    def __init__(self, node_id: _Optional[str] = ..., role: _Optional[str] = ..., term: _Optional[int] = ..., leader: _Optional[_Union[LeaderInfo, _Mapping]] = ..., lease: _Optional[_Union[LeaseInfo, _Mapping]] = ..., members: _Optional[_Iterable[_Union[Member, _Mapping]]] = ..., last_event_id: _Optional[int] = ..., applied_event_id: _Optional[int] = ..., recovery: _Optional[str] = ..., running_steps: _Optional[int] = ..., active_tasks: _Optional[int] = ..., security: _Optional[str] = ..., notice: _Optional[str] = ..., workers: _Optional[_Iterable[_Union[WorkerInfo, _Mapping]]] = ..., execution: _Optional[str] = ..., terms_started: _Optional[int] = ...) -> None: ...

class WorkerInfo(_message.Message):
    __slots__ = ("name", "address", "slots", "slots_used", "workflows", "labels", "last_heartbeat_s_ago", "attempts_running", "connected_s_ago", "version")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    NAME_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    SLOTS_FIELD_NUMBER: _ClassVar[int]
    SLOTS_USED_FIELD_NUMBER: _ClassVar[int]
    WORKFLOWS_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    LAST_HEARTBEAT_S_AGO_FIELD_NUMBER: _ClassVar[int]
    ATTEMPTS_RUNNING_FIELD_NUMBER: _ClassVar[int]
    CONNECTED_S_AGO_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    name: str
    address: str
    slots: int
    slots_used: int
    workflows: _containers.RepeatedScalarFieldContainer[str]
    labels: _containers.ScalarMap[str, str]
    last_heartbeat_s_ago: float
    attempts_running: int
    connected_s_ago: float
    version: str
    def __init__(self, name: _Optional[str] = ..., address: _Optional[str] = ..., slots: _Optional[int] = ..., slots_used: _Optional[int] = ..., workflows: _Optional[_Iterable[str]] = ..., labels: _Optional[_Mapping[str, str]] = ..., last_heartbeat_s_ago: _Optional[float] = ..., attempts_running: _Optional[int] = ..., connected_s_ago: _Optional[float] = ..., version: _Optional[str] = ...) -> None: ...
