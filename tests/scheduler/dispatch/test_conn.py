"""WorkerConn's queue: what the stream's writer sends, built in place and bounded."""

from __future__ import annotations

from apollo11.scheduler.dispatch.conn import ASSIGN_BATCH_BYTES, WorkerConn, tokens
from apollo11.scheduler.engine.executor import AttemptToken


def _conn(
    name: str = "w1", instance: str = "i1", *, packed: bool = False, columns: bool = False
) -> WorkerConn:
    return WorkerConn(
        name=name,
        instance=instance,
        slots=8,
        workflows=frozenset({("etl", 1)}),
        labels={},
        address="ipv4:127.0.0.1:1",
        version="0",
        packed_acks=packed,
        packed_assignments=columns,
    )


def _assign(conn: WorkerConn, event_id: int, input_json: bytes = b"{}") -> None:
    conn.assign(
        AttemptToken(3, event_id),
        len(input_json),
        task_id=f"t{event_id}",
        step="collect",
        attempt=1,
        workflow="etl",
        version=1,
        input_json=input_json,
        results_json=b"{}",
        timeout_s=30.0,
        node_id="n1",
    )


def test_assignments_go_in_one_message_with_their_tokens() -> None:
    conn = _conn()
    for i in range(1, 4):
        _assign(conn, 100 + i)
    out, queued = conn.drain()
    assert len(out) == 1 and len(queued) == 3
    got = [(a.task_id, a.token.term, a.token.event_id) for a in out[0].assign.assignments]
    assert got == [("t101", 3, 101), ("t102", 3, 102), ("t103", 3, 103)]
    assert conn.drain() == ([], [])  # sent once
    assert conn.assigned == 3


def test_a_batch_of_big_inputs_is_split_under_the_bound() -> None:
    conn = _conn()
    big = b'"' + b"x" * (300 * 1024) + b'"'
    for i in range(10):  # 3 MB in all
        _assign(conn, i + 1, big)
    out, queued = conn.drain()
    assert len(queued) == 10
    assert [len(m.assign.assignments) for m in out] == [3, 3, 3, 1]
    assert all(m.ByteSize() <= ASSIGN_BATCH_BYTES for m in out)
    # a single assignment over the bound still goes, alone
    _assign(conn, 99, b'"' + b"y" * ASSIGN_BATCH_BYTES + b'"')
    _assign(conn, 100)
    out, _ = conn.drain()
    assert [len(m.assign.assignments) for m in out] == [1, 1]


def test_acks_go_together_and_a_new_stream_takes_over_what_was_not_sent() -> None:
    old = _conn()
    _assign(old, 7)
    old.ack(AttemptToken(3, 5), True)
    new = _conn()
    new.ack(AttemptToken(3, 6), False, "not taken: cancelled")
    assert new.take_over(old) == {AttemptToken(3, 7)}
    assert old.drain() == ([], [])
    out, queued = new.drain()
    assert len(queued) == 1 and [m.WhichOneof("body") for m in out] == ["assign", "acks"]
    acks = [(a.token.event_id, a.accepted, a.reason) for a in out[1].acks.acks]
    assert acks == [(5, True, ""), (6, False, "not taken: cancelled")]


def test_a_worker_that_reads_packed_acks_gets_accepted_ones_as_event_ids() -> None:
    conn = _conn(packed=True)
    for event_id in (11, 12, 13):
        conn.ack(AttemptToken(3, event_id), True)
    conn.ack(AttemptToken(3, 14), False, "not taken: timed out")  # a refusal says why
    conn.ack(AttemptToken(2, 9), True)  # an attempt of an earlier term, adopted
    (m,), _ = conn.drain()
    assert m.acks.accepted_term == 3 and list(m.acks.accepted_event_ids) == [11, 12, 13]
    whole = [(a.token.term, a.token.event_id, a.accepted, a.reason) for a in m.acks.acks]
    assert whole == [(3, 14, False, "not taken: timed out"), (2, 9, True, "")]
    assert conn.drain() == ([], [])
    # a term of its own once the packed ones are sent
    conn.ack(AttemptToken(2, 10), True)
    (m,), _ = conn.drain()
    assert m.acks.accepted_term == 2 and list(m.acks.accepted_event_ids) == [10]


async def test_a_packed_ack_wakes_the_writer_and_moves_to_a_new_stream() -> None:
    old = _conn(packed=True)
    old.ack(AttemptToken(3, 5), True)
    await old.work()  # returns at once: something to send
    new = _conn(packed=True)
    new.ack(AttemptToken(4, 6), True)
    new.take_over(old)
    assert old.drain() == ([], [])
    (m,), _ = new.drain()
    packed = (m.acks.accepted_term, list(m.acks.accepted_event_ids))
    whole = [(a.token.term, a.token.event_id, a.accepted) for a in m.acks.acks]
    assert packed == (4, [6]) and whole == [(3, 5, True)]


def test_a_worker_that_does_not_read_them_gets_a_message_each() -> None:
    conn = _conn()
    conn.ack(AttemptToken(3, 11), True)
    (m,), _ = conn.drain()
    assert not m.acks.accepted_event_ids
    assert [(a.token.event_id, a.accepted) for a in m.acks.acks] == [(11, True)]


def _plain(conn: WorkerConn, event_id: int, input_json: bytes = b"{}") -> None:
    conn.assign_plain(
        AttemptToken(3, event_id),
        len(input_json),
        "n1",
        f"t{event_id}",
        "collect",
        1,
        "etl",
        1,
        input_json,
        b"{}",
        30.0,
    )


def test_plain_assignments_go_in_columns_to_a_worker_that_reads_them() -> None:
    conn = _conn(columns=True)
    _plain(conn, 101)
    _assign(conn, 102)  # a whole one (a durable main's, a traced one) beside them
    _plain(conn, 103, b'{"x": 1}')
    (m,), queued = conn.drain()
    a = m.assign
    assert len(queued) == 3 and conn.assigned == 3
    assert [x.task_id for x in a.assignments] == ["t102"]
    assert a.node_id == "n1"
    assert list(a.terms) == [3, 3] and list(a.event_ids) == [101, 103]
    assert list(a.task_ids) == ["t101", "t103"] and list(a.steps) == ["collect"] * 2
    assert list(a.attempts) == [1, 1] and list(a.workflows) == ["etl"] * 2
    assert list(a.versions) == [1, 1] and list(a.inputs_json) == [b"{}", b'{"x": 1}']
    assert list(a.results_json) == [b"{}", b"{}"] and list(a.timeouts_s) == [30.0, 30.0]
    assert sorted(t.event_id for t in tokens(a)) == [101, 102, 103]
    assert conn.drain() == ([], [])


def test_columns_are_split_under_the_bound_and_move_to_a_new_stream() -> None:
    conn = _conn(columns=True)
    big = b'"' + b"x" * (300 * 1024) + b'"'
    for i in range(7):
        _plain(conn, i + 1, big)
    new = _conn(columns=True)
    _plain(new, 50)
    assert new.take_over(conn) == {AttemptToken(3, i) for i in [*range(1, 8), 50]}
    out, queued = new.drain()
    assert len(queued) == 8
    assert [list(m.assign.event_ids) for m in out] == [[1, 2, 3], [4, 5, 6], [7], [50]]
    assert all(m.ByteSize() <= ASSIGN_BATCH_BYTES for m in out)


def test_a_worker_that_does_not_read_columns_gets_a_message_each() -> None:
    conn = _conn()
    _plain(conn, 7)
    (m,), _ = conn.drain()
    (a,) = m.assign.assignments
    assert (a.token.event_id, a.task_id, a.node_id, a.timeout_s) == (7, "t7", "n1", 30.0)
    assert not m.assign.event_ids


def test_a_new_stream_fills_the_old_ones_last_message_only_up_to_the_bound() -> None:
    """A new stream (always empty when it takes over) goes on filling the old one's
    last message: it counts what that message holds already."""
    big = b'"' + b"x" * (300 * 1024) + b'"'
    for columns in (False, True):
        old = _conn(columns=columns)
        for i in range(3):
            _plain(old, i + 1, big)
        new = _conn(columns=columns)
        new.take_over(old)
        for i in range(3):
            _plain(new, i + 10, big)
        out, queued = new.drain()
        assert len(queued) == 6
        assert all(m.ByteSize() <= ASSIGN_BATCH_BYTES for m in out), [m.ByteSize() for m in out]
