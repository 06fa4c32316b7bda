"""The tasks in memory keep their ids sorted through every way a key comes and goes."""

from __future__ import annotations

import copy
import pickle

from hypothesis import given, settings
from hypothesis import strategies as st

from apollo11.scheduler.state import State, TaskState
from apollo11.scheduler.state.tasktable import TaskTable


def _task(task_id: str) -> TaskState:
    return TaskState(task_id, "etl", 1, None, {}, {})


def _below(table: TaskTable, before: str | None) -> list[str]:
    return [i for i in sorted(table, reverse=True) if before is None or i < before]


_ids = st.sampled_from([f"t{n:02d}" for n in range(30)])
_ops = st.lists(
    st.tuples(
        st.sampled_from(["set", "del", "pop", "popitem", "setdefault", "update", "ior", "clear"]),
        _ids,
    ),
    max_size=60,
)


@settings(max_examples=300, deadline=None)
@given(start=st.lists(_ids, max_size=10), ops=_ops, before=st.none() | _ids)
def test_the_ids_below_a_position_are_the_keys_sorted_whatever_was_done(
    start: list[str], ops: list[tuple[str, str]], before: str | None
) -> None:
    table = TaskTable((i, _task(i)) for i in start)
    for op, task_id in ops:
        if op == "set":
            table[task_id] = _task(task_id)
        elif op == "del" and task_id in table:
            del table[task_id]
        elif op == "pop":
            table.pop(task_id, None)
        elif op == "popitem" and table:
            table.popitem()
        elif op == "setdefault":
            table.setdefault(task_id, _task(task_id))
        elif op == "update":
            table.update({task_id: _task(task_id)})
        elif op == "ior":
            table |= {task_id: _task(task_id)}
        elif op == "clear":
            table.clear()
        assert list(table.ids_below(None)) == sorted(table, reverse=True)
    assert list(table.ids_below(before)) == _below(table, before)


def test_a_copy_or_a_pickle_keeps_its_own_ids() -> None:
    table = TaskTable((i, _task(i)) for i in ["b", "a", "c"])
    for other in (table.copy(), copy.deepcopy(table), pickle.loads(pickle.dumps(table))):
        assert isinstance(other, TaskTable)
        assert list(other.ids_below(None)) == ["c", "b", "a"]
        other["d"] = _task("d")
        assert list(other.ids_below("d")) == ["c", "b", "a"]
        assert list(table.ids_below(None)) == ["c", "b", "a"]  # the original untouched


def test_a_state_given_a_plain_dict_keeps_its_ids_sorted() -> None:
    state = State(tasks={i: _task(i) for i in ["b", "c", "a"]})
    assert isinstance(state.tasks, TaskTable)
    state.tasks.pop("b")
    assert list(state.tasks.ids_below(None)) == ["c", "a"]
