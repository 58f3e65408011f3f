#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Installs every system dependency of dcp from Debian packages, then the Python environment of the
# Python package (python/): a venv outside the clone, ${XDG_CACHE_HOME:-$HOME/.cache}/dcp-venv,
# made with Debian's /usr/bin/python3 and holding torch, numpy, pytest, scikit-build-core and
# pybind11 from PyPI, and, optionally, the partitioners kahypar and mtkahypar (only
# bench/external_partitioners.py uses them: when their install fails, setup warns and succeeds).
# DCP_PYTHON=/path/to/python uses that interpreter as it is instead (it must have torch >= 2.4 and
# the others; nothing is created, and the optional ones are only reported). The chosen interpreter is recorded in
# .dcp-python at the root of the clone (git-ignored), where CMake finds it
# (cmake/dcp_python.cmake). Non-interactive and idempotent: when everything is present it only
# runs dpkg-query and asks the interpreter which modules it has, in about a second.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

packages=(
  build-essential clang cmake ninja-build ccache pkg-config
  libclang-rt-14-dev llvm  # libFuzzer and the sanitizer runtimes for clang, llvm-symbolizer (fuzz/)
  libgtest-dev libgmock-dev libbenchmark-dev
  libcli11-dev nlohmann-json3-dev libfmt-dev libxxhash-dev
  libtrilinos-zoltan-dev libopenmpi-dev openmpi-bin
  libopenblas-openmp-dev
  python3 python3-venv python3-dev libdlpack-dev
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if ((${#missing[@]} > 0)); then
  sudo_cmd=()
  if [[ $(id -u) -ne 0 ]]; then
    sudo_cmd=(sudo)
  fi
  echo "setup: installing ${missing[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  "${sudo_cmd[@]}" apt-get update -q
  "${sudo_cmd[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

# Python. Prints the modules the interpreter lacks (or torch older than 2.4), without importing
# them (importing torch alone takes seconds).
python_modules=(torch numpy pytest scikit_build_core pybind11)
python_lacks() {
  "$1" - "${python_modules[@]}" <<'PY'
import importlib.metadata, importlib.util, sys
lacking = [m for m in sys.argv[1:] if importlib.util.find_spec(m) is None]
if "torch" not in lacking:
    version = importlib.metadata.version("torch").split("+")[0].split(".")
    if tuple(int(v) for v in version[:2]) < (2, 4):
        lacking.append(f"torch>=2.4 (found {'.'.join(version)})")
print(" ".join(lacking))
PY
}

if [[ -n "${DCP_PYTHON:-}" ]]; then
  python=$DCP_PYTHON
  if ! lacking=$(python_lacks "$python" 2>&1); then
    echo "setup: DCP_PYTHON=$python does not run: $lacking" >&2
    exit 1
  fi
  if [[ -n $lacking ]]; then
    echo "setup: DCP_PYTHON=$python lacks $lacking; install them into it" \
      "(e.g. $python -m pip install 'torch>=2.4' numpy pytest scikit-build-core pybind11)" >&2
    exit 1
  fi
else
  venv=${XDG_CACHE_HOME:-$HOME/.cache}/dcp-venv
  python=$venv/bin/python
  if [[ ! -x $python ]]; then
    echo "setup: creating the Python venv $venv" >&2
    /usr/bin/python3 -m venv "$venv"
  fi
  if [[ -n $(python_lacks "$python") ]]; then
    echo "setup: installing torch numpy pytest scikit-build-core pybind11 into $venv" >&2
    "$python" -m pip install -q --disable-pip-version-check 'torch>=2.4' numpy pytest \
      scikit-build-core pybind11
  fi
fi

# Optional: the hypergraph partitioners that bench/external_partitioners.py measures against dcp's
# own (PyPI wheels; none may exist for this platform or Python). Nothing else needs them, so a
# failed install is a warning, and the script's test skips without them.
optional_modules=(kahypar mtkahypar)
optional_lacking=$("$python" -c 'import importlib.util, sys
print(" ".join(m for m in sys.argv[1:] if importlib.util.find_spec(m) is None))' \
  "${optional_modules[@]}")
if [[ -n $optional_lacking ]]; then
  if [[ -n "${DCP_PYTHON:-}" ]]; then
    echo "setup: note: DCP_PYTHON=$python lacks $optional_lacking (optional, for" \
      "bench/external_partitioners.py: $python -m pip install $optional_lacking)" >&2
  else
    echo "setup: installing $optional_lacking into $venv (optional)" >&2
    # shellcheck disable=SC2086  # one argument per module
    if ! "$python" -m pip install -q --disable-pip-version-check $optional_lacking; then
      echo "setup: warning: could not install $optional_lacking (optional: only" \
        "bench/external_partitioners.py needs them); continuing" >&2
    fi
  fi
fi
# Rewritten only when it changes: CMake reconfigures when it does.
if [[ ! -f $repo/.dcp-python || $(<"$repo/.dcp-python") != "$python" ]]; then
  printf '%s\n' "$python" >"$repo/.dcp-python"
fi

# The oldest torch dcp supports (2.4: torch.library.custom_op), in a second venv, so that the tests
# run on it too (Python.PytestMinimumTorch). Not with DCP_PYTHON: that environment is the user's.
if [[ -z "${DCP_PYTHON:-}" ]]; then
  min_venv=${XDG_CACHE_HOME:-$HOME/.cache}/dcp-venv-torch2.4
  min_python=$min_venv/bin/python
  if [[ ! -x $min_python ]]; then
    echo "setup: creating the Python venv $min_venv (torch 2.4, the oldest supported)" >&2
    /usr/bin/python3 -m venv "$min_venv"
  fi
  if ! "$min_python" -c 'import importlib.metadata as m, importlib.util as u, sys
sys.exit(not (u.find_spec("pytest") and u.find_spec("numpy") and
              m.version("torch").startswith("2.4.")))' 2>/dev/null; then
    echo "setup: installing torch 2.4, numpy and pytest into $min_venv" >&2
    "$min_python" -m pip install -q --disable-pip-version-check 'torch==2.4.*' 'numpy<2' pytest
  fi
  if [[ ! -f $repo/.dcp-python-min || $(<"$repo/.dcp-python-min") != "$min_python" ]]; then
    printf '%s\n' "$min_python" >"$repo/.dcp-python-min"
  fi
else
  rm -f "$repo/.dcp-python-min"
fi
