"""Which cluster a data directory belongs to: the decision at start, without etcd."""

from __future__ import annotations

from pathlib import Path

import pytest

from apollo11.scheduler import identity
from apollo11.scheduler.identity import ForeignClusterError, Identity


def test_an_empty_data_dir_adopts_the_stored_id() -> None:
    ident, sentence = identity.decide(
        data_dir="/d", cluster="dev", local=None, stored="e1", has_history=False
    )
    assert ident == Identity("e1", "dev") and "joined" in sentence


def test_a_log_without_an_id_is_adopted_with_a_warning() -> None:
    ident, sentence = identity.decide(
        data_dir="/d", cluster="dev", local=None, stored="e1", has_history=True
    )
    assert ident.cluster_id == "e1"
    assert "before cluster ids existed" in sentence and "stop this node" in sentence


def test_another_clusters_data_dir_is_refused_naming_both_ids_and_what_to_do() -> None:
    with pytest.raises(ForeignClusterError) as e:
        identity.decide(
            data_dir="/d",
            cluster="dev",
            local=Identity("d1", "prod"),
            stored="e1",
            has_history=True,
        )
    text = str(e.value)
    assert "d1" in text and "e1" in text and "'prod'" in text
    assert "wipe its data directory" in text and "--etcd/--cluster" in text


def test_the_id_file_round_trips_and_a_garbled_one_is_an_error(tmp_path: Path) -> None:
    assert identity.read(tmp_path) is None
    identity.write(tmp_path, Identity("abc", "dev"))
    assert identity.read(tmp_path) == Identity("abc", "dev")
    (tmp_path / identity.ID_FILE).write_bytes(b"{not json")
    with pytest.raises(ForeignClusterError, match="unreadable"):
        identity.read(tmp_path)
