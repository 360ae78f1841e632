#!/usr/bin/env bash
# Make sure the Prometheus server binary exists, so `make test` can run the Grafana dashboard's test
# (tests/dashboard/test_grafana_prometheus.py starts a private Prometheus on 127.0.0.1 that scrapes a real
# `computewise run` and `computewise serve`). Installs Debian's `prometheus` package when it is missing
# and we are root (a fresh CI clone); the package's own service is stopped and disabled: the test
# starts its own server as a child and nothing else should listen on the machine.
set -euo pipefail

found() {
    command -v prometheus >/dev/null 2>&1 || [ -x /usr/bin/prometheus ]
}

if found; then
    exit 0
fi
if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    echo "ensure-prometheus: the prometheus server binary was not found." >&2
    echo "To fix: install Prometheus (Debian/Ubuntu: sudo apt-get install -y prometheus; macOS: brew install prometheus)," >&2
    echo "        or run the tests without COMPUTEWISE_REQUIRE_PROMETHEUS=1 to skip the Prometheus case." >&2
    exit 1
fi
echo "ensure-prometheus: installing Prometheus with apt-get" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# policy-rc.d exit 101: Debian's maintainer scripts must not start the packaged service (a CI container
# may have no init system, and the test wants no other Prometheus on the machine).
created_policy=0
if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
    chmod +x /usr/sbin/policy-rc.d
    created_policy=1
fi
status=0
apt-get install -y -qq --no-install-recommends prometheus >/dev/null || status=$?
if [ "$created_policy" -eq 1 ]; then
    rm -f /usr/sbin/policy-rc.d
fi
[ "$status" -eq 0 ] || { echo "ensure-prometheus: apt-get install prometheus failed ($status)" >&2; exit "$status"; }
found || { echo "ensure-prometheus: prometheus installed, but the prometheus binary is still missing" >&2; exit 1; }
