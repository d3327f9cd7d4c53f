#!/usr/bin/env bash
# Make Debian's Prometheus (and promtool, which it ships) available for the tests.
#
# Why Debian's package: the e2e suite must scrape with a real Prometheus, and these machines reach
# package registries only; Debian's build is signed, pinned by the distribution, and brings promtool.
# Idempotent: does nothing when both binaries are already on PATH. Prints their paths.
set -euo pipefail

if command -v prometheus >/dev/null && command -v promtool >/dev/null; then
  command -v prometheus promtool
  exit 0
fi
if [[ $(id -u) -ne 0 ]]; then
  SUDO=sudo
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
