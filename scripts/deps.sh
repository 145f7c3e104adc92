#!/usr/bin/env bash
# Installs what the tests need on a fresh Debian machine: Go modules, and tshark for the
# tests that compare softrdma's decoding with Wireshark's. Without root or apt-get the
# tshark-dependent tests skip with a reason instead.
set -euo pipefail
cd "$(dirname "$0")/.."
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
