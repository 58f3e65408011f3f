#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Installs every system dependency of dcp from Debian packages. Non-interactive and idempotent:
# when everything is present it only runs dpkg-query and returns in well under a second.
set -euo pipefail

packages=(
  build-essential clang cmake ninja-build ccache pkg-config
  libgtest-dev libgmock-dev libbenchmark-dev
  libcli11-dev nlohmann-json3-dev libfmt-dev
  libtrilinos-zoltan-dev libopenmpi-dev openmpi-bin
  libopenblas-openmp-dev
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if ((${#missing[@]} == 0)); then
  exit 0
fi

sudo_cmd=()
if [[ $(id -u) -ne 0 ]]; then
  sudo_cmd=(sudo)
fi
echo "setup: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -q
"${sudo_cmd[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"
