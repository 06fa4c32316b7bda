"""`apollo11 node`'s flags, made from the node's settings model.

NodeSettings (scheduler/config.py) reads a node's settings from flags, APOLLO11_*
variables and a TOML file. Each of its fields is a flag here, spelled as the field
with dashes (`data_dir`, `--data-dir`), its description the help, with the variable
and the default beside it; a secret is the exception (a flag's value is on every
user's `ps`). A new setting is therefore a flag, a variable and a key at once.
The command's one other option, `--config`, names the file.

The flags pass text, not parsed values: the model converts and checks a flag's
value as it does a variable's or a file's, with the same message naming all three
(`--lease-ttl (APOLLO11_LEASE_TTL): ...`). A flag not given is absent, so that the
variable's or the file's value stands; a switch therefore has a `--no-` form that
can turn off what a file turned on.

The flags are made when click first asks for the command's parameters (its help or
its parse), not when the CLI is built: the model imports pydantic-settings and the
log's configuration, which `apollo11 --help` and every client command must not load.
"""

from __future__ import annotations

import enum
import types
import typing
from pathlib import Path
from typing import Any

import typer
import typer.core

if typing.TYPE_CHECKING:
    from pydantic.fields import FieldInfo

# where the command line's values wait for the command's callback
_GIVEN = "apollo11.node.settings"
CONFIG = "config"  # the file's own option, the one that is no setting


def flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def given(ctx: typer.Context) -> tuple[Path | None, dict[str, Any]]:
    """The config file and the settings the command line gave (for the callback)."""
    values: dict[str, Any] = dict(ctx.meta.get(_GIVEN, {}))
    config = values.pop(CONFIG, None)
    return config, {k: v for k, v in values.items() if v is not None}


class NodeCommand(typer.core.TyperCommand):
    """A command whose options are a flag for each setting of the node and the
    config file's, made on first use."""

    _made: list[typer.core.TyperOption] | None = None

    def get_params(self, ctx: Any) -> list[Any]:
        if self._made is None:
            self._made = [*_options(), _config_option()]
        return [*self._made, *super().get_params(ctx)]

    def invoke(self, ctx: Any) -> Any:
        # typer calls the callback with its declared parameters only: these wait in
        # the context for it
        ctx.meta[_GIVEN] = {o.name: ctx.params.pop(o.name) for o in self._made or ()}
        return super().invoke(ctx)


def _options() -> list[typer.core.TyperOption]:
    from apollo11.scheduler.config import NodeSettings

    env_prefix = NodeSettings.model_config.get("env_prefix", "")
    made = []
    for name, field in NodeSettings.model_fields.items():
        if _secret(field.annotation):
            continue
        switch = _unwrap(field.annotation) is bool
        decl = f"{flag(name)}/--no-{name.replace('_', '-')}" if switch else flag(name)
        made.append(
            typer.core.TyperOption(
                param_decls=[decl, name],
                type=None if switch else str,
                is_flag=switch or None,
                default=None,
                metavar=None if switch else _metavar(field),
                help=f"{field.description} {_bracketed(_shown(field, env_prefix + name.upper()))}",
            )
        )
    return made


def _config_option() -> typer.core.TyperOption:
    env = "APOLLO11_CONFIG"
    return typer.core.TyperOption(
        param_decls=[flag(CONFIG), CONFIG],
        type=Path,
        envvar=env,  # click reads this one: it says where the settings are, it is none
        metavar="<path>",
        help=f"A TOML file with the same settings. {_bracketed('env ' + env)}",
    )


def _bracketed(text: str) -> str:
    # on a terminal rich draws the help and would take "[env ...]" for a style tag
    return ("\\[" if typer.core.HAS_RICH else "[") + text + "]"


def _shown(field: FieldInfo, env: str) -> str:
    shown = f"env {env}"
    default = field.get_default(call_default_factory=True)
    if isinstance(default, enum.Enum):
        default = default.value
    if not field.is_required() and default not in (None, "", [], ()):
        shown += f"; default {default}"
    return shown


def _metavar(field: FieldInfo) -> str:
    """As typer names its own (`<int>`), with the choices where there are some."""
    kind = _unwrap(field.annotation)
    if typing.get_origin(kind) is typing.Literal:
        return "<" + "|".join(str(a) for a in typing.get_args(kind)) + ">"
    if isinstance(kind, type) and issubclass(kind, enum.Enum):
        return "<" + "|".join(str(m.value) for m in kind) + ">"
    if typing.get_origin(kind) is list:
        return "<str,...>"
    names: dict[Any, str] = {int: "<int>", float: "<float>", Path: "<path>"}
    return names.get(kind, "<str>")


def _unwrap(annotation: Any) -> Any:
    """`X | None` -> X."""
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        rest = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(rest) == 1:
            return rest[0]
    return annotation


def _secret(annotation: Any) -> bool:
    from pydantic import SecretStr

    return _unwrap(annotation) is SecretStr
