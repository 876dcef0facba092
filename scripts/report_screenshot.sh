#!/usr/bin/env bash
# Renders a report (`llm_sqlrl report`, or the demo's runs/demo/report.html) in headless Chromium
# to a PNG, as a browser shows it: scripts/report_screenshot.sh REPORT.html OUT.png [WIDTHxHEIGHT [SCALE]]
# (SCALE < 1 shrinks the picture: docs/report_screenshot.png is 1280x1100 at 0.6).
# Run by hand (Debian: chromium); the README's screenshot (docs/report_screenshot.png) comes from it.
set -euo pipefail
if [ $# -lt 2 ]; then
  echo "usage: $0 REPORT.html OUT.png [WIDTHxHEIGHT (default 1280x2000) [SCALE (default 1)]]" >&2
  exit 2
fi
report=$(realpath "$1")
out=$(realpath -m "$2")
size=${3:-1280x2000}
scale=${4:-1}
browser=$(command -v chromium || command -v chromium-browser || command -v google-chrome || true)
if [ -z "$browser" ]; then
  echo "report_screenshot: no chromium found (Debian: apt-get install chromium)" >&2
  exit 1
fi
# --no-sandbox: Chromium refuses to run as root with its sandbox (CI containers); the page is our
# own file and loads nothing else.
sandbox=()
if [ "$(id -u)" -eq 0 ]; then sandbox=(--no-sandbox); fi
"$browser" --headless --disable-gpu "${sandbox[@]}" --hide-scrollbars --force-device-scale-factor="$scale" --screenshot="$out" \
  --window-size="${size/x/,}" "file://$report" 2>/dev/null
test -s "$out" || { echo "report_screenshot: $browser wrote no $out" >&2; exit 1; }
echo "report_screenshot: $out"
