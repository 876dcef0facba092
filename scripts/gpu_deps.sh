#!/usr/bin/env bash
# The lent GPU machine has nvcc, CMake, ninja and a C++ compiler but no network, so setup.sh's
# apt-get cannot run there. This downloads (here, where apt works) the .deb files of the
# libraries the build needs into DIR (default .deps, which git ignores); scripts/gpu_check.sh
# unpacks them into a private prefix there (never over /) and builds against that prefix.
#   scripts/gpu_deps.sh [DIR]
# then: device run, carry [".deps"], command "scripts/gpu_check.sh $OUT".
# Debian 12 builds: they need glibc >= 2.36, which the machine's newer image has.
set -euo pipefail
dir=${1:-.deps}
cd "$(dirname "$0")/.."
# setup.sh's libraries (headers, CMake/pkg-config files, static and shared objects), what their
# shared objects load at run time (OpenBLAS: libgfortran, libquadmath; protoc: libprotoc), and pkgconf itself,
# which the image may lack. The toolchain (compiler, cmake, ninja) is the machine's own.
packages=(
  libsqlite3-dev libsqlite3-0
  libcli11-dev nlohmann-json3-dev
  libutf8proc-dev libutf8proc2
  libopenblas-dev libopenblas-pthread-dev libopenblas0-pthread libgfortran5 libquadmath0
  libgtest-dev libgmock-dev libbenchmark-dev libbenchmark1debian
  libprotobuf-dev libprotobuf32 libprotobuf-lite32 protobuf-compiler libprotoc32
  libisal-dev libisal2
  pkgconf pkgconf-bin libpkgconf3
  # Open MPI and what its libraries and plugins load, so that the multi-process tests (ranks
  # sharing the one GPU) build and run there; gpu_check.sh relocates it with OPAL_PREFIX.
  openmpi-bin openmpi-common libopenmpi3 libopenmpi-dev libpmix2 libhwloc15 libhwloc-plugins
  libevent-2.1-7 libevent-core-2.1-7 libevent-pthreads-2.1-7 libfabric1 libucx0 libibverbs1
  librdmacm1 ibverbs-providers libnl-3-200 libnl-route-3-200 libpsm-infinipath1 libpsm2-2 libltdl7
  libmunge2 libxnvctrl0
)
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
rm -f "$dir"/*.deb
# apt's sandbox user cannot write to a folder owned by another user; download as we are.
(cd "$dir" && apt-get download -o APT::Sandbox::User=root "${packages[@]}" >/dev/null)
count=$(ls "$dir"/*.deb | wc -l)
[ "$count" -eq "${#packages[@]}" ] || { echo "gpu_deps: expected ${#packages[@]} .deb files, got $count" >&2; exit 1; }
echo "gpu_deps: $count packages, $(du -sh "$dir" | cut -f1) in $dir"
