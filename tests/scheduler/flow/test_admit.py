"""admit: a start held by a debounce, a full slot or a rate, with the operator's
sentence, or admitted with the TATs to record."""

from __future__ import annotations

from datetime import UTC, datetime

from apollo11.scheduler.flow import Admit, Need, NotYet, RateNeed, SlotNeed, admit, clock

NOON = int(datetime(2024, 12, 6, 12, 0, tzinfo=UTC).timestamp() * 1000)


def tenant(tat_ms: float | None, *, burst: int = 20) -> RateNeed:
    return RateNeed("runbook/tenant", "acme", limit=10, per_ms=1000, burst=burst, tat_ms=tat_ms)


def test_nothing_needed_is_admitted() -> None:
    assert admit(Need(), NOON) == Admit({})


def test_a_full_slot_holds_until_a_holder_ends() -> None:
    need = Need(concurrency=(SlotNeed("runbook/host", "db1", max=2, occupancy=2),))
    assert admit(need, NOON) == NotYet("host=db1 is full (2/2)", "runbook/host", "db1", None)


def test_a_slot_over_its_max_says_so() -> None:
    # an operator lowered the max below what runs: those finish, nothing new starts
    need = Need(concurrency=(SlotNeed("runbook.load/warehouse", "dw1", max=2, occupancy=3),))
    hold = admit(need, NOON)
    assert isinstance(hold, NotYet) and hold.reason == "warehouse=dw1 is full (3/2)"


def test_a_slot_with_room_admits() -> None:
    need = Need(concurrency=(SlotNeed("warehouse", "dw1", max=4, occupancy=3),))
    assert admit(need, NOON) == Admit({})


def test_a_rate_admits_with_the_new_tat() -> None:
    assert admit(Need(rates=(tenant(None),)), NOON) == Admit({"runbook/tenant": NOON + 100})


def test_a_rate_holds_until_its_time_with_the_sentence() -> None:
    hold = admit(Need(rates=(tenant(NOON + 3_150),)), NOON)
    # tat - tau = NOON + 3150 - 19 * 100
    assert hold == NotYet(
        "tenant=acme is rate limited (10 per 1s, burst 20) until 12:00:01.250",
        "runbook/tenant",
        "acme",
        NOON + 1_250,
    )


def test_a_rate_without_burst_leaves_it_out_of_the_sentence() -> None:
    hold = admit(Need(rates=(tenant(NOON + 2_000, burst=1),)), NOON)
    assert isinstance(hold, NotYet)
    assert hold.reason == "tenant=acme is rate limited (10 per 1s) until 12:00:02"


def test_debounce_holds_first_with_its_time() -> None:
    need = Need(
        concurrency=(SlotNeed("runbook/host", "db1", max=1, occupancy=1),),
        not_before_ms=NOON + 5_000,
    )
    assert admit(need, NOON) == NotYet("debouncing until 12:00:05", "", "", NOON + 5_000)
    # its time come, the rest decides
    assert isinstance(admit(need, NOON + 5_000), NotYet)
    assert admit(Need(not_before_ms=NOON + 5_000), NOON + 5_000) == Admit({})


def test_a_full_slot_spends_no_rate() -> None:
    need = Need(
        concurrency=(SlotNeed("runbook/host", "db1", max=1, occupancy=1),),
        rates=(tenant(None),),
    )
    hold = admit(need, NOON)
    assert isinstance(hold, NotYet) and hold.limit_id == "runbook/host"


def test_of_two_rates_the_later_time_holds() -> None:
    other = RateNeed("api", "acme", limit=1, per_ms=60_000, burst=1, tat_ms=NOON + 30_000)
    hold = admit(Need(rates=(tenant(NOON + 3_150), other)), NOON)
    assert isinstance(hold, NotYet)
    assert (hold.limit_id, hold.until_ms) == ("api", NOON + 30_000)
    assert hold.reason == "api=acme is rate limited (1 per 1m) until 12:00:30"
    # one rate admitting and another not: no TAT is spent
    assert isinstance(admit(Need(rates=(tenant(None), other)), NOON), NotYet)


def test_two_rates_admitting_give_both_tats() -> None:
    other = RateNeed("api", "acme", limit=3, per_ms=1000, burst=1, tat_ms=None)
    decided = admit(Need(rates=(tenant(None), other)), NOON)
    assert isinstance(decided, Admit)
    assert decided.tats["runbook/tenant"] == NOON + 100
    assert decided.tats["api"] == NOON + 1000 / 3


def test_clock_adds_the_date_when_it_is_not_today() -> None:
    assert clock(NOON + 86_400_000, NOON) == "2024-12-07 12:00:00"
    assert clock(NOON + 7, NOON) == "12:00:00.007"
