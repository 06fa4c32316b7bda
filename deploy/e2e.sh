#!/usr/bin/env bash
# End-to-end check of the docker compose deployment, on a machine that may have no
# Docker engine and no registry (CI here). Steps:
#   1. install docker.io + docker-compose from Debian when missing; start dockerd
#   2. base images: pull python:3.11-slim and the etcd image; when that is not possible,
#      build a local Debian bookworm base (debootstrap: python3, python3-venv,
#      etcd-server) and `docker import` it, once (cached afterwards)
#   3. the wheelhouse on the host (pip wheel), then `compose build` and `up`
#   4. deploy/e2e_check.py from the host: tasks via the CLI, docker kill of the
#      primary, takeover within TTL + 2 s, every acknowledged task completes,
#      docker start of the old primary: it rejoins as a standby
#   5. tear everything down (also on failure)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
PROJECT=apollo11e2e
LOCAL_BASE=apollo11-base:bookworm
export APOLLO11_LEASE_TTL=${APOLLO11_LEASE_TTL:-5}
SECONDS=0

log() { printf '%s e2e: %s\n' "$(date +%T)" "$*"; }

# ---------------------------------------------------------------- 1. engine
if ! command -v dockerd >/dev/null 2>&1 || ! command -v docker-compose >/dev/null 2>&1; then
  log "installing docker.io and docker-compose from Debian"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq docker.io docker-compose >/dev/null
fi
if ! docker info >/dev/null 2>&1; then
  log "starting dockerd"
  (dockerd >/tmp/apollo11-dockerd.log 2>&1 &)
  for _ in $(seq 1 60); do docker info >/dev/null 2>&1 && break; sleep 1; done
  docker info >/dev/null 2>&1 || { tail -30 /tmp/apollo11-dockerd.log; log "dockerd did not start"; exit 1; }
fi
if docker compose version >/dev/null 2>&1; then COMPOSE=(docker compose); else COMPOSE=(docker-compose); fi
log "using ${COMPOSE[*]} ($("${COMPOSE[@]}" version --short 2>/dev/null || true))"

# ---------------------------------------------------------------- 2. base images
BASE=${APOLLO11_BASE_IMAGE:-python:3.11-slim}
ETCD=${ETCD_IMAGE:-quay.io/coreos/etcd:v3.5.17}
have() { docker image inspect "$1" >/dev/null 2>&1; }
pull() { timeout 60 docker pull -q "$1" >/dev/null 2>&1; }
if ! have "$BASE" && ! pull "$BASE" || ! have "$ETCD" && ! pull "$ETCD"; then
  if ! have "$LOCAL_BASE"; then
    log "no registry: building $LOCAL_BASE with debootstrap (once; cached afterwards)"
    command -v debootstrap >/dev/null 2>&1 || apt-get install -y -qq debootstrap >/dev/null
    ROOTFS=$(mktemp -d /tmp/apollo11-rootfs.XXXXXX)
    debootstrap --variant=minbase --include=python3,python3-venv,etcd-server,ca-certificates \
      bookworm "$ROOTFS" http://deb.debian.org/debian >/tmp/apollo11-debootstrap.log 2>&1 \
      || { tail -20 /tmp/apollo11-debootstrap.log; exit 1; }
    rm -rf "$ROOTFS"/var/cache/apt/archives/*.deb "$ROOTFS"/var/lib/apt/lists/*
    tar -C "$ROOTFS" -c . | docker import - "$LOCAL_BASE" >/dev/null
    rm -rf "$ROOTFS"
  fi
  have "$BASE" || BASE=$LOCAL_BASE
  have "$ETCD" || ETCD=$LOCAL_BASE
fi
export APOLLO11_BASE_IMAGE=$BASE ETCD_IMAGE=$ETCD APOLLO11_IMAGE=apollo11:e2e
log "node base image: $BASE; etcd image: $ETCD"

# ---------------------------------------------------------------- 3. build, up
log "building the wheelhouse on the host"
make -s wheelhouse >/tmp/apollo11-wheelhouse.log 2>&1 || { tail -20 /tmp/apollo11-wheelhouse.log; exit 1; }
cleanup() {
  status=$?
  if [ $status -ne 0 ]; then
    log "failed; last node logs:"
    "${COMPOSE[@]}" -p $PROJECT -f deploy/docker-compose.yml logs --tail 20 node1 node2 node3 || true
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
log "starting etcd x3 and three nodes"
"${COMPOSE[@]}" -p $PROJECT -f deploy/docker-compose.yml up -d >/tmp/apollo11-up.log 2>&1 \
  || { tail -30 /tmp/apollo11-up.log; exit 1; }

# ---------------------------------------------------------------- 4. checks
"$ROOT/.venv/bin/python" deploy/e2e_check.py --ttl "$APOLLO11_LEASE_TTL"
log "passed in ${SECONDS}s"
