#!/usr/bin/env bash
# Installs the Debian packages the build needs, only those that are missing.
# Idempotent: a second run installs nothing and prints nothing but the summary.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config ccache
  libsqlite3-dev sqlite3
  libcli11-dev nlohmann-json3-dev libutf8proc-dev
  libopenblas-dev libopenblas0-pthread
  openmpi-bin libopenmpi-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  libprotobuf-dev protobuf-compiler libisal-dev
  librsvg2-dev libgumbo-dev
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#packages[@]} build packages present"
  exit 0
fi

echo "setup: installing ${missing[*]}"
sudo=""
if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "setup: done"
