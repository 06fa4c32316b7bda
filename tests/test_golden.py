"""Golden logs replay to known states; a corrupted one is refused.

See tests/golden/make_golden.py for how they were made.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from apollo11.scheduler.errors import CorruptLogError
from apollo11.scheduler.store import Store, state_at

GOLDEN = Path(__file__).parent / "golden"


def _expected(root: Path, name: str = "expected.json") -> object:
    return json.loads((root / name).read_text())


def _normal(state: dict[str, object]) -> object:
    return json.loads(json.dumps(state, sort_keys=True))


@pytest.mark.parametrize("name", ["etl-happy", "eventful", "anomalous"])
def test_golden_log_replays_to_its_known_state(name: str) -> None:
    root = GOLDEN / name
    assert _normal(state_at(root).to_dict()) == _expected(root)


def test_golden_time_travel() -> None:
    root = GOLDEN / "eventful"
    state = state_at(root, until=12)
    assert state.last_event_id == 12
    assert _normal(state.to_dict()) == _expected(root, "expected-at-12.json")


def test_golden_logs_span_segments_and_terms() -> None:
    assert len(list((GOLDEN / "etl-happy" / "log").glob("*.seg"))) >= 2
    assert _expected(GOLDEN / "eventful")["terms"] == [[3, 1], [7, 11]]  # type: ignore[index]


def test_golden_anomaly_is_flagged() -> None:
    task = state_at(GOLDEN / "anomalous").to_dict()["tasks"]["a1"]
    assert task["steps"][0]["status"] == "COMPENSATED"
    assert "without a new start" in task["anomalies"][0]


def test_corrupted_golden_log_is_refused(tmp_path: Path) -> None:
    root = GOLDEN / "corrupt-sealed"
    with pytest.raises(CorruptLogError) as exc:
        state_at(root)
    assert exc.value.path.endswith("00000000000000000001.seg")
    assert exc.value.offset <= 300
    # A node refuses to start on it too (and leaves it untouched for a peer to repair).
    copy = tmp_path / "copy"
    shutil.copytree(root, copy)
    before = sorted((p.name, p.read_bytes()) for p in (copy / "log").glob("*.seg"))
    with pytest.raises(CorruptLogError):
        Store.open(copy)
    after = sorted((p.name, p.read_bytes()) for p in (copy / "log").glob("*.seg"))
    assert before == after
