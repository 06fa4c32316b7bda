#!/usr/bin/env bash
# End-to-end check of the docker compose deployment, on a machine that may have no
# Docker engine and no registry (CI here). Steps:
#   1. install docker.io + docker-compose from Debian when missing; start dockerd
#   2. base images: pull python:3.11-slim and the etcd image; when that is not possible,
#      build a local Debian bookworm base (debootstrap: python3, python3-venv,
#      etcd-server) and `docker import` it, once (cached afterwards)
#   3. the credentials (deploy/secrets.sh: CA, certificates, tokens; once), the
#      wheelhouse on the host (pip wheel), then `compose build` and `up`, with the
#      examples module loaded (the compose file loads no workflows unless asked)
#   4. deploy/e2e_check.py from the host, with the operator's token: no token is
#      UNAUTHENTICATED, plaintext is refused, status says tls/tokens/peer mTLS, a
#      cancel is recorded as the token's principal, HTTP is https and /metrics wants
#      the reader token, etcd answers only TLS clients with a certificate; then tasks
#      via the CLI, docker kill of the primary, takeover within TTL + 2 s, every
#      acknowledged task completes, docker start of the old primary: it rejoins as
#      a standby; then the archive: the sealed segments of the run reach the seaweedfs
#      service's bucket (segments of 16 KB here), `apollo11 archive verify` finds every
#      object sound and `apollo11 restore` rebuilds a data directory from it
#   5. tear everything down (also on failure)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
PROJECT=apollo11e2e
export APOLLO11_LEASE_TTL=${APOLLO11_LEASE_TTL:-5}
export APOLLO11_WORKFLOWS=apollo11.scheduler.examples,apollo11.scheduler.examples.nightly
# small segments: a few tasks seal some, so the bucket has history to check
export APOLLO11_SEGMENT_MAX_BYTES=${APOLLO11_SEGMENT_MAX_BYTES:-16384}
SECONDS=0

log() { printf '%s e2e: %s\n' "$(date +%T)" "$*"; }

# ---------------------------------------------------------------- 1-2. engine, images
eval "$(deploy/images.sh)"
read -r -a COMPOSE <<<"$COMPOSE"
export APOLLO11_IMAGE=apollo11:e2e

# ---------------------------------------------------------------- 3. build, up
log "credentials in deploy/secrets (made once)"
deploy/secrets.sh 2>/tmp/apollo11-secrets.log || { cat /tmp/apollo11-secrets.log; exit 1; }
log "building the wheelhouse on the host"
make -s wheelhouse >/tmp/apollo11-wheelhouse.log 2>&1 || { tail -20 /tmp/apollo11-wheelhouse.log; exit 1; }
cleanup() {
  status=$?
  if [ $status -ne 0 ]; then
    log "failed; last node logs:"
    "${COMPOSE[@]}" -p $PROJECT -f deploy/docker-compose.yml logs --tail 20 etcd1 seaweedfs node1 node2 node3 || true
  fi
  "${COMPOSE[@]}" -p $PROJECT -f deploy/docker-compose.yml down -v --remove-orphans >/dev/null 2>&1 || true
  log "torn down after ${SECONDS}s"
  exit $status
}
trap cleanup EXIT
"${COMPOSE[@]}" -p $PROJECT -f deploy/docker-compose.yml down -v --remove-orphans >/dev/null 2>&1 || true
log "building the node image"
"${COMPOSE[@]}" -p $PROJECT -f deploy/docker-compose.yml build --quiet >/tmp/apollo11-build.log 2>&1 \
  || { tail -30 /tmp/apollo11-build.log; exit 1; }
log "starting etcd x3, seaweedfs (the archive's bucket) and three nodes"
"${COMPOSE[@]}" -p $PROJECT -f deploy/docker-compose.yml up -d >/tmp/apollo11-up.log 2>&1 \
  || { tail -30 /tmp/apollo11-up.log; exit 1; }

# ---------------------------------------------------------------- 4. checks
# etcd publishes no port; the host reaches a member on the compose network's bridge.
ETCD1=$(docker inspect -f '{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}' \
  "$("${COMPOSE[@]}" -p $PROJECT -f deploy/docker-compose.yml ps -q etcd1)")
APOLLO11_CA=deploy/secrets/ca.pem APOLLO11_TOKEN_FILE=deploy/secrets/operator.token \
  "$ROOT/.venv/bin/python" deploy/e2e_check.py --ttl "$APOLLO11_LEASE_TTL" --etcd "$ETCD1:2379"
log "passed in ${SECONDS}s"
