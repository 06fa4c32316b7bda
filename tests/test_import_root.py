"""One import root: the distribution installs `apollo11` and nothing else at the top.

`scheduler` and `lease` are names of other PyPI distributions and common names of an
application's own modules; installing Apollo-11 must neither shadow nor be shadowed.
"""

from importlib import metadata


def test_the_distribution_installs_one_top_level_name() -> None:
    top = (metadata.distribution("apollo11").read_text("top_level.txt") or "").split()
    assert top == ["apollo11"]


def test_every_part_imports_under_the_root() -> None:
    import apollo11.lease
    import apollo11.replicator
    import apollo11.scheduler
    import apollo11.v1

    for part in (apollo11.lease, apollo11.replicator, apollo11.scheduler, apollo11.v1):
        assert part.__name__.startswith("apollo11.")
