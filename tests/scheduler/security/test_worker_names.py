"""Which names a worker principal may register under (scheduler/security/worker_names.py):
pure, no node."""

from __future__ import annotations

import pytest

from apollo11.scheduler.security import ANONYMOUS, Principal, Role
from apollo11.scheduler.security.worker_names import WorkerNameRefused, worker_name

ETL = Principal("etl", Role.WORKER, "token")


@pytest.mark.parametrize("asked", ["etl", "etl/host-1", "etl/a/b"])
def test_its_own_name_and_any_beneath_it(asked: str) -> None:
    assert worker_name(ETL, asked, default=False) == asked


@pytest.mark.parametrize("asked", ["w1", "etlx", "etl/", "et", "/etl", "mallory/etl"])
def test_any_other_is_refused_naming_the_name_and_the_principal(asked: str) -> None:
    with pytest.raises(WorkerNameRefused) as e:
        worker_name(ETL, asked, default=False)
    assert str(e.value).startswith(f"worker name {asked!r} is not one the principal 'etl' may use")
    assert "--name etl" in str(e.value)


def test_a_default_name_goes_beneath_the_principal() -> None:
    assert worker_name(ETL, "host-42", default=True) == "etl/host-42"
    cert = Principal("rack-7", Role.WORKER, "certificate")  # a client certificate's CN
    assert worker_name(cert, "host-42", default=True) == "rack-7/host-42"


def test_an_open_node_takes_any_name_as_asked() -> None:
    assert worker_name(ANONYMOUS, "w1", default=False) == "w1"
    assert worker_name(ANONYMOUS, "host-42", default=True) == "host-42"
