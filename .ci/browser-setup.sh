#!/usr/bin/env bash
# Install Debian's headless browser (chromium and its chromedriver) for the leaderboard's
# browser test (tests/report/test_leaderboard.py).
#
# Idempotent; must run as root. Exit status is 0 even when the packages cannot be installed
# (no root, no apt, no network): in that case a line starting with "BROWSER-SETUP-SKIP:" is
# printed on stdout and the browser test skips with that message.
set -u

PKGS=(chromium chromium-driver)
CHROMIUM=/usr/bin/chromium
CHROMEDRIVER=/usr/bin/chromedriver
# Wait for a dpkg lock another setup script (.ci/slurm-setup.sh) may hold at the same time.
LOCK_WAIT=(-o DPkg::Lock::Timeout=600)

skip() {
    echo "BROWSER-SETUP-SKIP: $*"
    exit 0
}

have_all() {
    [ -x "$CHROMIUM" ] && [ -x "$CHROMEDRIVER" ] \
        && "$CHROMIUM" --version >/dev/null 2>&1 \
        && "$CHROMEDRIVER" --version >/dev/null 2>&1
}

versions() {
    echo "$("$CHROMIUM" --version 2>/dev/null); $("$CHROMEDRIVER" --version 2>/dev/null)"
}

if have_all; then
    echo "BROWSER-SETUP-OK: browser already installed ($(versions))"
    exit 0
fi

[ "$(id -u)" -eq 0 ] || skip "not root; cannot apt-get install ${PKGS[*]}"
command -v apt-get >/dev/null 2>&1 || skip "apt-get not available; cannot install ${PKGS[*]}"

export DEBIAN_FRONTEND=noninteractive
# apt-get update does not wait for the lists lock: try again a few times.
updated=0
for _ in 1 2 3 4 5; do
    if apt-get "${LOCK_WAIT[@]}" update -qq; then updated=1; break; fi
    sleep 10
done
[ "$updated" -eq 1 ] || skip "apt-get update failed; cannot install ${PKGS[*]}"
if ! apt-get "${LOCK_WAIT[@]}" install -y -qq --no-install-recommends "${PKGS[@]}"; then
    skip "apt-get install ${PKGS[*]} failed"
fi

have_all || skip "packages installed but $CHROMIUM or $CHROMEDRIVER does not run"
echo "BROWSER-SETUP-OK: installed ${PKGS[*]} ($(versions))"
exit 0
