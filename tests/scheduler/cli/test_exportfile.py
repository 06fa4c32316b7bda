"""The export file's pure rules (scheduler/cli/_exportfile.py): its order, where an
interrupted export resumes, values by reference, and refused times."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from apollo11.scheduler.cli._exportfile import (
    ExportError,
    OrderKey,
    by_reference,
    parse_time,
    resume_point,
    selected,
    task_line,
)
from apollo11.scheduler.client import EventView, TaskSummaryView, TaskView


def _summary(task_id: str, ms: int) -> TaskSummaryView:
    return TaskSummaryView(task_id, "echo", "SUCCEEDED", ms, ms, 1, 1)


def _task(task_id: str, ms: int, value: object, *, as_of: int = 9) -> TaskView:
    return TaskView(
        task_id, "echo", 1, "SUCCEEDED", {"text": value}, (), ms, ms, 1, 3, None, None, (),
        as_of,
    )  # fmt: skip


def test_tasks_are_in_submission_order_then_by_id_within_the_window() -> None:
    rows = [_summary("b", 20), _summary("a", 20), _summary("c", 10), _summary("d", 30)]
    assert [r.task_id for r in selected(rows, None, None)] == ["c", "a", "b", "d"]
    assert [r.task_id for r in selected(rows, 20, 30)] == ["a", "b"]  # since in, until out


def test_a_line_does_not_depend_on_when_or_where_it_was_read() -> None:
    ev = EventView(1, 1, "n1", "t1", "", "TASK_SUBMITTED", {"input": {"text": "x"}}, 5, 0)
    one, _ = task_line(_task("t1", 5, "x", as_of=9), [ev], 1000)
    two, _ = task_line(_task("t1", 5, "x", as_of=4000), [ev], 1000)
    assert one == two and one.endswith(b"\n") and one.count(b"\n") == 1
    body = orjson.loads(one)
    assert body["events"][0]["payload"] == {"input": {"text": "x"}}
    assert "as_of_event_id" not in body and "task_id" not in body["events"][0]


def test_a_value_over_the_limit_goes_by_reference_named_by_its_sha256() -> None:
    refs: dict[str, bytes] = {}
    small = by_reference("abc", 10, refs)
    big = by_reference("x" * 100, 10, refs)
    assert small == "abc" and len(refs) == 1
    (name, data) = next(iter(refs.items()))
    assert big == {"$ref": name, "sha256": name[7:-5], "bytes": 102}
    assert orjson.loads(data) == "x" * 100
    ev = EventView(1, 1, "n1", "t1", "", "TASK_SUBMITTED", {"input": {"text": "x" * 100}}, 5, 0)
    line, values = task_line(_task("t1", 5, "x" * 100), [ev], 50)
    body = orjson.loads(line)
    assert body["input"]["$ref"] == body["events"][0]["payload"]["input"]["$ref"]
    assert len(values) == 1  # the same value: one file


def test_an_export_resumes_after_its_last_complete_line(tmp_path: Path) -> None:
    out = tmp_path / "x.jsonl"
    assert resume_point(str(out)) == (0, None)
    a, _ = task_line(_task("a", 10, "1"), [], 100)
    b, _ = task_line(_task("b", 10, "2"), [], 100)
    out.write_bytes(a + b + b'{"task_id": "c", "subm')  # cut in the middle of a line
    at = resume_point(str(out))
    assert at == (len(a) + len(b), OrderKey(10, "b"))
    out.write_bytes(b'{"task_id": "c", "subm')
    assert resume_point(str(out)) == (0, None)


def test_a_file_that_is_not_an_export_is_refused(tmp_path: Path) -> None:
    out = tmp_path / "notes.txt"
    out.write_bytes(b"dear diary\n")
    with pytest.raises(ExportError, match=r"--output .*notes.txt.*not an exported task"):
        resume_point(str(out))


def test_times_are_iso_8601_and_a_bad_one_names_its_flag() -> None:
    assert parse_time("--since", "1970-01-01T00:00:01Z") == 1000
    assert parse_time("--since", "1970-01-01T00:00:01") == 1000  # bare: UTC
    assert parse_time("--until", None) is None
    with pytest.raises(ExportError, match="--until 'yesterday' is not a time"):
        parse_time("--until", "yesterday")


def test_a_line_whose_oldest_events_are_gone_says_from_which_event_it_holds_them() -> None:
    ev = EventView(40, 1, "n1", "t1", "s", "STEP_SUCCEEDED", {}, 5, 1)
    note = "events before 37 are no longer on this node's disk and no --archive-url is set"
    line, _ = task_line(_task("t1", 5, "x"), [ev], 1000, gone_before=37, gone_note=note)
    body = orjson.loads(line)
    assert body["events_from"] == 37 and body["incomplete"] == note
    whole, _ = task_line(_task("t1", 5, "x"), [ev], 1000)
    assert b"events_from" not in whole and b"incomplete" not in whole
