from __future__ import annotations

import os
from pathlib import Path

from scheduler.security.roles import Role
from scheduler.security.tokens import create_token, list_entries, revoke


def test_revoke_keeps_the_files_mode(tmp_path: Path) -> None:
    """deploy/secrets.sh makes the tokens file 0644 for the node's container user; a
    revoke that made it 0600 again would stop the nodes at their next start."""
    path = tmp_path / "tokens"
    create_token(path, "alice", Role.OPERATOR)
    create_token(path, "bob", Role.READER)
    os.chmod(path, 0o644)
    assert revoke(path, "alice") == 1
    assert [e.name for e in list_entries(path)] == ["bob"]
    assert path.stat().st_mode & 0o777 == 0o644
