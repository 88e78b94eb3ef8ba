#!/usr/bin/env bash
# Installs the Debian packages tracecache builds with, if any is missing.
# Idempotent and non-interactive; does nothing when everything is present.
set -euo pipefail
packages=(
  cmake ninja-build g++ pkg-config
  libsqlite3-dev sqlite3 libxxhash-dev libprotobuf-dev protobuf-compiler
  libcli11-dev libfmt-dev libgtest-dev libgmock-dev libbenchmark-dev libopenblas-dev
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
echo "setup: installing ${missing[*]}" >&2
sudo_cmd=()
[ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -qq
"${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
