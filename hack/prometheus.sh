#!/usr/bin/env bash
# Make Debian's Prometheus (and promtool, which it ships) available for the tests.
#
# Why Debian's package: the e2e suite must scrape with a real Prometheus, and these machines reach
# package registries only; Debian's build is signed, pinned by the distribution, and brings promtool.
# Idempotent: does nothing when both binaries are already on PATH. Prints their paths.
#
# Installing needs a Debian-based machine (apt-get) and root: run as root, or as a user with
# passwordless sudo. sudo runs with -n (never prompt): the tests run this script with its output
# captured, where a password prompt would hang them until their timeout; without passwordless sudo
# it fails at once, saying what to do.
set -euo pipefail

if command -v prometheus >/dev/null && command -v promtool >/dev/null; then
  command -v prometheus promtool
  exit 0
fi
fail() {
  printf 'hack/prometheus.sh: prometheus and promtool are not on PATH, and %s.
' "$1" >&2
  printf 'Install them once yourself (Debian/Ubuntu: sudo apt-get install prometheus), or run as root or
' >&2
  printf 'with passwordless sudo so that this script can.
' >&2
  exit 1
}
command -v apt-get >/dev/null || fail "this machine has no apt-get (the script installs Debian's package)"
if [[ $(id -u) -ne 0 ]]; then
  command -v sudo >/dev/null || fail "installing them needs root: this user is not root and there is no sudo"
  sudo -n true 2>/dev/null || fail "installing them needs root: sudo asks this user for a password (sudo -n refused)"
  SUDO="sudo -n"
else
  SUDO=
fi
export DEBIAN_FRONTEND=noninteractive
# policy-rc.d 101 keeps the package's postinst from starting a system-wide Prometheus: the tests start
# their own, on loopback, with their own configuration.
policy=/usr/sbin/policy-rc.d
created_policy=0
if [[ ! -e $policy ]]; then
  printf '#!/bin/sh\nexit 101\n' | $SUDO tee "$policy" >/dev/null
  $SUDO chmod +x "$policy"
  created_policy=1
fi
trap '[[ $created_policy -eq 1 ]] && $SUDO rm -f "$policy"' EXIT
if ! apt-cache policy prometheus | grep -q 'Candidate: [0-9]'; then
  $SUDO apt-get update -qq
fi
$SUDO apt-get install -y -qq --no-install-recommends prometheus >/dev/null
command -v prometheus promtool
