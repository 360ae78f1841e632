#!/usr/bin/env bash
# Make sure Debian's Chromium and its matching ChromeDriver exist, so `make test` can open the
# dashboard's pages in a real browser (tests/dashboard/test_browser.py drives it with Selenium, given
# both paths explicitly: nothing is downloaded at test time).
# Installs the `chromium` and `chromium-driver` packages when they are missing and we are root
# (a fresh CI clone); elsewhere it says how to install them.
set -euo pipefail

found() {
    command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1
}

if found; then
    exit 0
fi
if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    echo "ensure-browser: chromium and chromedriver not found on PATH." >&2
    echo "To fix: install them (Debian/Ubuntu: sudo apt-get install -y chromium chromium-driver;" >&2
    echo "        macOS: brew install --cask chromium chromedriver)," >&2
    echo "        or run the tests without COMPUTEWISE_REQUIRE_BROWSER=1 to skip the browser cases." >&2
    exit 1
fi
echo "ensure-browser: installing chromium and chromium-driver with apt-get" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# fonts-dejavu-core: a bare image has no font, and the saved screenshots would show empty boxes.
apt-get install -y -qq --no-install-recommends chromium chromium-driver fonts-dejavu-core >/dev/null
found || { echo "ensure-browser: chromium-driver installed, but chromium/chromedriver are still missing" >&2; exit 1; }
