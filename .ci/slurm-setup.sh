#!/usr/bin/env bash
# Install a single-node SLURM toolchain (Debian packages) for the cluster tests.
#
# Idempotent; must run as root. Daemons are NOT started here: the tests start
# and stop them themselves (tests/cluster/slurm_cluster.py).
#
# Exit status is 0 even when the packages cannot be installed (no root, no
# apt, no network): in that case a line starting with "SLURM-SETUP-SKIP:" is
# printed on stdout and the cluster tests skip with that message.
set -u

PKGS=(slurmctld slurmd munge slurm-client)

skip() {
    echo "SLURM-SETUP-SKIP: $*"
    exit 0
}

have_all() {
    command -v slurmctld >/dev/null 2>&1 \
        && command -v slurmd >/dev/null 2>&1 \
        && command -v munged >/dev/null 2>&1 \
        && command -v sinfo >/dev/null 2>&1 \
        && command -v sbatch >/dev/null 2>&1 \
        && command -v squeue >/dev/null 2>&1
}

# slurmctld/slurmd/munged live in /usr/sbin, which may be missing from PATH.
export PATH="$PATH:/usr/sbin:/sbin"

if have_all; then
    echo "SLURM-SETUP-OK: slurm already installed ($(slurmd -V 2>/dev/null))"
    exit 0
fi

[ "$(id -u)" -eq 0 ] || skip "not root; cannot apt-get install ${PKGS[*]}"
command -v apt-get >/dev/null 2>&1 || skip "apt-get not available; cannot install ${PKGS[*]}"

export DEBIAN_FRONTEND=noninteractive
# Never let package postinst scripts start services (no systemd in CI anyway).
policy=/usr/sbin/policy-rc.d
created_policy=0
if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' >"$policy"
    chmod 755 "$policy"
    created_policy=1
fi
cleanup() {
    if [ "$created_policy" -eq 1 ]; then rm -f "$policy"; fi
}
trap cleanup EXIT

if ! apt-get update -qq; then
    skip "apt-get update failed; cannot install ${PKGS[*]}"
fi
if ! apt-get install -y -qq --no-install-recommends \
        -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold \
        "${PKGS[@]}"; then
    skip "apt-get install ${PKGS[*]} failed"
fi

have_all || skip "packages installed but slurm binaries still missing"
echo "SLURM-SETUP-OK: installed ${PKGS[*]} ($(slurmd -V 2>/dev/null))"
exit 0
