#!/bin/sh
# Install OpenSSH's server for the fleet tests (tests/sshd.py starts instances on loopback).
# The tests never install anything themselves; CI calls this once from .ci/run.
set -eu
if [ ! -x /usr/sbin/sshd ]; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update
    apt-get install -y --no-install-recommends openssh-server
fi
# sshd refuses to start without its privilege-separation directory.
mkdir -p /run/sshd
chmod 0755 /run/sshd
/usr/sbin/sshd -V 2>&1 | head -n 1 || true
