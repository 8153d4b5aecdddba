#!/bin/sh
# test-cpus.sh - the Check suites on CPUs this machine is not, emulated by
# qemu-user (make test-cpus; README, "Other CPUs").
#
#   x86-64: each model of QEMU_CPUS (default Nehalem: SSE4.2, no AVX, FMA
#           or F16C) runs the core and proto Check binaries of the default
#           build. The emulated CPUID hides what the model lacks, so
#           attnd's kernels take the paths this host's AVX-512 never does,
#           and OpenBLAS picks its own kernels for the model
#           (OPENBLAS_CORETYPE unset).
#   aarch64: a cross build (build/arm64: aarch64-linux-gnu-gcc and Debian's
#           arm64 libraries) runs every Check binary under qemu-aarch64,
#           then tests/server/infer.test.mjs against the aarch64 attnd
#           (the seeds' and PyTorch's numbers over HTTP).
#
# Prints one line per binary and a summary; exits 1 when any failed.
# Needs tools/install-deps.sh cpus first (the Makefile target runs it).
set -u
cd "$(dirname "$0")/.."
QEMU_CPUS=${QEMU_CPUS:-Nehalem}
# a Check case under TCG runs 10-50x slower than natively
export CK_DEFAULT_TIMEOUT=${CK_DEFAULT_TIMEOUT:-1200}
export ATTN_TEST_DATA=tests
# x86-64 models: the layers whose code asks the CPU (the server's binaries
# add nothing there, and test_crash's stack walks fail under qemu-x86_64
# whatever the model: the emulator's signal frames, not attnd's)
x86_bins=$(ls tests/core/test_*.c tests/proto/test_*.c | sed 's|\.c$||')
bins="$x86_bins $(ls tests/server/test_*.c | sed 's|\.c$||')"
failed=0 ran=0
t_all=$(date +%s)

# run LABEL CMD...: one binary; its Check summary line, and its failures
run() {
    label=$1; shift
    t0=$(date +%s)
    out=$("$@" 2>&1)
    rc=$?
    sum=$(printf '%s\n' "$out" | grep -E '^[0-9]+%: Checks' | tail -1)
    ran=$((ran + 1))
    printf '  %-44s %4ds  %s\n' "$label" $(($(date +%s) - t0)) "${sum:-no summary, exit $rc}"
    if [ $rc -ne 0 ] || [ -z "$sum" ]; then
        failed=$((failed + 1))
        printf '%s\n' "$out" | grep -E ':[EF]:' | head -5 | sed 's/^/    /'
    fi
}

make --no-print-directory -s WERROR=1 $(printf 'build/default/%s ' $x86_bins) || exit 1
for cpu in $QEMU_CPUS; do
    echo "== x86-64 $cpu (qemu-x86_64 -cpu $cpu)"
    for b in $x86_bins; do
        run "$cpu ${b#tests/}" env -u OPENBLAS_CORETYPE \
            qemu-x86_64 -cpu "$cpu" "build/default/$b"
    done
done

echo "== aarch64: cross build (build/arm64), qemu-aarch64"
# the arm64 libraries' .pc files; the embedder runs at build time, so the
# host's compiler makes it
PKG_CONFIG_LIBDIR=/usr/lib/aarch64-linux-gnu/pkgconfig:/usr/share/pkgconfig \
    make --no-print-directory -s WERROR=1 BUILD=build/arm64 \
    CC=aarch64-linux-gnu-gcc HOSTCC=cc \
    build/arm64/attnd $(printf 'build/arm64/%s ' $bins) || exit 1
# glibc's arm64 loader and libraries are the multiarch ones in /, so qemu
# needs no prefix
for b in $bins; do
    run "aarch64 ${b#tests/}" qemu-aarch64 "build/arm64/$b"
done
wrap=build/arm64/attnd-qemu
printf '#!/bin/sh\nexec qemu-aarch64 %s "$@"\n' "$(pwd)/build/arm64/attnd" > "$wrap"
chmod +x "$wrap"
t0=$(date +%s)
out=$(cd tests/server && ATTND_BIN="$(pwd)/../../$wrap" \
      timeout -k 10 900 node --test infer.test.mjs 2>&1)
rc=$?
ran=$((ran + 1))
sum=$(printf '%s\n' "$out" | grep -E '^# (pass|fail) ' | tr '\n' ' ')
printf '  %-44s %4ds  %s\n' "aarch64 attnd: server/infer.test.mjs" \
    $(($(date +%s) - t0)) "${sum:-no summary, exit $rc}"
if [ $rc -ne 0 ]; then
    failed=$((failed + 1))
    printf '%s\n' "$out" | grep -E '^not ok' | head -5 | sed 's/^/    /'
fi

echo "== test-cpus: $ran runs ($QEMU_CPUS, aarch64), $failed failed, $(($(date +%s) - t_all)) s"
[ $failed -eq 0 ]
