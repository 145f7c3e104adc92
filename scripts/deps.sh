#!/usr/bin/env bash
# Installs what the tests need on a fresh Debian machine: Go modules, tshark for the
# tests that compare softrdma's decoding with Wireshark's, and chromium, in which a test
# renders decode's HTML report. Without root or apt-get the
# tshark-dependent tests skip with a reason instead. The same for gcc, rdma-core's headers
# (libibverbs-dev, librdmacm-dev) and tools (ibverbs-utils, rdmacm-utils, perftest), which
# `make lib` and its tests need; `deps.sh lib` installs only those, and fails if it cannot.
set -euo pipefail
cd "$(dirname "$0")/.."
apt_install() {
  [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 || return 1
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null && apt-get install -y -qq "$@" >/dev/null
}
lib_deps_present() {
  command -v gcc >/dev/null 2>&1 && [ -f /usr/include/infiniband/verbs.h ] && command -v ibv_devinfo >/dev/null 2>&1 &&
    [ -f /usr/include/rdma/rdma_cma.h ] && command -v rping >/dev/null 2>&1 && command -v ib_write_bw >/dev/null 2>&1 &&
    [ -d /usr/lib/python3/dist-packages/pyverbs ]
}
if ! lib_deps_present; then
  echo "deps: installing gcc, libibverbs-dev, librdmacm-dev, ibverbs-utils, rdmacm-utils, perftest and python3-pyverbs for make lib and its tests"
  if ! apt_install gcc libibverbs-dev librdmacm-dev ibverbs-utils rdmacm-utils perftest python3-pyverbs; then
    echo "deps: cannot install gcc/libibverbs-dev/librdmacm-dev/ibverbs-utils/rdmacm-utils/perftest/python3-pyverbs (need root and apt-get): make lib fails, its tests skip"
    [ "${1:-}" = lib ] && exit 1
  fi
fi
# Other unmodified verbs programs the tests run on the libraries (qperf, libfabric's
# fi_info and fi_pingpong, UCX's ucx_info); their tests skip without them, so a
# failure here fails nothing.
if ! command -v qperf >/dev/null 2>&1 || ! command -v fi_pingpong >/dev/null 2>&1 || ! command -v ucx_info >/dev/null 2>&1; then
  echo "deps: installing qperf, libfabric-bin and ucx-utils for the tests that run them on the libraries"
  apt_install qperf libfabric-bin ucx-utils || echo "deps: cannot install qperf/libfabric-bin/ucx-utils (need root and apt-get): their tests skip"
fi
[ "${1:-}" = lib ] && exit 0
go mod download
if ! command -v tshark >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "deps: installing tshark (Debian package) for the capture tests"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >/dev/null
    apt-get install -y -qq tshark >/dev/null
  else
    echo "deps: tshark missing and cannot install it (need root and apt-get): its tests will skip"
  fi
fi
if ! command -v chromium >/dev/null 2>&1 && ! command -v chromium-browser >/dev/null 2>&1; then
  echo "deps: installing chromium (Debian package) to render decode's HTML report in a test"
  if ! apt_install chromium; then
    echo "deps: cannot install chromium (need root and apt-get): TestHTMLChromium will skip"
  fi
fi
