#!/usr/bin/env bash
# Make a Docker engine answer on this machine and make sure the local base image the example
# models build FROM exists. No registry is reachable here, so the base image is made with
# debootstrap + docker import. Idempotent: safe to call before every test run.
set -euo pipefail
BASE_IMAGE="${MADENGINE_BASE_IMAGE:-madengine-base:bookworm}"

if ! command -v dockerd >/dev/null 2>&1; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq docker.io >/dev/null
fi
if ! docker info >/dev/null 2>&1; then
  mkdir -p /var/log
  (setsid dockerd >/var/log/dockerd.log 2>&1 &)
  for _ in $(seq 1 60); do docker info >/dev/null 2>&1 && break; sleep 1; done
  docker info >/dev/null 2>&1 || { echo "docker-up: dockerd did not start; see /var/log/dockerd.log" >&2; exit 1; }
fi
if ! docker image inspect "$BASE_IMAGE" >/dev/null 2>&1; then
  command -v debootstrap >/dev/null 2>&1 || { apt-get update -qq; DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null; }
  root=$(mktemp -d /tmp/madengine-rootfs.XXXXXX)
  debootstrap --variant=minbase --include=python3,python3-numpy,git,procps,ca-certificates bookworm "$root" >/tmp/debootstrap.log 2>&1 \
    || { echo "docker-up: debootstrap failed; see /tmp/debootstrap.log" >&2; exit 1; }
  rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
  tar -C "$root" -c . | docker import - "$BASE_IMAGE" >/dev/null
  rm -rf "$root"
fi
echo "docker-up: engine ready, base image $BASE_IMAGE present" >&2
