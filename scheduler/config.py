"""Node configuration: flags, then APOLLO11_* environment variables, then a TOML file.

Every `apollo11 node` flag has an environment variable (`--data-dir` is
`APOLLO11_DATA_DIR`) and a key in the config file (`data_dir = "..."`).
Invalid values are refused at start with a message naming the setting.
"""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, ValidationError, ValidationInfo, field_validator, model_validator
from pydantic_settings import (
    BaseSettings,
    NoDecode,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

from lease.base import MIN_TTL_S
from scheduler.log.eventlog import DEFAULT_SEGMENT_MAX_BYTES, FsyncPolicy
from scheduler.log.record import DEFAULT_PAYLOAD_MAX_BYTES
from scheduler.snapshot import DEFAULT_INTERVAL

# a SubmitTask's other fields (workflow, idempotency key: 256 characters each) and framing
MESSAGE_ENVELOPE_BYTES = 64 * 1024


def _hostport(value: str, name: str) -> str:
    _, sep, port = value.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"{name} must be HOST:PORT (got {value!r})")
    return value


class NodeSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="APOLLO11_", extra="forbid", frozen=True)

    node_id: str = Field(default_factory=socket.gethostname, min_length=1, max_length=64)
    data_dir: Path
    listen: str = "127.0.0.1:7411"
    advertise: str | None = None
    http: str | None = None
    # NoDecode: from the environment these are "a,b" (split below), not JSON lists.
    workflows: Annotated[list[str], NoDecode] = Field(default_factory=list)
    etcd: Annotated[list[str], NoDecode] = Field(default_factory=list)
    cluster: str = Field(default="default", pattern=r"^[A-Za-z0-9_.-]{1,64}$")
    lease_ttl: float = 5.0
    sync_replicas: int = Field(default=1, ge=0, le=8)
    # strict: a write waits for sync_replicas standbys (up to sync_timeout, then the
    # client hears UNAVAILABLE, outcome unknown); relaxed: with fewer connected, it
    # waits for those there are (async when none): available, can lose the tail.
    sync_mode: Literal["strict", "relaxed"] = "strict"
    sync_timeout: float = Field(default=5.0, gt=0)
    concurrency: int = Field(default=32, ge=1, le=10_000)
    snapshot_interval: int = Field(default=DEFAULT_INTERVAL, ge=1)
    # ...but not more often than this (a busy primary would snapshot a dozen times a
    # second; recovery then replays at most about this long's worth of events)
    snapshot_min_interval: float = Field(default=1.0, ge=0)
    segment_max_bytes: int = Field(default=DEFAULT_SEGMENT_MAX_BYTES, ge=4096)
    payload_max_bytes: int = Field(default=DEFAULT_PAYLOAD_MAX_BYTES, ge=64, le=1024 * 1024)
    submit_max_bytes: int = Field(default=64 * 1024, ge=64, le=8 * 1024 * 1024)
    fsync: FsyncPolicy = FsyncPolicy.ALWAYS
    idempotency_ttl: float = Field(default=24 * 3600.0, gt=0)
    # all: keep every segment (full audit history and time travel); snapshots: delete
    # what the oldest kept snapshot covers.
    log_retention: Literal["all", "snapshots"] = "all"
    drain_timeout: float = Field(default=10.0, ge=0)
    # where the bundled examples' `ledger` input may write (None: the system temp dir)
    examples_dir: Path | None = None
    # Abuse limits of the gRPC server (scheduler/api/limits.py). A received message
    # is at most max_message_bytes (gRPC answers RESOURCE_EXHAUSTED past it): at
    # least a SubmitTask of submit_max_bytes in its envelope (checked below), and
    # at least 1 MiB for a standby's Hello (its term history).
    max_watch_streams: int = Field(default=1000, ge=1)
    max_streams_per_connection: int = Field(default=100, ge=1)
    max_message_bytes: int = Field(default=16 * 1024 * 1024, ge=1024 * 1024, le=1024**3)

    @field_validator("workflows", "etcd", mode="before")
    @classmethod
    def _comma_list(cls, v: Any) -> Any:
        if isinstance(v, str):
            return [p.strip() for p in v.split(",") if p.strip()]
        return v

    @field_validator("listen")
    @classmethod
    def _listen(cls, v: str) -> str:
        return _hostport(v, "listen")

    @field_validator("advertise", "http")
    @classmethod
    def _optional_hostport(cls, v: str | None) -> str | None:
        return None if v is None else _hostport(v, "address")

    @field_validator("lease_ttl")
    @classmethod
    def _ttl(cls, v: float) -> float:
        if v < MIN_TTL_S:
            raise ValueError(
                f"lease_ttl must be at least {MIN_TTL_S:g} seconds (got {v:g}): below that a "
                f"GC pause or a slow disk can cost the primary its lease"
            )
        return v

    @model_validator(mode="after")
    def _node_id_chars(self) -> NodeSettings:
        if not all(c.isalnum() or c in "-_." for c in self.node_id):
            raise ValueError(
                f"node_id may use letters, digits, '-', '_' and '.' (got {self.node_id!r})"
            )
        return self

    @field_validator("max_message_bytes")
    @classmethod
    def _message_fits_a_submission(cls, v: int, info: ValidationInfo) -> int:
        # the node's submission cap (see Node._open_store); fields validate in order
        cap = max(info.data.get("submit_max_bytes", 0), info.data.get("payload_max_bytes", 0))
        if v < cap + MESSAGE_ENVELOPE_BYTES:
            raise ValueError(
                f"max_message_bytes must be at least submit_max_bytes + "
                f"{MESSAGE_ENVELOPE_BYTES} = {cap + MESSAGE_ENVELOPE_BYTES} (got {v}): a "
                f"submission of submit_max_bytes must fit in one message"
            )
        return v

    @property
    def address(self) -> str:
        """What other nodes and clients use to reach this node."""
        return self.advertise or self.listen

    @property
    def standalone(self) -> bool:
        return not self.etcd

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        sources: list[PydanticBaseSettingsSource] = [init_settings, env_settings]
        toml = settings_cls.model_config.get("toml_file")
        if toml:
            sources.append(TomlConfigSettingsSource(settings_cls))
        return tuple(sources)


def load_settings(config_file: Path | None = None, **flags: Any) -> NodeSettings:
    """Flags (those given) over environment over the config file; errors name the setting."""
    given = {k: v for k, v in flags.items() if v is not None}
    cls: type[NodeSettings] = NodeSettings
    if config_file is not None:
        if not config_file.is_file():
            raise ValueError(f"config file {config_file} does not exist")

        class FromFile(NodeSettings):
            model_config = SettingsConfigDict(toml_file=config_file)

        cls = FromFile
    try:
        return cls(**given)
    except ValidationError as e:
        raise ValueError(_explain(e)) from None


def _explain(e: ValidationError) -> str:
    lines = []
    for err in e.errors():
        where = ".".join(str(p) for p in err["loc"]) or "settings"
        flag = "--" + where.replace("_", "-")
        msg = err["msg"].removeprefix("Value error, ")
        lines.append(f"{flag} (APOLLO11_{where.upper()}): {msg}")
    return "invalid node settings: " + "; ".join(lines)
