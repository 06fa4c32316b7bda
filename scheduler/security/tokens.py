"""The principals file: bearer tokens (stored as hashes) and certificate names.

One entry a line, `#` starts a comment:

    alice     operator   sha256:5e88...   # a bearer token, by its SHA-256
    ci-bot    submitter  sha256:9f86...
    grafana   reader     cert             # a client certificate with CN=grafana

Tokens are 256 random bits, so a plain SHA-256 is enough to store them (as
GitHub and PyPI do for API tokens): nothing short of the token itself matches
the hash, and no salt or slow hash is needed against guessing. The node reads
the file at start and again on SIGHUP; a file that fails to parse on reload
leaves the previous entries in force (and says why), so a typo cannot lock
everyone out or let everyone in; so does a reload that would find no entries
where there were some (an emptied or truncated file). Deleting a line revokes
its token at the next reload. A node may start with an empty file (its first
token is then added by `apollo11 token create` and SIGHUP).
"""

from __future__ import annotations

import hashlib
import logging
import os
import secrets
import stat
from dataclasses import dataclass
from pathlib import Path

from apollo11.scheduler.security.roles import Principal, Role

log = logging.getLogger(__name__)

TOKEN_PREFIX = "a11_"
_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.@:")


def token_hash(token: str) -> str:
    return "sha256:" + hashlib.sha256(token.encode()).hexdigest()


def check_name(name: str) -> str:
    if not name or len(name) > 128 or not set(name) <= _NAME_CHARS:
        raise ValueError(
            f"principal name {name!r} must be 1-128 letters, digits or -_.@: characters"
        )
    return name


@dataclass(frozen=True, slots=True)
class Entry:
    name: str
    role: Role
    secret: str  # "sha256:<hex>" or "cert"


def parse(text: str, source: str) -> list[Entry]:
    entries = []
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        parts = line.split()
        if len(parts) != 3:
            raise ValueError(f"{source}:{n}: expected 'NAME ROLE sha256:HEX|cert', got {line!r}")
        name, role_text, secret = parts
        try:
            check_name(name)
            role = Role.parse(role_text)
        except ValueError as e:
            raise ValueError(f"{source}:{n}: {e}") from None
        if role is Role.NODE:
            raise ValueError(
                f"{source}:{n}: role node is proven by the cluster's peer certificates, "
                f"not by an entry here"
            )
        if secret != "cert" and not (
            secret.startswith("sha256:") and len(secret) == 71 and _is_hex(secret[7:])
        ):
            raise ValueError(f"{source}:{n}: the third field must be sha256:<64 hex> or cert")
        entries.append(Entry(name, role, secret))
    return entries


def _is_hex(s: str) -> bool:
    return all(c in "0123456789abcdef" for c in s)


class Principals:
    """The entries of one principals file, looked up by token hash or certificate name."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._by_hash: dict[str, Principal] = {}
        self._by_cert: dict[str, Principal] = {}
        self._live: set[int] = set()
        self.load()

    def load(self) -> int:
        """Read the file; raises ValueError (naming file and line) and keeps the old set."""
        try:
            text = self.path.read_text()
        except OSError as e:
            raise ValueError(f"cannot read the tokens file {self.path}: {e.strerror}") from None
        entries = parse(text, str(self.path))
        if not entries and (self._by_hash or self._by_cert):
            # An empty file is more often a truncated write or a wrong path than a
            # wish to refuse everyone; that wish is a restart with the empty file.
            raise ValueError(
                f"{self.path} has no entries (it had {len(self._by_hash) + len(self._by_cert)}):"
                f" that would refuse every caller; to revoke every token, restart the"
                f" node with the empty file"
            )
        by_hash: dict[str, Principal] = {}
        by_cert: dict[str, Principal] = {}
        for entry in entries:
            # An entry that stays keeps its Principal object: a stream opened with it
            # stays in force, and one whose entry went is found by in_force().
            if entry.secret == "cert":
                p = Principal(entry.name, entry.role, "certificate")
                by_cert[entry.name] = _same(self._by_cert.get(entry.name), p)
            else:
                p = Principal(entry.name, entry.role, "token")
                by_hash[entry.secret] = _same(self._by_hash.get(entry.secret), p)
        self._by_hash, self._by_cert = by_hash, by_cert
        self._live = {id(p) for p in (*by_hash.values(), *by_cert.values())}
        return len(entries)

    def in_force(self, principal: Principal) -> bool:
        """Is the entry a call was authenticated by still in the file? (A long stream
        checks this: a revoked token ends the streams it opened, not only new calls.)
        Principals not from this file (peer certificates, anonymous) always are."""
        if principal.via not in ("token", "certificate"):
            return True
        return id(principal) in self._live

    def reload(self) -> str:
        """For SIGHUP: the sentence to log."""
        try:
            n = self.load()
        except ValueError as e:
            return f"tokens file not reloaded, the previous entries stay in force: {e}"
        return f"reloaded {n} entries from the tokens file {self.path}"

    def by_token(self, token: str) -> Principal | None:
        return self._by_hash.get(token_hash(token))

    def by_certificate(self, name: str) -> Principal | None:
        return self._by_cert.get(name)


def create_token(path: Path, name: str, role: Role) -> str:
    """Append a new token's hash for `name` and return the token (shown only once)."""
    check_name(name)
    if role is Role.NODE:
        raise ValueError("role node is for the cluster's peer certificates, not tokens")
    token = TOKEN_PREFIX + secrets.token_urlsafe(32)
    line = f"{name} {role.value} {token_hash(token)}\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    # O_APPEND: one write(2) of one line, so two concurrent creates never interleave;
    # 0600: the hashes are not secrets, but nobody else need read who may do what.
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, line.encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    return token


def revoke(path: Path, name: str) -> int:
    """Remove every entry of `name`; the number removed. Takes effect on SIGHUP."""
    lines = path.read_text().splitlines(keepends=True)
    keep = [ln for ln in lines if ln.split("#", 1)[0].split()[:1] != [name]]
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text("".join(keep))
    # the file's own mode: one made readable for a node's container user stays so
    os.chmod(tmp, stat.S_IMODE(path.stat().st_mode))
    os.replace(tmp, path)
    return len(lines) - len(keep)


def list_entries(path: Path) -> list[Entry]:
    return parse(path.read_text(), str(path))


def _same(old: Principal | None, new: Principal) -> Principal:
    return old if old == new else new
