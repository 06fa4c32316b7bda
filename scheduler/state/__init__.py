"""The state of every task: the model, the index, the fold, and where it is kept.

model.py      TaskState, StepState, DurableState, StepStatus: a task as replay leaves it
index.py      State: every task by id, key, event key and page; TaskStore, reindex
fold.py       apply(state, event), apply_all, replay: the log folded into a State
store.py      Store: the log and its State in step (recovery, eviction, snapshots)
snapshot.py   a State written at a log position, and read back
archive.py    finished tasks in sorted chunks, the TaskStore behind State
merger.py     a child process that merges archive chunks
scrub.py      re-reads sealed segments and chunks, reports damage
repair.py     a standby with a damaged log refilled from the primary

Import from here, not from the modules inside; the engine's pure decisions
(engine/decide.py, engine/retry.py) import state/model.py itself, which imports
no storage (pyproject.toml's contract "The pure decisions").
"""

from apollo11.scheduler.state import merger, repair, scrub
from apollo11.scheduler.state.archive import Archive, Chunk, redacted_chunk
from apollo11.scheduler.state.fold import apply, apply_all, hide_data, redactions_after, replay
from apollo11.scheduler.state.index import (
    State,
    Summary,
    TaskStore,
    held_by,
    reindex,
    summarize,
)
from apollo11.scheduler.state.merger import pids as merger_pids
from apollo11.scheduler.state.merger import warm as warm_merger
from apollo11.scheduler.state.model import (
    BUSY,
    DONE,
    DURATION_HISTORY,
    TERMINAL,
    DurableState,
    StepState,
    StepStatus,
    TaskState,
    TaskStatus,
    joined,
    outcome,
)
from apollo11.scheduler.state.repair import REPAIRING, Repair
from apollo11.scheduler.state.repair import done as repair_done
from apollo11.scheduler.state.repair import load as load_repair
from apollo11.scheduler.state.repair import set_aside as set_aside_for_repair
from apollo11.scheduler.state.schedule import OccurrenceRecord, ScheduleState, spec_dict
from apollo11.scheduler.state.scrub import Damage, Scrubber
from apollo11.scheduler.state.scrub import Targets as ScrubTargets
from apollo11.scheduler.state.snapshot import (
    SnapshotInfo,
    Snapshots,
    redacted_snapshot,
    watermark_of,
)
from apollo11.scheduler.state.store import (
    NeedsFullReplay,
    OlderHistory,
    Store,
    StoreConfig,
    TaskPage,
    paused_gc,
    state_at,
)

__all__ = [
    "BUSY",
    "DONE",
    "DURATION_HISTORY",
    "REPAIRING",
    "TERMINAL",
    "Archive",
    "Chunk",
    "Damage",
    "DurableState",
    "NeedsFullReplay",
    "OccurrenceRecord",
    "OlderHistory",
    "Repair",
    "ScheduleState",
    "ScrubTargets",
    "Scrubber",
    "SnapshotInfo",
    "Snapshots",
    "State",
    "StepState",
    "StepStatus",
    "Store",
    "StoreConfig",
    "Summary",
    "TaskPage",
    "TaskState",
    "TaskStatus",
    "TaskStore",
    "apply",
    "apply_all",
    "held_by",
    "hide_data",
    "joined",
    "load_repair",
    "merger",
    "merger_pids",
    "outcome",
    "paused_gc",
    "redacted_chunk",
    "redacted_snapshot",
    "redactions_after",
    "reindex",
    "repair",
    "repair_done",
    "replay",
    "scrub",
    "set_aside_for_repair",
    "spec_dict",
    "state_at",
    "summarize",
    "warm_merger",
    "watermark_of",
]
