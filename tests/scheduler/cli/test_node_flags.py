"""Every node setting is a flag, and every node flag the docs name exists.

The README once showed `--sync-mode`, `--log-retention`, `--sync-timeout` and
`--drain-timeout` as flags that answered "No such option": settings the model had,
the CLI did not. The flags are now made from the model (scheduler/cli/_nodeflags.py);
these tests hold the model, the CLI and the docs (README.md and docs/*.md, wherever
their node settings and tuning sections live) to one another.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import typer
import typer.core
import typer.main
from typer.testing import CliRunner

from apollo11.scheduler.cli import app
from apollo11.scheduler.config import NodeSettings

ROOT = Path(__file__).resolve().parents[3]
# Flags the docs name in the node's sections that are another program's.
FOREIGN = {"--client-cert-auth": "etcd's own, for an etcd that asks for client certificates"}
SECTION = re.compile(r"node settings|tuning", re.I)


def node_flags() -> dict[str, str]:
    """Each flag of `apollo11 node` (a switch's --no- form too) -> its parameter."""
    cmd = typer.main.get_command(app).commands["node"]
    flags = {}
    for param in cmd.get_params(typer.Context(cmd)):
        for opt in [*param.opts, *param.secondary_opts]:
            flags[opt] = param.name
    return flags


def test_every_setting_is_a_flag_and_every_flag_a_setting() -> None:
    flags = node_flags()
    for name, field in NodeSettings.model_fields.items():
        if name == "etcd_password":  # a secret: on every user's `ps` as a flag
            assert "--etcd-password" not in flags
            continue
        flag = "--" + name.replace("_", "-")
        assert flags.get(flag) == name, f"setting {name} has no flag {flag}"
        assert field.description, f"setting {name} has no description, its flag no help"
    own = {"--config", "--help"}
    unknown = {
        f for f, name in flags.items() if f not in own and name not in NodeSettings.model_fields
    }
    assert unknown == set(), "flags that are no setting"


def _docs() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def _sections(text: str) -> list[str]:
    """The text under each heading that names node settings or tuning, with its
    subsections (up to the next heading of its level or above)."""
    lines = text.splitlines()
    found = []
    for i, line in enumerate(lines):
        m = re.match(r"(#+)\s+(.*)", line)
        if not m or not SECTION.search(m.group(2)):
            continue
        level, body = len(m.group(1)), []
        for rest in lines[i + 1 :]:
            n = re.match(r"(#+)\s", rest)
            if n and len(n.group(1)) <= level:
                break
            body.append(rest)
        found.append("\n".join(body))
    return found


FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")


def _inline(text: str) -> list[str]:
    """The inline code of a text, outside its fenced blocks (whose backticks would
    pair with the wrong ones), each on one line."""
    text = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)
    return [" ".join(span.split()) for span in re.findall(r"`([^`]+)`", text, re.S)]


def _mentions(text: str) -> tuple[set[str], set[str], set[str]]:
    """Flags, setting names and APOLLO11_ variables in a text's inline code."""
    flags: set[str] = set()
    names: set[str] = set()
    variables: set[str] = set()
    for span in _inline(text):
        if span.startswith("--") or span.startswith("apollo11 node"):
            flags |= set(FLAG.findall(span))
        elif re.fullmatch(r"[a-z]+(_[a-z0-9]+)+", span):
            names.add(span)
        variables |= set(re.findall(r"APOLLO11_[A-Z0-9_]*[A-Z0-9]", span))
    return flags, names, variables


def _all_options() -> set[str]:
    """Every option of every apollo11 command."""
    found: set[str] = set()

    def walk(cmd: typer.core.TyperCommand | typer.core.TyperGroup) -> None:
        for param in cmd.get_params(typer.Context(cmd)):
            found.update(param.opts, param.secondary_opts)
        for sub in getattr(cmd, "commands", {}).values():
            walk(sub)

    walk(typer.main.get_command(app))
    return found


def test_every_node_setting_the_docs_name_exists() -> None:
    flags, names, variables = set(), set(), set()
    sections = 0
    for path in _docs():
        text = path.read_text()
        for section in _sections(text):
            sections += 1
            f, n, v = _mentions(section)
            flags |= f
            names |= n
            variables |= v
        # a node's command line anywhere in the docs
        for line in re.findall(r"apollo11 node\b[^`\n|#]*", text):
            flags |= set(FLAG.findall(line))
    assert sections >= 1, "no 'Node settings' or 'Tuning' section in README.md or docs/*.md"
    assert len(flags) > 30, sorted(flags)  # the sections were found and read
    known = node_flags()
    missing = sorted(f for f in flags - set(FOREIGN) if f not in known)
    assert missing == [], "the docs name node flags that `apollo11 node` does not have"
    fields = NodeSettings.model_fields
    assert sorted(n for n in names if n not in fields) == [], "settings the model lacks"
    settings_vars = {v.removeprefix("APOLLO11_").lower() for v in variables} - {"config"}
    assert sorted(settings_vars - set(fields)) == [], "APOLLO11_ variables no setting reads"


def test_a_flag_beats_the_environment_which_beats_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The flags the model made reach it as flags: over APOLLO11_* and the file, and
    absent when not given (a switch's --no- form turns off what the file turned on)."""
    seen = []

    async def serve(settings: NodeSettings) -> int:
        seen.append(settings)
        return 0

    monkeypatch.setattr("apollo11.scheduler.node.serve", serve)
    conf = tmp_path / "node.toml"
    conf.write_text('sync_mode = "relaxed"\ndrain_timeout = 3\nallow_shell = true\n')
    monkeypatch.setenv("APOLLO11_DRAIN_TIMEOUT", "4")
    monkeypatch.setenv("APOLLO11_LOG_RETENTION", "snapshots")
    args = ["node", "--data-dir", str(tmp_path / "d"), "--config", str(conf)]
    res = CliRunner().invoke(app, [*args, "--sync-timeout", "7.5"])
    assert res.exit_code == 0, res.output
    s = seen.pop()
    assert (s.sync_mode, s.sync_timeout, s.drain_timeout) == ("relaxed", 7.5, 4.0)
    assert (s.log_retention, s.allow_shell) == ("snapshots", True)
    res = CliRunner().invoke(app, [*args, "--drain-timeout", "5", "--no-allow-shell"])
    assert res.exit_code == 0, res.output
    s = seen.pop()
    assert (s.drain_timeout, s.allow_shell) == (5.0, False)


def test_a_bad_flag_value_is_refused_naming_the_flag_and_its_variable(tmp_path: Path) -> None:
    res = CliRunner().invoke(app, ["node", "--data-dir", str(tmp_path / "d"), "--sync-mode", "lax"])
    assert res.exit_code == 2
    assert "--sync-mode (APOLLO11_SYNC_MODE): Input should be 'strict' or 'relaxed'" in (
        " ".join(res.stderr.split())
    )


def test_the_flags_are_made_without_grpc_or_the_model_until_node_is_asked() -> None:
    """gRPC reads GRPC_EXPERIMENTS when it is imported, which the node sets after
    parsing its flags; and `apollo11 --help` must not pay for the model."""
    probe = """
import sys, typer, typer.main
from apollo11.scheduler.cli import app
cmd = typer.main.get_command(app).commands["node"]
before = "apollo11.scheduler.config" in sys.modules
cmd.get_params(typer.Context(cmd))
print(before, "apollo11.scheduler.config" in sys.modules, "grpc" in sys.modules)
"""
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    ).stdout.split()
    assert out == ["False", "True", "False"]


def test_every_flag_the_docs_name_is_an_apollo11_option() -> None:
    """Beyond the node's sections: prose names flags too ("up to `--drain-timeout`")."""
    options = _all_options()
    named = {
        (path.name, m.group(0))
        for path in _docs()
        for span in _inline(path.read_text())
        if (m := FLAG.match(span))
    }
    assert len(named) > 50, sorted(named)
    assert sorted((p, f) for p, f in named if f not in options and f not in FOREIGN) == []


def test_on_a_terminal_the_help_still_names_each_variable() -> None:
    """rich, which draws the help on a terminal, took "[env ...]" for a style tag
    and dropped it."""
    import typer.core

    assert typer.core.HAS_RICH, "this process draws help as a terminal would"
    res = CliRunner().invoke(app, ["node", "--help"], env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    assert "╭" in res.output, "drawn by rich"
    for variable in ("APOLLO11_LEASE_TTL", "APOLLO11_SYNC_MODE", "APOLLO11_CONFIG"):
        assert variable in res.output
