#!/bin/sh
# install-deps.sh - install the Debian packages a make target needs, when
# missing. Usage: tools/install-deps.sh build|test|bench|container|fuzz|fresh|cpus
#   build      compiler, libraries and headers (make, make run)
#   test       build + what the test suites drive (node, chromium, nginx, promtool,
#              curl for the README examples)
#   bench      test + wrk, PyTorch and FastAPI/uvicorn (the benchmark peers),
#              strace and valgrind (bench/path_profile.py)
#   container  buildah, debootstrap, curl, python3 (make container-test)
#   fuzz       build + clang and its libFuzzer runtime (make fuzz)
#   fresh      debootstrap, curl, python3 (make fresh-test)
#   cpus       test + qemu-user, the aarch64 cross compiler and the build's
#              libraries for arm64 (make test-cpus); adds arm64 to dpkg's
#              foreign architectures first
# Needs root (or sudo) only when something is missing.
set -eu
build="gcc make pkg-config libc6-dev libmicrohttpd-dev libjansson-dev libuv1-dev libopenblas-dev check python3 libnghttp2-dev libprotobuf-c-dev protobuf-c-compiler"
test="$build nodejs npm chromium nginx-light prometheus curl python3-grpcio python3-protobuf protobuf-compiler protobuf-compiler-grpc"
bench="$test wrk python3-torch python3-numpy python3-fastapi python3-uvicorn python3-uvloop python3-httptools python3-ujson strace valgrind"
container="buildah debootstrap curl python3"
fuzz="$build clang libclang-rt-14-dev"
fresh="debootstrap curl python3"
arm64="libc6-dev libmicrohttpd-dev libjansson-dev libuv1-dev libopenblas-dev check libsubunit-dev libnghttp2-dev libprotobuf-c-dev"
cpus="$test qemu-user gcc-aarch64-linux-gnu $(for p in $arm64; do printf '%s:arm64 ' "$p"; done)"
case "${1:-build}" in
    build) want=$build ;;
    test) want=$test ;;
    bench) want=$bench ;;
    container) want=$container ;;
    fuzz) want=$fuzz ;;
    fresh) want=$fresh ;;
    cpus) want=$cpus ;;
    *) echo "usage: $0 build|test|bench|container|fuzz|fresh|cpus" >&2; exit 2 ;;
esac
missing=""
for p in $want; do
    # node and npm may come from elsewhere (e.g. NodeSource's nodejs ships
    # npm and conflicts with Debian's): a working command is enough.
    case $p in
        nodejs) command -v node >/dev/null 2>&1 && continue ;;
        npm) command -v npm >/dev/null 2>&1 && continue ;;
    esac
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' ||
        missing="$missing $p"
done
[ -z "$missing" ] && exit 0
echo "install-deps: installing Debian packages:$missing"
sudo=""
[ "$(id -u)" = 0 ] || sudo="sudo"
export DEBIAN_FRONTEND=noninteractive
# Another apt-get (a second make in another checkout) may hold dpkg's lock:
# wait for it rather than fail.
lock="-o DPkg::Lock::Timeout=900"
case $missing in
    *:arm64*)
        if ! dpkg --print-foreign-architectures | grep -qx arm64; then
            echo "install-deps: adding arm64 to dpkg's architectures (dpkg --add-architecture arm64)"
            $sudo dpkg --add-architecture arm64
        fi ;;
esac
# shellcheck disable=SC2086
$sudo apt-get $lock update -q
# shellcheck disable=SC2086
$sudo apt-get $lock install -y -q --no-install-recommends $missing
# The tests run nginx (deploy/nginx.conf) and promtool themselves; the
# packages' own services (nginx on :80, prometheus on :9090, all interfaces)
# were not asked for: under systemd, stop and disable the ones just installed.
if [ -d /run/systemd/system ]; then
    for p in $missing; do
        case $p in
            nginx-light) svc=nginx ;;
            prometheus) svc=prometheus ;;
            *) continue ;;
        esac
        echo "install-deps: $svc.service is not needed by the tests: systemctl disable --now $svc"
        $sudo systemctl disable --now "$svc.service" || true
    done
fi
