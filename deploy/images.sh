#!/usr/bin/env bash
# Make sure a Docker engine runs and the base images exist; print the environment
# (ENGINE/COMPOSE/APOLLO11_BASE_IMAGE/ETCD_IMAGE) for `make up` and deploy/e2e.sh.
#   - installs docker.io and docker-compose from Debian when missing, starts dockerd
#   - uses python:3.11-slim and the etcd image when present or pullable; otherwise
#     builds a local Debian bookworm base (debootstrap: python3, python3-venv,
#     etcd-server) once, `docker import`s it, and uses it for both
set -euo pipefail
LOCAL_BASE=apollo11-base:bookworm
log() { printf '%s images: %s\n' "$(date +%T)" "$*" >&2; }

if ! command -v dockerd >/dev/null 2>&1 || ! command -v docker-compose >/dev/null 2>&1; then
  log "installing docker.io and docker-compose from Debian"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >&2
  apt-get install -y -qq docker.io docker-compose >/dev/null
fi
if ! docker info >/dev/null 2>&1; then
  log "starting dockerd"
  (dockerd >/tmp/apollo11-dockerd.log 2>&1 &)
  for _ in $(seq 1 60); do docker info >/dev/null 2>&1 && break; sleep 1; done
  docker info >/dev/null 2>&1 || { tail -30 /tmp/apollo11-dockerd.log >&2; log "dockerd did not start"; exit 1; }
fi

BASE=${APOLLO11_BASE_IMAGE:-python:3.11-slim}
ETCD=${ETCD_IMAGE:-quay.io/coreos/etcd:v3.5.17}
have() { docker image inspect "$1" >/dev/null 2>&1; }
pull() { timeout 60 docker pull -q "$1" >/dev/null 2>&1; }
if { ! have "$BASE" && ! pull "$BASE"; } || { ! have "$ETCD" && ! pull "$ETCD"; }; then
  if ! have "$LOCAL_BASE"; then
    log "no registry: building $LOCAL_BASE with debootstrap (once; cached afterwards)"
    command -v debootstrap >/dev/null 2>&1 || apt-get install -y -qq debootstrap >/dev/null
    ROOTFS=$(mktemp -d /tmp/apollo11-rootfs.XXXXXX)
    debootstrap --variant=minbase --include=python3,python3-venv,etcd-server,ca-certificates \
      bookworm "$ROOTFS" http://deb.debian.org/debian >/tmp/apollo11-debootstrap.log 2>&1 \
      || { tail -20 /tmp/apollo11-debootstrap.log >&2; exit 1; }
    rm -rf "$ROOTFS"/var/cache/apt/archives/*.deb "$ROOTFS"/var/lib/apt/lists/*
    tar -C "$ROOTFS" -c . | docker import - "$LOCAL_BASE" >/dev/null
    rm -rf "$ROOTFS"
  fi
  have "$BASE" || BASE=$LOCAL_BASE
  have "$ETCD" || ETCD=$LOCAL_BASE
fi
if docker compose version >/dev/null 2>&1; then COMPOSE="docker compose"; else COMPOSE=docker-compose; fi
log "node base image: $BASE; etcd image: $ETCD; compose: $COMPOSE"
echo "export APOLLO11_BASE_IMAGE='$BASE' ETCD_IMAGE='$ETCD' COMPOSE='$COMPOSE'"
