"""The pytest plugin of `apollo11.testing` (a `pytest11` entry point): the fixture
`apollo_env`, a running `WorkflowEnvironment` for one test.

    async def test_approval(apollo_env):
        h = await apollo_env.submit(approval, {"id": "A1"})   # loaded as it is submitted
        ...

pytest loads this module in every run of a project that has apollo11 installed,
so it imports nothing of the engine until a test asks for the fixture. The
fixture is async: it needs pytest-asyncio (`asyncio_mode = "auto"`, or mark the
test `@pytest.mark.asyncio`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from apollo11.scheduler.testing import WorkflowEnvironment


async def _env(tmp_path: Path) -> AsyncIterator[WorkflowEnvironment]:
    """A running WorkflowEnvironment on the test's tmp_path, closed after the test."""
    from apollo11.scheduler.testing import WorkflowEnvironment

    async with WorkflowEnvironment(directory=tmp_path / "apollo11") as env:
        yield env


def _fixture() -> Any:
    try:
        import pytest_asyncio
    except ImportError:  # a project without it: say so when a test asks for the fixture

        @pytest.fixture(name="apollo_env")
        def missing() -> Any:
            raise pytest.UsageError(
                "the apollo_env fixture is async: install pytest-asyncio "
                "(pip install pytest-asyncio) and run the test under it"
            )

        return missing
    return pytest_asyncio.fixture(_env, name="apollo_env")


apollo_env = _fixture()
