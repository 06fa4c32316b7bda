#!/usr/bin/env bash
# The compose cluster's credentials, made once into deploy/secrets/ (git-ignored;
# `make up` runs this, and running it again changes nothing that exists):
#   ca.pem, ca-key.pem         the cluster CA (the key stays here, no container mounts it)
#   nodeN.pem, nodeN-key.pem   node1..3: public port, HTTP and peer port
#   etcd/                      etcd's own CA: etcd1..3 (client and peer ports) and the
#                              nodes' etcd client certificates (etcd/nodeN.pem). A CA of
#                              its own, because anything the cluster CA signs may follow
#                              the log: an etcd member's certificate must not
#   tokens                     token hashes and roles, the nodes' --tokens-file
#   operator.token             the operator's bearer token (APOLLO11_TOKEN_FILE)
#   prometheus.token           a reader token for the optional Prometheus
#   worker.token               the worker service's token (role worker)
#   s3/                        the archive's bucket (SeaweedFS): a CA of its own and the
#                              server's certificate (s3/seaweedfs.pem: TLS on the S3
#                              port); s3.json, the server's identities (an admin that
#                              creates the bucket, and apollo11, the nodes': read, write
#                              and list); credentials, the nodes' key in the AWS
#                              credentials file format (AWS_SHARED_CREDENTIALS_FILE)
# Delete operator.token (or prometheus.token) and run this again to replace that
# token: the old one is revoked from the tokens file; restart the nodes after it.
set -euo pipefail
cd "$(dirname "$0")/.."
DIR=${APOLLO11_SECRETS_DIR:-deploy/secrets}
APOLLO11=${APOLLO11:-.venv/bin/apollo11}
umask 077

# `docker compose up` before this ran leaves a directory where each mounted file goes
for f in ca.pem tokens worker.token node1.pem node1-key.pem etcd/ca.pem etcd/etcd1.pem etcd/node1.pem \
  s3/ca.pem s3/seaweedfs.pem s3/s3.json s3/credentials; do
  if [ -d "$DIR/$f" ]; then
    echo "secrets: $DIR/$f is a directory (docker made it: compose ran before the" \
      "credentials existed); run make down, remove $DIR, then make up" >&2
    exit 1
  fi
done

# The directory is 0700 (apollo11 certs sees to it): it is what keeps the keys from
# other users of this machine. Containers get single files bind-mounted, never the
# directory, so each node sees its own key and nobody sees the CA's.
"$APOLLO11" certs --dir "$DIR" --nodes node1,node2,node3
"$APOLLO11" certs --dir "$DIR/etcd" --nodes etcd1,etcd2,etcd3,node1,node2,node3

# The bucket's own CA: the S3 server's certificate must not be good on the nodes' peer
# port (anything the cluster CA signs may follow the log) nor on etcd's.
"$APOLLO11" certs --dir "$DIR/s3" --nodes seaweedfs

# The S3 keys, once: random, in the two files that hold them (the server's identities
# and the nodes' credentials file), never in the image or the compose file.
if [ ! -s "$DIR/s3/s3.json" ] || [ ! -s "$DIR/s3/credentials" ]; then
  "${PYTHON:-.venv/bin/python}" - "$DIR/s3" <<'PY'
import json, secrets, sys
from pathlib import Path

d = Path(sys.argv[1])
admin = ("admin-" + secrets.token_hex(8), secrets.token_urlsafe(30))
node = ("apollo11-" + secrets.token_hex(8), secrets.token_urlsafe(30))
identities = [
    {"name": "admin", "credentials": [{"accessKey": admin[0], "secretKey": admin[1]}],
     "actions": ["Admin", "Read", "Write", "List"]},
    {"name": "apollo11", "credentials": [{"accessKey": node[0], "secretKey": node[1]}],
     "actions": ["Read", "Write", "List"]},
]
(d / "s3.json.tmp").write_text(json.dumps({"identities": identities}, indent=2) + "\n")
(d / "credentials.tmp").write_text(
    f"[default]\naws_access_key_id = {node[0]}\naws_secret_access_key = {node[1]}\n"
)
PY
  # read by uid 10001 in the containers; the 0700 directory guards them here
  chmod 0644 "$DIR/s3/s3.json.tmp" "$DIR/s3/credentials.tmp"
  mv "$DIR/s3/s3.json.tmp" "$DIR/s3/s3.json"
  mv "$DIR/s3/credentials.tmp" "$DIR/s3/credentials"
  echo "wrote $DIR/s3/s3.json and $DIR/s3/credentials (the archive's S3 keys)" >&2
fi

# token NAME ROLE FILE MODE: a token file, once; a new one revokes the old hash first.
token() {
  local name=$1 role=$2 file=$DIR/$3 mode=$4
  [ -s "$file" ] && return 0
  if [ -f "$DIR/tokens" ] && "$APOLLO11" token list --tokens-file "$DIR/tokens" | grep -q "^$name	"; then
    "$APOLLO11" token revoke --name "$name" --tokens-file "$DIR/tokens" 2>/dev/null
  fi
  "$APOLLO11" token create --name "$name" --role "$role" --tokens-file "$DIR/tokens" \
    >"$file.tmp" 2>/dev/null
  chmod "$mode" "$file.tmp"
  mv "$file.tmp" "$file"
  echo "wrote $file ($name, $role)" >&2
}
token operator operator operator.token 0600
# Prometheus runs as nobody in its container, so its token file is world-readable
# (inside the 0700 directory, that is this user's and the containers' only); it may
# read the metrics and the status, nothing more.
token prometheus reader prometheus.token 0644
# The worker service (uid 10001 in its container) runs the steps; its token grants the
# worker stream only.
token worker worker worker.token 0644

# The node runs as uid 10001 in its container and must read the tokens file and its
# key: hashes are not secrets (and the keys are 0644 for the same reason, see
# scheduler/security/certs.py); the directory's 0700 guards them on this machine.
chmod 0644 "$DIR/tokens"
