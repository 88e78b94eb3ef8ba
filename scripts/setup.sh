#!/usr/bin/env bash
# Installs the Debian packages tracecache builds with, if any is missing.
# Idempotent and non-interactive; does nothing when everything is present.
#
#   scripts/setup.sh           the build dependencies (what scripts/build.sh runs), and the
#                              tools of `tracecache report` and its test: graphviz (dot draws
#                              the graphs) and chromium (the test opens the page headless)
#   scripts/setup.sh --peers   only the PyTorch peer's: Debian's python3-torch 1.13 and
#                              python3-torchvision 0.14 (they import under /usr/bin/python3)
#                              with OpenBLAS, for bench/peers/ and
#                              scripts/export_torchvision_weights.py, and libtorch-dev: the
#                              headers the Python package's torch bridge builds against
#                              (tracecache.torch's per-call path in C++, docs/python.md)
set -euo pipefail
# ocl-icd-opencl-dev: Debian builds oneDNN with its OpenCL GPU runtime, so dnnl's CMake config
# (find_package(dnnl)) requires OpenCL's headers and libOpenCL.so; libdnnl-dev only recommends
# the package, and this script installs without recommends.
# libopenblas0-pthread: the system's default libopenblas.so.0 / libblas.so.3 stays the pthreads
# build (priority 100 against the OpenMP build's 95), which numpy and PyTorch load; tracecache
# links the OpenMP build by path (docs/architecture.md). Without it, libopenblas-dev (--peers) is
# satisfied by the OpenMP -dev package already here and the OpenMP build becomes the default.
packages=(
  cmake ninja-build g++ pkg-config clang libclang-rt-14-dev
  libsqlite3-dev sqlite3 libxxhash-dev libprotobuf-dev protobuf-compiler libhiredis-dev redis-server
  libcli11-dev libfmt-dev libgtest-dev libgmock-dev libbenchmark-dev libopenblas-openmp-dev libopenblas0-pthread libdnnl-dev
  ocl-icd-opencl-dev
  pybind11-dev python3-dev python3-numpy
  libonnx-dev libonnx-testdata python3-onnx
  graphviz chromium
)
for arg in "$@"; do
  case "$arg" in
    --peers) packages=(python3-torch python3-torchvision libtorch-dev libopenblas-dev libopenblas0-pthread) ;;
    -h|--help) sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "setup: unknown option '$arg' (try --help)" >&2; exit 2 ;;
  esac
done
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
