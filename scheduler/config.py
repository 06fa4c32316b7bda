"""Node configuration: flags, then APOLLO11_* environment variables, then a TOML file.

Defaults that a part of the node also has live once, in scheduler/defaults.py (the
log's segment and payload sizes, the engine's concurrency and idempotency TTL, the
snapshot interval). The one mapping from these settings into the log's, the store's
and the engine's options is scheduler/node/options.py.

Every setting is an `apollo11 node` flag, an environment variable and a key in
the config file (`--data-dir`, `APOLLO11_DATA_DIR`, `data_dir = "..."`): the CLI
makes its flags from these fields (scheduler/cli/_nodeflags.py), and
tests/scheduler/cli/test_node_flags.py holds the docs to them. The one
exception is etcd_password, which has no flag: a flag's value is on every
user's `ps`. Invalid values are refused at start with a message naming the setting.
"""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Annotated, Any, Literal, TypedDict

from pydantic import (
    Field,
    SecretStr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_settings import (
    BaseSettings,
    NoDecode,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

from apollo11.lease import MIN_TTL_S
from apollo11.scheduler import defaults, retention
from apollo11.scheduler.log import FsyncPolicy

# a SubmitTask's other fields (workflow, idempotency key: 256 characters each) and framing
MESSAGE_ENVELOPE_BYTES = 64 * 1024


class EtcdSecurity(TypedDict):
    """EtcdLease's keyword arguments for etcd auth and TLS (files read, PEM bytes)."""

    username: str | None
    password: str | None
    ca: bytes | None
    cert: bytes | None
    key: bytes | None


def _hostport(value: str, name: str) -> str:
    _, sep, port = value.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"{name} must be HOST:PORT (got {value!r})")
    return value


class NodeSettings(BaseSettings):
    """A node's settings: each field is a flag of `apollo11 node` (cli/_nodeflags.py
    makes them from these fields, their descriptions their help), an APOLLO11_*
    variable and a key of the TOML file."""

    model_config = SettingsConfigDict(env_prefix="APOLLO11_", extra="forbid", frozen=True)

    node_id: str = Field(
        default_factory=socket.gethostname,
        min_length=1,
        max_length=64,
        description="This node's name.",
    )
    data_dir: Path = Field(description="Where the log lives.")
    listen: str = Field(default="127.0.0.1:7411", description="gRPC HOST:PORT.")
    advertise: str | None = Field(default=None, description="HOST:PORT others reach this node at.")
    http: str | None = Field(default=None, description="Metrics/UI HOST:PORT.")
    # Connections the HTTP port holds at once, in all and from one address; past
    # either a new one is closed at once (scheduler/web/listener.py).
    http_max_connections: int = Field(
        default=128, ge=1, le=100_000, description="Connections the HTTP port holds at once."
    )
    http_max_connections_per_source: int = Field(
        default=32,
        ge=1,
        le=100_000,
        description="Connections the HTTP port holds at once from one address.",
    )
    # Cores gRPC core's own threads (mostly TLS handshakes) may use before new
    # connections to the gRPC ports are shed in the kernel (scheduler/api/connshed.py).
    grpc_threads_cpu_budget: float = Field(
        default=0.1,
        ge=0,
        le=1024,
        description="Cores gRPC core's threads may use before new connections are shed (0: never).",
    )
    # For this long after the node starts or takes over, the workers and clients moving
    # to it are strangers to it: their SYNs are shed less (api/knownsources.py).
    grpc_welcome_s: float = Field(
        default=120.0,
        ge=0,
        le=86400,
        description="Seconds after a start or takeover during which new connections "
        "from addresses not seen lately are shed at most 75 % (95 % after).",
    )
    # New connections the HTTP port admits a second from all sources together, in
    # bursts of as many; past it one is closed at once unless its source has been
    # quiet (scheduler/web/listener.py).
    http_new_connections_per_s: float = Field(
        default=100.0,
        gt=0,
        le=100_000,
        description="New connections the HTTP port admits a second, from all sources.",
    )
    # Host names the pages answer to besides localhost, IP literals, the --http and
    # --advertise hosts and the node id (the DNS-rebinding guard, scheduler/web/guard.py).
    # NoDecode: from the environment these lists are "a,b" (split below), not JSON.
    http_allowed_hosts: Annotated[list[str], NoDecode] = Field(
        default_factory=list, description="More Host names the UI answers to, comma-separated."
    )
    workflows: Annotated[list[str], NoDecode] = Field(
        default_factory=list, description="Workflow modules, comma-separated."
    )
    etcd: Annotated[list[str], NoDecode] = Field(
        default_factory=list, description="etcd URLs, comma-separated (absent: standalone)."
    )
    cluster: str = Field(
        default="default", pattern=r"^[A-Za-z0-9_.-]{1,64}$", description="Cluster name."
    )
    # lease_ttl, sync_replicas and sync_mode: the first node writes them to etcd as the
    # cluster's; afterwards each node's are only that bootstrap value (`config set`).
    lease_ttl: float = Field(default=5.0, description="Seconds (>= 2).")
    sync_replicas: int = Field(default=1, ge=0, le=8, description="Standbys that must ack a write.")
    # strict: a write waits for sync_replicas standbys (up to sync_timeout, then the
    # client hears UNAVAILABLE, outcome unknown); relaxed: with fewer connected, it
    # waits for those there are (async when none): available, can lose the tail.
    sync_mode: Literal["strict", "relaxed"] = Field(
        default="strict",
        description="strict: a write waits for --sync-replicas standbys; relaxed: for "
        "those connected (can lose the tail on failover).",
    )
    sync_timeout: float = Field(
        default=5.0,
        gt=0,
        description="Seconds a write waits for standbys before UNAVAILABLE (outcome unknown).",
    )
    concurrency: int = Field(
        default=defaults.CONCURRENCY, ge=1, le=10_000, description="Steps running at once."
    )
    # Where steps run (docs/workers.md): in this process (embedded), only on
    # `apollo11 worker` processes (remote: the node dispatches), or both (this node's
    # `concurrency` slots first, then its workers').
    execution: Literal["embedded", "remote", "both"] = Field(
        default="embedded",
        description="Where steps run: embedded (in this process), remote (on `apollo11 "
        "worker` processes; this node only dispatches) or both (its own --concurrency "
        "slots first, then its workers').",
    )
    # A worker heartbeats every interval; one silent for the timeout is cut off and its
    # attempts are lost (a worker whose process dies is found at once: its stream ends).
    worker_heartbeat_interval: float = Field(
        default=2.0, gt=0, le=60, description="Seconds between a worker's heartbeats."
    )
    worker_heartbeat_timeout: float = Field(
        default=10.0,
        gt=0,
        le=3600,
        description="Seconds of silence before a worker's attempts are lost.",
    )
    snapshot_interval: int = Field(
        default=defaults.SNAPSHOT_INTERVAL, ge=1, description="Events between two snapshots."
    )
    # ...but not more often than this (a busy primary would snapshot a dozen times a
    # second; recovery then replays at most about this long's worth of events)
    snapshot_min_interval: float = Field(
        default=1.0, ge=0, description="Seconds at least between two snapshots."
    )
    segment_max_bytes: int = Field(
        default=defaults.SEGMENT_MAX_BYTES, ge=4096, description="A log segment rotates past this."
    )
    payload_max_bytes: int = Field(
        default=defaults.PAYLOAD_MAX_BYTES,
        ge=64,
        le=1024 * 1024,
        description="Largest event payload (a step's result, a checkpoint).",
    )
    submit_max_bytes: int = Field(
        default=defaults.SUBMIT_MAX_BYTES,
        ge=64,
        le=8 * 1024 * 1024,
        description="Largest submission (a task's input and its DAG; a schedule's input).",
    )
    # How deeply JSON may nest: what a client sends (inputs, event payloads, shell
    # DAGs; scheduler/nodeview/checks.py) and what the cluster writes (results, checkpoints,
    # heartbeat details; the log refuses it). At most 128: the log and its snapshots
    # wrap it in levels of their own, and orjson encodes at most 254.
    json_max_depth: int = Field(
        default=defaults.JSON_MAX_DEPTH,
        ge=1,
        le=defaults.JSON_MAX_DEPTH_MAX,
        description="How deeply JSON may nest, sent or written.",
    )
    fsync: FsyncPolicy = Field(
        default=FsyncPolicy.ALWAYS,
        description="always; unsafe-never acknowledges before the disk has it (tests only).",
    )
    # A step's retry budget (scheduler/retrypace.py, docs/tuning.md): retries start at up
    # to max(retry_budget_min, retry_budget x the step's successes a second) a second;
    # past it each is paced. retry_budget_min 0 turns the pacing off.
    retry_budget: float = Field(
        default=defaults.RETRY_BUDGET_SHARE,
        ge=0,
        le=100,
        description="Share of a step's successes a second its retries may add before "
        "they are paced.",
    )
    retry_budget_min: float = Field(
        default=defaults.RETRY_BUDGET_MIN_PER_S,
        ge=0,
        le=1_000_000,
        description="Retries a second a step may always start unpaced; 0: never paced.",
    )
    idempotency_ttl: float = Field(
        default=defaults.IDEMPOTENCY_TTL_S,
        gt=0,
        description="Seconds an idempotency key is remembered.",
    )
    log_retention: Literal["all", "snapshots"] = Field(
        default="all",
        description="all: keep every segment (audits, time travel); snapshots: delete what "
        "the oldest kept snapshot covers.",
    )
    # Retention (scheduler/retention.py, docs/retention.md): finished tasks purged by
    # workflow and status; none unless configured (a purge cannot be undone).
    retention: str = Field(
        default="",
        max_length=64 * 1024,
        description="Finished tasks kept for, by status and workflow, then purged "
        '("FAILED=90d,SUCCEEDED=7d,etl:*=30d,etl:FAILED=365d"); empty: kept for ever.',
    )
    retention_from: Literal["finish", "submit"] = Field(
        default="finish",
        description="Count a task's retention from its finish or from its submission.",
    )
    retention_sweep_interval: float = Field(
        default=60.0,
        ge=1,
        le=86_400,
        description="Seconds between two retention sweeps of the primary.",
    )
    # The archive (scheduler/bucket/, docs/archive.md): the endpoint, region and
    # credentials come from the AWS_* variables or files, as for any S3 tool.
    archive_url: str | None = Field(
        default=None,
        description="s3://BUCKET/PREFIX: the primary uploads sealed segments and snapshots "
        "there, compressed (endpoint, credentials: AWS_* env or files).",
    )
    # The background scrub (scheduler/state/scrub.py): reads sealed segments and archive
    # chunks at most this fast (0: off), a full pass at most every scrub_interval s.
    scrub_mb_per_s: float = Field(
        default=8.0, ge=0, description="MB/s the background scrub reads at most (0: off)."
    )
    scrub_interval: float = Field(
        default=3600.0, gt=0, description="Seconds at least between two full scrub passes."
    )
    drain_timeout: float = Field(
        default=10.0,
        ge=0,
        description="Seconds running steps get to finish on SIGTERM or a switchover.",
    )
    # OpenTelemetry traces (scheduler/tracing.py) to a collector over OTLP/gRPC
    # ("": off, unless OTEL_EXPORTER_OTLP_ENDPOINT names one)
    otlp_endpoint: str = Field(
        default="",
        description="Send traces to this OpenTelemetry collector (OTLP/gRPC, e.g. "
        "http://127.0.0.1:4317; needs apollo11[otlp]). Default: OTEL_EXPORTER_OTLP_ENDPOINT.",
    )
    examples_dir: Path | None = Field(
        default=None, description="Where apollo11.scheduler.examples may write (default: temp)."
    )
    # Abuse limits of the gRPC server (scheduler/api/limits.py). A received message
    # is at most max_message_bytes (gRPC answers RESOURCE_EXHAUSTED past it): at
    # least a SubmitTask of submit_max_bytes in its envelope (checked below), and
    # at least 1 MiB for a standby's Hello (its term history).
    max_watch_streams: int = Field(default=1000, ge=1, description="Open WatchTask streams.")
    # Connections the gRPC ports hold at once (the client port, and the peer port
    # with --peer-listen); gRPC core closes one past them as soon as it is accepted.
    max_connections: int = Field(
        default=1000, ge=1, le=1_000_000, description="Connections the gRPC port holds at once."
    )
    peer_max_connections: int = Field(
        default=64,
        ge=1,
        le=1_000_000,
        description="Connections the replication port holds at once.",
    )
    # Admission control on the primary: submissions waiting for their commit (fsync,
    # standbys), and tasks in memory (unfinished, or finished and not yet archived).
    # Past either, submissions get RESOURCE_EXHAUSTED with a retry hint, so an
    # overload is refused at the door instead of growing queues and memory.
    max_pending_writes: int = Field(
        default=10_000, ge=1, description="Submissions waiting to commit."
    )
    max_tasks_in_memory: int = Field(default=50_000, ge=1, description="Tasks held in memory.")
    max_streams_per_connection: int = Field(
        default=1000, ge=1, description="Concurrent calls per connection."
    )
    max_message_bytes: int = Field(
        default=16 * 1024 * 1024, ge=1024 * 1024, le=1024**3, description="Largest request."
    )

    # Security (docs/security.md). TLS for the public gRPC port and the HTTP side:
    tls_cert: Path | None = Field(default=None, description="TLS certificate for gRPC and HTTP.")
    tls_key: Path | None = Field(default=None, description="Its private key.")
    # A certificate's common name is looked up in the tokens file (`NAME ROLE cert`).
    client_ca: Path | None = Field(
        default=None, description="Require client certificates signed by this CA."
    )
    # Unset: authentication is off, which protected mode allows on loopback only.
    tokens_file: Path | None = Field(
        default=None, description="Token hashes and roles (re-read on SIGHUP)."
    )
    # The Replication service on a port of its own, mutual TLS with the cluster CA.
    peer_listen: str | None = Field(default=None, description="HOST:PORT of the replication port.")
    peer_advertise: str | None = Field(default=None, description="HOST:PORT peers reach it at.")
    peer_ca: Path | None = Field(default=None, description="The cluster CA.")
    peer_cert: Path | None = Field(default=None, description="This node's peer certificate.")
    peer_key: Path | None = Field(default=None, description="Its private key.")
    # Shell steps run commands as the node's user: off unless every node allows them.
    allow_shell: bool = Field(default=False, description="Allow shell steps (every node must).")
    # Start on a non-loopback address without TLS and authentication (logged loudly).
    insecure: bool = Field(
        default=False, description="Run open beyond loopback (no TLS or tokens)."
    )
    metrics_open: bool = Field(default=False, description="Serve /metrics without a credential.")

    # etcd's own security. The password: from etcd_password_file (preferred: it stays
    # out of the environment of every process the node starts) or APOLLO11_ETCD_PASSWORD;
    # a SecretStr, so no repr or log line of the settings shows it. TLS: https://
    # endpoints, etcd_ca to trust etcd's certificate, etcd_cert + etcd_key to present one.
    etcd_password: SecretStr | None = Field(
        default=None, description="etcd's password (no flag: see --etcd-password-file)."
    )
    etcd_password_file: Path | None = Field(
        default=None, description="File holding the etcd password (or APOLLO11_ETCD_PASSWORD)."
    )
    etcd_user: str | None = Field(
        default=None, validate_default=True, description="etcd user (etcd auth enabled)."
    )
    etcd_ca: Path | None = Field(default=None, description="PEM CA that signed etcd's certificate.")
    etcd_cert: Path | None = Field(default=None, description="PEM client certificate for etcd.")
    etcd_key: Path | None = Field(
        default=None, validate_default=True, description="PEM key of --etcd-cert."
    )

    @field_validator("etcd_password_file", "etcd_ca", "etcd_cert", "etcd_key")
    @classmethod
    def _file_exists(cls, v: Path | None) -> Path | None:
        if v is not None and not v.is_file():
            raise ValueError(f"file {v} does not exist")
        return v

    @field_validator("retention")
    @classmethod
    def _retention_rules(cls, v: str) -> str:
        retention.parse(v)  # the ValueError names the rule
        return v

    @field_validator("etcd_user")
    @classmethod
    def _user_and_password(cls, v: str | None, info: ValidationInfo) -> str | None:
        has_password = bool(info.data.get("etcd_password") or info.data.get("etcd_password_file"))
        if v is not None and not has_password:
            raise ValueError(
                "an etcd user needs a password: --etcd-password-file or APOLLO11_ETCD_PASSWORD"
            )
        if v is None and has_password:
            raise ValueError("an etcd password needs the user name it belongs to: --etcd-user")
        return v

    @field_validator("etcd_key")
    @classmethod
    def _cert_and_key(cls, v: Path | None, info: ValidationInfo) -> Path | None:
        if "etcd_cert" in info.data and (info.data["etcd_cert"] is None) != (v is None):
            raise ValueError("--etcd-cert and --etcd-key go together: give both or neither")
        return v

    def etcd_security(self) -> EtcdSecurity:
        """Read the password and certificate files now (at node start)."""
        password: str | None = None
        if self.etcd_password_file is not None:
            # a file written with `echo` ends in a newline that is not the password's
            password = self.etcd_password_file.read_text().rstrip("\r\n")
        elif self.etcd_password is not None:
            password = self.etcd_password.get_secret_value()

        def read(p: Path | None) -> bytes | None:
            return None if p is None else p.read_bytes()

        return EtcdSecurity(
            username=self.etcd_user,
            password=password,
            ca=read(self.etcd_ca),
            cert=read(self.etcd_cert),
            key=read(self.etcd_key),
        )

    @field_validator("workflows", "etcd", "http_allowed_hosts", mode="before")
    @classmethod
    def _comma_list(cls, v: Any) -> Any:
        if isinstance(v, str):
            return [p.strip() for p in v.split(",") if p.strip()]
        return v

    @field_validator("archive_url")
    @classmethod
    def _archive_url(cls, v: str | None) -> str | None:
        if v is None or not v.strip():
            return None
        from apollo11.scheduler.archiveurl import parse_url

        return parse_url(v.strip()).url  # BucketConfigError is a ValueError's message here

    @field_validator("listen")
    @classmethod
    def _listen(cls, v: str) -> str:
        return _hostport(v, "listen")

    @field_validator("advertise", "http", "peer_listen", "peer_advertise")
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

    @model_validator(mode="after")
    def _heartbeats(self) -> NodeSettings:
        if self.worker_heartbeat_timeout <= 2 * self.worker_heartbeat_interval:
            raise ValueError(
                f"--worker-heartbeat-timeout ({self.worker_heartbeat_timeout:g}s) must be more "
                f"than twice the heartbeat interval ({self.worker_heartbeat_interval:g}s): one "
                f"late heartbeat must not cost a worker its attempts"
            )
        return self

    @model_validator(mode="after")
    def _security_pairs(self) -> NodeSettings:
        pairs = (("tls_cert", "tls_key"), ("peer_cert", "peer_key"))
        for a, b in pairs:
            if (getattr(self, a) is None) != (getattr(self, b) is None):
                raise ValueError(f"--{a.replace('_', '-')} and --{b.replace('_', '-')} go together")
        peer = (self.peer_ca, self.peer_cert)
        if any(peer) and not all(peer):
            raise ValueError("--peer-ca, --peer-cert and --peer-key go together")
        if self.peer_cert is not None and self.peer_listen is None:
            raise ValueError("--peer-cert needs --peer-listen (the port replication uses)")
        if self.client_ca is not None and (self.tls_cert is None or self.tokens_file is None):
            raise ValueError(
                "--client-ca needs --tls-cert/--tls-key and a --tokens-file that maps "
                "certificate names to roles"
            )
        if self.tokens_file is not None and self.peer_cert is None:
            if self.etcd:
                raise ValueError(
                    "with --tokens-file, a cluster node (--etcd) needs --peer-listen, --peer-ca, "
                    "--peer-cert and --peer-key: nodes prove who they are with certificates"
                )
            if self.peer_listen is not None:
                # the replication port would serve the whole log to anyone who asks
                raise ValueError(
                    "--peer-listen with --tokens-file needs --peer-ca, --peer-cert and "
                    "--peer-key: only nodes with a certificate of the cluster may follow the log"
                )
        for name in (
            "tls_cert",
            "tls_key",
            "client_ca",
            "tokens_file",
            "peer_ca",
            "peer_cert",
            "peer_key",
        ):
            path = getattr(self, name)
            if path is not None and not Path(path).is_file():
                raise ValueError(f"--{name.replace('_', '-')} {path} does not exist")
        return self

    @property
    def authenticated(self) -> bool:
        return self.tokens_file is not None

    @property
    def peer_tls(self) -> bool:
        return self.peer_cert is not None

    @property
    def peer_address(self) -> str:
        """Where standbys follow this node ("" when replication shares the public port)."""
        return self.peer_advertise or self.peer_listen or ""

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
