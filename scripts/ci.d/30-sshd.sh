#!/usr/bin/env bash
# OpenSSH server and git for the data-provider (NAS over SFTP) and git-over-SSH tests.
# The tests start their own sshd (generated host key and config, loopback port); this hook only
# installs the binaries and the privilege-separation folder sshd insists on. Idempotent.
set -euo pipefail
missing=()
[ -x /usr/sbin/sshd ] || missing+=(openssh-server)
command -v ssh >/dev/null 2>&1 || missing+=(openssh-client)
command -v ssh-keygen >/dev/null 2>&1 || missing+=(openssh-client)
[ -x /usr/lib/git-core/git-http-backend ] || missing+=(git)
if [ "${#missing[@]}" -gt 0 ]; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
# Debian's package starts a system sshd on port 22 under systemd; the tests do not need it.
mkdir -p /run/sshd
chmod 0755 /run/sshd
echo "30-sshd: $(/usr/sbin/sshd -V 2>&1 | head -n1)" >&2
