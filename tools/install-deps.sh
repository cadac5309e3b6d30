#!/bin/sh
# Installs every Debian package Shoal needs to build, test, fuzz and benchmark.
# (tshark: test_curve captures loopback traffic to show CURVE leaves no plaintext;
# prometheus: test_http runs its promtool on every node binary's /metrics; chromium,
# chromium-driver, python3-selenium: test_dashboard drives the dashboard in headless Chromium;
# dnsmasq-base: test_discovery answers its test zone with a dnsmasq of its own, on 127.0.0.1
# and a port of its own; -base is the program without the system service that would take
# port 53 from the machine's resolver. scdoc: the man pages, docs/man/*.1.scd. abigail-tools:
# abidiff, which `scons abi` runs to compare libshoal.so's public ABI with the previous releases'.
# spin: `scons model` model-checks the rules in model/*.pml, docs/models.md. curl, openssl:
# test_http_hostile makes a certificate and asks the management endpoint over TLS. gnuplot-nox:
# `scons bench` draws bench_latency's latency-vs-load plot, docs/performance.md. debhelper,
# dpkg-dev, fakeroot, lintian: `scons deb` builds and lints the Debian packages; debootstrap:
# tools/deb-test.sh installs them in a bare Debian 12.)
# Idempotent: packages already present are left as they are. Needs root (or sudo).
set -eu

PACKAGES="
  build-essential pkg-config scons python3 scdoc abigail-tools
  libzmq3-dev libczmq-dev
  liblmdb-dev lmdb-utils
  libprotobuf-c-dev protobuf-c-compiler
  libxxhash-dev zlib1g-dev
  libjansson-dev libmicrohttpd-dev
  libcmocka-dev
  clang libclang-rt-14-dev valgrind
  serf
  redis-server redis-tools libhiredis-dev
  tshark
  prometheus
  chromium chromium-driver python3-selenium
  dnsmasq-base
  iproute2 iptables iputils-ping faketime
  curl openssl
  spin
  gnuplot-nox debhelper dpkg-dev fakeroot lintian debootstrap
"

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    SUDO="sudo"
fi

missing=""
for p in $PACKAGES; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
        missing="$missing $p"
    fi
done

if [ -z "$missing" ]; then
    echo "install-deps: all packages present"
    exit 0
fi

echo "install-deps: installing$missing"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
# shellcheck disable=SC2086
$SUDO apt-get install -y -q --no-install-recommends $missing
