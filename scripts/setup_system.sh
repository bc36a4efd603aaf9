#!/usr/bin/env bash
# System packages interp needs outside Python: a Chrome for kaleido's PNG/SVG/PDF export and
# for the report's headless render test. Installs Debian's chromium where it is missing and apt
# is usable; otherwise says what is missing (static export then raises a clear ExportError).
set -euo pipefail
if command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1; then
  exit 0
fi
if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
  echo "setup: installing Debian chromium for static plot export"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
else
  echo "setup: chromium not found and apt-get unavailable (or not root); PNG/SVG/PDF export will be unavailable" >&2
fi
