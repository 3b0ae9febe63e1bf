#!/usr/bin/env bash
# Installs every Debian package memd needs to build, test and benchmark.
# Idempotent and non-interactive: safe to run on every `make` and in CI.
set -euo pipefail

packages=(
  # toolchain
  build-essential cmake ninja-build pkg-config git python3 procps
  # the service stack (daemon, client, telemetry)
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libabsl-dev prometheus-cpp-dev prometheus
  # persistent memory
  libpmem-dev libpmemobj-dev
  # tests and microbenchmarks
  libgtest-dev libgmock-dev libbenchmark-dev
  # the fuzz targets: clang with libFuzzer and its sanitizer runtimes
  clang libclang-rt-14-dev
  # the adversary tests: a client that is not libmemd, in Debian's python3
  # (stubs from grpc_python_plugin, in protobuf-compiler-grpc above)
  python3-grpcio python3-protobuf
  # the Python package (python/): numpy arrays in regions, its pytest tests,
  # and pip installing it into a virtual environment
  python3-numpy python3-pytest python3-venv python3-pip python3-setuptools
  # checks of deploy/: systemd-analyze, and YAML for the DaemonSet
  # (promtool comes with prometheus, above)
  systemd python3-yaml
  # the generated man pages (groff checks them, man reads them for
  # systemd-analyze) and bash for the completion's test
  groff-base man-db bash
  # benchmark peers
  libjemalloc-dev libmimalloc-dev libgoogle-perftools-dev libboost-dev
  # real programs the benchmarks run under each allocator (gcc and python3
  # are above): redis-tools has the server binary and its clients, without
  # the system service the redis-server package would install and start
  redis-tools
)
# `go tool pprof` reads the heap profiles in the tests; a Go installed
# another way (e.g. /usr/local/go) does as well as Debian's.
command -v go >/dev/null 2>&1 || [ -x /usr/local/go/bin/go ] || packages+=(golang-go)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

sudo_cmd=()
[ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
echo "setup: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -qq
"${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
