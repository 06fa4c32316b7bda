from __future__ import annotations

import os
from pathlib import Path

from apollo11.scheduler.security.roles import Role
from apollo11.scheduler.security.tokens import Principals, create_token, list_entries, revoke


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


def test_a_reload_of_an_emptied_file_keeps_the_previous_entries(tmp_path: Path) -> None:
    """Red-team: reloading an empty tokens file was accepted ("reloaded 0 entries")
    and refused every caller, though a typo must not lock everyone out."""
    path = tmp_path / "tokens"
    token = create_token(path, "alice", Role.OPERATOR)
    principals = Principals(path)
    for emptied in ("", "# every line commented out\n"):
        path.write_text(emptied)
        sentence = principals.reload()
        assert sentence.startswith("tokens file not reloaded, the previous entries stay in force")
        assert "has no entries (it had 1)" in sentence
        found = principals.by_token(token)
        assert found is not None and found.name == "alice"


def test_a_node_may_start_with_an_empty_file_and_add_its_first_token(tmp_path: Path) -> None:
    path = tmp_path / "tokens"
    path.write_text("")
    principals = Principals(path)
    assert principals.by_token("a11_anything") is None
    token = create_token(path, "alice", Role.OPERATOR)
    assert principals.reload() == f"reloaded 1 entries from the tokens file {path}"
    assert principals.by_token(token) is not None
