#!/usr/bin/env bash
# fresh-machine-test.sh - prove the README's install story on a genuinely
# fresh Debian 12: this machine has every package already, so `make test`
# here cannot notice a missing install step. The script:
#
#   1. debootstraps a minbase bookworm root from the Debian mirror (no make,
#      no gcc, no git: what a new Debian 12 box has) with the sources a
#      Debian 12 install has (bookworm, bookworm-updates, bookworm-security)
#   2. mounts /proc, /sys, /dev and a tmpfs /dev/shm into it (chromium needs
#      /dev/shm), copies /etc/resolv.conf, and forbids service starts
#      (policy-rc.d exit 101: the chroot shares this host's network, so the
#      nginx and prometheus packages must not start their daemons on :80 and
#      :9090 here; on a real machine they would)
#   3. runs, as root with no stdin and an empty environment (C locale), the
#      README's prerequisite line (`apt-get update && apt-get install ...`,
#      taken from README.md itself), copies the repository (tracked and
#      untracked-but-not-ignored files, i.e. a clone plus local edits) to
#      /root/attnd
#   3. runs `make run` first, as the README lists it (it installs the build
#      packages itself; ATTND_PORT and ATTND_GRPC_PORT free loopback ports,
#      as the README says when 8080 and 8001 are taken: the root shares this
#      host's network; everything else default), waits for "listening on"
#      twice, checks /v2/health/ready and the
#      server metadata from outside the chroot, sends SIGTERM, checks the
#      daemon exits and the port is closed
#   4. runs `make test`: every suite must print its summary, none failing
#   5. checks tools/install-deps.sh is idempotent (second run: no apt-get)
#
# Prints `fresh-machine: N passed, M failed` and exits non-zero if M > 0.
# Everything (mounts, the root, the daemon) is removed on exit.
#
# Needs root, debootstrap and curl (make fresh-test installs them).
# A TLS-intercepting egress proxy (this build farm has one) is not part of a
# fresh machine, but npm in the root must trust it: FRESH_EXTRA_CA (default
# $NODE_EXTRA_CA_CERTS), when set, is copied into the root and given to node
# as NODE_EXTRA_CA_CERTS; nothing else of the host's setup goes in.
# Environment: DEBIAN_MIRROR, DEBIAN_SECURITY_MIRROR, FRESH_TMP (where the
# root goes, default /var/tmp: it needs ~3 GB), FRESH_KEEP=1 (keep the root
# and logs; mounts are still removed), FRESH_BASE=<dir> (copy this
# debootstrapped root instead of running debootstrap; for quick reruns).
# shellcheck disable=SC2015,SC2016,SC2317  # SC2317: the trap's functions, in the group
set -euo pipefail
# One group, read whole before any of it runs: bash reads a script as it
# runs it, and this file rewritten in place during a run (an editor saving
# over it; a git checkout writes a new file and is harmless) had it go on
# at the old byte offset in the new text ("line 216: ---...: command not
# found" after 20 minutes, the summaries and step 5 never run).
{
cd "$(dirname "$0")/.."
REPO=$PWD
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
SECURITY_MIRROR=${DEBIAN_SECURITY_MIRROR:-http://deb.debian.org/debian-security}
SUITE=bookworm
T0=$(date +%s)
passed=0
failed=0

log() { echo "fresh-machine: [$(($(date +%s) - T0))s] $*"; }
ok() { passed=$((passed + 1)); log "  ok: $*"; }
bad() { failed=$((failed + 1)); log "  FAIL: $*"; }
die() { log "FATAL: $*"; bad "$*"; exit 1; }

[ "$(id -u)" = 0 ] || { echo "fresh-machine-test: must run as root (debootstrap, chroot, mount)" >&2; exit 2; }
for c in debootstrap curl chroot mount; do
    command -v "$c" >/dev/null ||
        { echo "fresh-machine-test: $c missing: run tools/install-deps.sh container" >&2; exit 2; }
done
prereq=$(grep -m1 '^apt-get update && apt-get install' README.md || true)
[ -n "$prereq" ] ||
    { echo "fresh-machine-test: README.md has no 'apt-get update && apt-get install ...' line" >&2; exit 2; }

work=$(mktemp -d "${FRESH_TMP:-/var/tmp}/attnd-fresh.XXXXXX")
root=$work/root
mounted=()
run_pid=""

# The root is deleted only once nothing is mounted under it any more: an
# rm -rf through a live /dev or /sys bind would be a disaster.
cleanup() {
    set +e
    if [ -n "$run_pid" ] && kill -0 "$run_pid" 2>/dev/null; then
        kill -KILL -- "-$run_pid" 2>/dev/null
        wait "$run_pid" 2>/dev/null
    fi
    local i
    for ((i = ${#mounted[@]} - 1; i >= 0; i--)); do
        umount "${mounted[$i]}" 2>/dev/null || umount -l "${mounted[$i]}"
    done
    if grep -q " $root/" /proc/self/mounts; then
        echo "fresh-machine-test: still mounted under $root, not deleting $work" >&2
    elif [ -n "${FRESH_KEEP:-}" ]; then
        echo "fresh-machine-test: kept $work (FRESH_KEEP)" >&2
    else
        rm -rf "$work"
    fi
    echo "fresh-machine: $passed passed, $failed failed ($(($(date +%s) - T0))s)"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

mnt() { # mnt <target> <mount args...>
    local t=$1
    shift
    mount "$@" "$t"
    mounted+=("$t")
}

# in_root <log> <script>: bash -c <script> in the root, as root, no stdin,
# an empty environment but for HOME, PATH and TERM (so the C locale).
in_root() {
    local logf=$1
    shift
    chroot "$root" /usr/bin/env -i HOME=/root TERM=dumb "${extra_env[@]}" \
        PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
        /bin/bash -c "$1" </dev/null >"$logf" 2>&1
}
show_tail() { tail -n "${2:-30}" "$1" | sed 's/^/    | /'; }
# show_failed <log>: each failed test's own lines, wherever in the log
# (the tail shows the last suite's end, not what failed in it): node:test's
# "not ok" with its error block, Check's ":F:"/":E:" lines, unittest's
# FAIL/ERROR heads
show_failed() {
    grep -E -A16 '^ *not ok |:[FE]:|^(FAIL|ERROR): ' "$1" | head -n 200 | sed 's/^/    ! /' || true
}

# ------------------------------------------------------------ 1. the root
if [ -n "${FRESH_BASE:-}" ]; then
    log "(1/5) copying the debootstrapped root $FRESH_BASE"
    cp -a "$FRESH_BASE" "$root"
else
    log "(1/5) debootstrap --variant=minbase $SUITE from $MIRROR"
    debootstrap --variant=minbase "$SUITE" "$root" "$MIRROR" >"$work/debootstrap.log" 2>&1 ||
        { show_tail "$work/debootstrap.log"; die "debootstrap failed"; }
fi
ok "minbase $SUITE root in $root"
cat >"$root/etc/apt/sources.list" <<EOF
deb $MIRROR $SUITE main
deb $MIRROR $SUITE-updates main
deb $SECURITY_MIRROR $SUITE-security main
EOF
cat /etc/resolv.conf >"$root/etc/resolv.conf"
extra_env=()
extra_ca=${FRESH_EXTRA_CA-${NODE_EXTRA_CA_CERTS:-}}
if [ -n "$extra_ca" ]; then
    cat "$extra_ca" >"$root/etc/fresh-extra-ca.pem"
    extra_env=(NODE_EXTRA_CA_CERTS=/etc/fresh-extra-ca.pem)
    log "  node in the root trusts $extra_ca too (this network's TLS proxy)"
fi
printf '#!/bin/sh\n# fresh-machine-test: no daemons from package installs\nexit 101\n' \
    >"$root/usr/sbin/policy-rc.d"
chmod 755 "$root/usr/sbin/policy-rc.d"
mnt "$root/proc" -t proc proc
mnt "$root/sys" -t sysfs sysfs
mnt "$root/dev" --bind /dev
mnt "$root/dev/shm" -t tmpfs -o mode=1777,size=512m shm
mnt "$root/dev/pts" -t devpts -o newinstance,ptmxmode=0666 devpts

if in_root "$work/bare.log" 'for c in make gcc cc git node; do command -v $c && exit 1; done; exit 0'; then
    ok "the fresh root has no make, gcc, git or node (so the README must say how to get make)"
else
    bad "the fresh root already has one of make/gcc/git/node: $(cat "$work/bare.log")"
fi

# --------------------------------------------- 2. the README's prerequisite
log "(2/5) README prerequisite: $prereq"
if in_root "$work/prereq.log" "export DEBIAN_FRONTEND=noninteractive; $prereq"; then
    ok "README prerequisite line ran"
else
    show_tail "$work/prereq.log"
    bad "README prerequisite line failed"
fi
mkdir -p "$root/root/attnd"
git -C "$REPO" ls-files -co --exclude-standard -z |
    (cd "$REPO" && tar --null -T - -cf -) | tar -C "$root/root/attnd" -xf -
ok "repository copied to /root/attnd ($(git -C "$REPO" ls-files -co --exclude-standard | wc -l) files, no build/ or node_modules/)"

# ------------------------------------------- 3. make run, the README's first
# two free ports at once (both sockets open while the second is picked)
read -r port grpc_port < <(python3 -c 'import socket
ss = [socket.socket() for _ in range(2)]
for s in ss: s.bind(("127.0.0.1", 0))
print(*(s.getsockname()[1] for s in ss))')
log "(3/5) make run first, as the README lists it (ATTND_PORT=$port ATTND_GRPC_PORT=$grpc_port, all else default)"
setsid chroot "$root" /usr/bin/env -i HOME=/root TERM=dumb ATTND_PORT="$port" ATTND_GRPC_PORT="$grpc_port" "${extra_env[@]}" \
    PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    /bin/bash -c 'cd /root/attnd && exec make run' </dev/null >"$work/run.log" 2>&1 &
run_pid=$!
up=""
for _ in $(seq 1 3000); do  # 10 min: apt-get and the build
    grep -q "listening on grpc://127.0.0.1:$grpc_port" "$work/run.log" && { up=1; break; }
    kill -0 "$run_pid" 2>/dev/null || break
    sleep 0.2
done
if [ -n "$up" ]; then
    ok "make run: $(grep -o 'listening on [^ ]*' "$work/run.log" | paste -sd ' ')"
else
    show_tail "$work/run.log"
    bad "make run did not start listening within 10 min"
fi
code=""
for _ in $(seq 1 50); do
    code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 2 "http://127.0.0.1:$port/v2/health/ready" || true)
    [ "$code" = 200 ] && break
    sleep 0.2
done
[ "$code" = 200 ] && ok "GET /v2/health/ready: 200" || bad "GET /v2/health/ready: ${code:-no answer}"
meta=$(curl -s --max-time 5 "http://127.0.0.1:$port/v2" || true)
case $meta in
    *'"name"'*) ok "GET /v2: $meta" ;;
    *) bad "GET /v2 gave no server metadata: ${meta:-nothing}" ;;
esac
kill -TERM -- "-$run_pid" 2>/dev/null || true
gone=""
for _ in $(seq 1 100); do
    kill -0 "$run_pid" 2>/dev/null || { gone=1; break; }
    sleep 0.1
done
if [ -n "$gone" ] && ! curl -s -o /dev/null --max-time 2 "http://127.0.0.1:$port/v2/health/live"; then
    wait "$run_pid" 2>/dev/null || true
    run_pid=""
    ok "SIGTERM stopped make run; the port is closed"
else
    show_tail "$work/run.log"
    bad "make run still running or port still open 10s after SIGTERM"
fi
# ------------------------------------------------------------ 4. make test
log "(4/5) make test (the test packages and npm downloads included)"
t=$(date +%s)
if in_root "$work/test.log" 'cd /root/attnd && make test'; then
    ok "make test exited 0 in $(($(date +%s) - t))s"
else
    show_tail "$work/test.log" 60
    show_failed "$work/test.log"
    bad "make test failed after $(($(date +%s) - t))s (log: $work/test.log)"
fi
log "  node $(chroot "$root" node --version 2>/dev/null || echo missing), npm $(chroot "$root" npm --version 2>/dev/null || echo missing), $(chroot "$root" chromium --version 2>/dev/null | head -1 || echo 'no chromium')"
# Every suite's summary: Check prints "N%: Checks: C, Failures: F, Errors: E"
# per binary; node:test prints "# pass N" / "# fail N" per run.
nchk=$(grep -cE '^[0-9]+%: Checks: [0-9]+' "$work/test.log" || true)
nchk_bad=$(grep -E '^[0-9]+%: Checks: [0-9]+' "$work/test.log" | grep -cvE 'Failures: 0, Errors: 0' || true)
nnode=$(grep -cE '^(# )?ℹ? ?pass [0-9]+|^# pass [0-9]+' "$work/test.log" || true)
nnode_bad=$(grep -E '^(# |ℹ )fail [0-9]+' "$work/test.log" | grep -cvE 'fail 0$' || true)
shopt -s nullglob
# counted in the copy that ran, not in $REPO: a checkout moved on during
# the 20 minutes (a rebase bringing a new test_*.c) wanted one summary more
# than the copy's make test could print
units=("$root"/root/attnd/tests/{core,proto,server}/test_*.c)
nunit=${#units[@]}
grep -E '^[0-9]+%: Checks: |^(# |ℹ )(pass|fail) ' "$work/test.log" | sed 's/^/    /'
[ "$nchk" -ge "$nunit" ] && [ "$nchk_bad" = 0 ] &&
    ok "$nchk Check summaries (>= $nunit unit sources), none failing" ||
    bad "Check summaries: $nchk (want >= $nunit), $nchk_bad failing"
[ "$nnode" -ge 3 ] && [ "$nnode_bad" = 0 ] &&
    ok "$nnode node:test summaries (web, server, deploy), none failing" ||
    bad "node:test summaries: $nnode (want >= 3), $nnode_bad failing"
grep -q 'check-weights-gen: .* match their generators' "$work/test.log" &&
    ok "check-weights-gen ran" || bad "check-weights-gen did not report a match"

# ------------------------------------------------------- 5. idempotent deps
log "(5/5) install-deps again: nothing to install"
if in_root "$work/deps2.log" 'cd /root/attnd && tools/install-deps.sh test' &&
    ! grep -q 'installing' "$work/deps2.log"; then
    ok "tools/install-deps.sh test is a no-op once installed"
else
    show_tail "$work/deps2.log"
    bad "tools/install-deps.sh test wanted to install again"
fi

[ "$failed" = 0 ]
exit
}
