#!/usr/bin/env bash
# container-test.sh - build the attnd image from the repo's Dockerfile and
# test it for real, without a Docker engine: Debian's buildah builds and runs
# the same Dockerfile (chroot isolation, vfs storage, host network).
#
#   1. base image: debootstrap --variant=minbase bookworm from the Debian
#      mirror -> buildah from scratch + add + commit, tagged
#      docker.io/library/debian:bookworm-slim (kept in buildah's storage, so
#      a second run skips this; ATTND_CT_REBUILD_BASE=1 redoes it)
#   2. buildah bud the Dockerfile (ATTND_CT_LAYERS=1 caches layers: fast
#      reruns, but vfs storage makes them big)
#   3. inspect the image: non-root user, entrypoint, healthcheck, /models
#      the daemon's user's, and no compiler, headers or curl in it
#   4. run the image's own entrypoint on a free loopback port with a model
#      folder of ours mounted at /models, wait for readiness, run real
#      inferences (the seeds' worked example, on the built-in sdpa model and
#      on the mounted one) and a retained-map fetch, check the daemon's uid,
#      run the image's HEALTHCHECK command, send SIGTERM, check exit 0.
#
# Needs root, buildah, debootstrap, curl and python3 (make container-test
# installs them). Environment: DEBIAN_MIRROR, DEBIAN_SECURITY_MIRROR,
# ATTND_CT_IMAGE (tag to build, default localhost/attnd:test; it stays in
# buildah's storage afterwards), ATTND_CT_REBUILD_BASE, ATTND_CT_LAYERS.
# `test && ok ... || bad ...` is safe here: ok only logs and never fails.
# (No `| grep -q` either: with pipefail its early exit can fail the pipe.)
# shellcheck disable=SC2015
set -euo pipefail
cd "$(dirname "$0")/.."

BASE=docker.io/library/debian:bookworm-slim
IMAGE=${ATTND_CT_IMAGE:-localhost/attnd:test}
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
SECURITY_MIRROR=${DEBIAN_SECURITY_MIRROR:-http://deb.debian.org/debian-security}
SUITE=bookworm
export BUILDAH_ISOLATION=chroot
T0=$(date +%s)
STEP=0
NSTEPS=7
passed=0
failed=0

log() { echo "container-test: [$(($(date +%s) - T0))s] $*"; }
step() { STEP=$((STEP + 1)); log "($STEP/$NSTEPS) $*"; }
ok() { passed=$((passed + 1)); log "  ok: $*"; }
bad() { failed=$((failed + 1)); log "  FAIL: $*"; }
die() { log "FATAL: $*"; exit 1; }
bah() { buildah --storage-driver vfs "$@"; }

[ "$(id -u)" = 0 ] || die "must run as root (buildah with chroot isolation, debootstrap)"
for c in buildah debootstrap curl python3; do
    command -v "$c" >/dev/null || die "$c missing: run tools/install-deps.sh container"
done

work=$(mktemp -d /tmp/attnd-ct.XXXXXX)
run_ctr=""
run_pid=""
base_ctr=""
cleanup() {
    set +e
    if [ -n "$run_pid" ] && kill -0 "$run_pid" 2>/dev/null; then
        kill -KILL "$(daemon_pid)" "$run_pid" 2>/dev/null
        wait "$run_pid" 2>/dev/null
    fi
    [ -n "$run_ctr" ] && bah rm "$run_ctr" >/dev/null 2>&1
    [ -n "$base_ctr" ] && bah rm "$base_ctr" >/dev/null 2>&1
    rm -rf "$work"
}
trap cleanup EXIT

# ---------------------------------------------------------------- 1. base
step "base image $BASE"
if [ -z "${ATTND_CT_REBUILD_BASE:-}" ] &&
    bah inspect --type image "$BASE" >/dev/null 2>&1; then
    log "  cached in buildah storage (ATTND_CT_REBUILD_BASE=1 rebuilds it)"
else
    rootfs=$work/rootfs
    log "  debootstrap --variant=minbase $SUITE from $MIRROR"
    debootstrap --variant=minbase "$SUITE" "$rootfs" "$MIRROR" \
        >"$work/debootstrap.log" 2>&1 ||
        { tail -20 "$work/debootstrap.log"; die "debootstrap failed"; }
    # Trim it the way the official slim image is trimmed: no package
    # caches or lists, no docs or man pages (and none installed later).
    rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/cache/apt/*.bin \
        "$rootfs"/var/lib/apt/lists/* "$rootfs"/etc/apt/sources.list \
        "$rootfs"/usr/share/man/* "$rootfs"/usr/share/info/* \
        "$rootfs"/usr/share/groff/* "$rootfs"/usr/share/lintian/* \
        "$rootfs"/usr/share/locale/* "$rootfs"/var/log/*.log \
        "$rootfs"/var/log/apt/* "$rootfs"/var/cache/debconf/*-old
    find "$rootfs"/usr/share/doc -mindepth 1 ! -name copyright ! -type d -delete
    find "$rootfs"/usr/share/doc -mindepth 1 -type d -empty -delete
    cat >"$rootfs/etc/dpkg/dpkg.cfg.d/docker-slim" <<'EOF'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/info/*
path-exclude /usr/share/groff/*
path-exclude /usr/share/lintian/*
path-exclude /usr/share/locale/*
EOF
    cat >"$rootfs/etc/apt/sources.list.d/debian.sources" <<EOF
Types: deb
URIs: $MIRROR
Suites: $SUITE $SUITE-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: $SECURITY_MIRROR
Suites: $SUITE-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
    # Device nodes, /proc and /sys are the runtime's business.
    tar -C "$rootfs" --numeric-owner --exclude='./dev/*' --exclude='./proc/*' \
        --exclude='./sys/*' -cf "$work/rootfs.tar" .
    rm -rf "$rootfs"
    base_ctr=$(bah from scratch)
    bah add "$base_ctr" "$work/rootfs.tar" / >/dev/null
    bah config --cmd bash \
        --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
        "$base_ctr"
    old_base=$(bah images -q "$BASE" 2>/dev/null | head -1 || true)
    bah commit --quiet --rm "$base_ctr" "$BASE" >/dev/null
    base_ctr=""
    [ -n "$old_base" ] && bah rmi "$old_base" >/dev/null 2>&1 || true
    rm -f "$work/rootfs.tar"
    log "  committed $BASE"
fi

# --------------------------------------------------------------- 2. build
step "buildah bud -t $IMAGE"
# vfs storage copies the whole tree for every layer, so cached layers cost
# ~10 GB after a few builds: they are opt-in (ATTND_CT_LAYERS=1). The image
# this build replaces is removed afterwards.
old_id=$(bah images -q "$IMAGE" 2>/dev/null | head -1 || true)
bud_rc=0
cache=(--no-cache)
[ -n "${ATTND_CT_LAYERS:-}" ] && cache=(--layers)
: >"$work/bud.log"
bah bud --pull=never --isolation chroot --format docker --force-rm "${cache[@]}" \
    -t "$IMAGE" -f Dockerfile . >"$work/bud.log" 2>&1 &
bud_pid=$!
# Progress: each Dockerfile step as buildah reaches it.
tail -n +1 -f --pid="$bud_pid" "$work/bud.log" |
    grep --line-buffered -E 'STEP [0-9]+/|^COMMIT|Using cache' |
    sed -u "s/^/container-test:   /" || true
wait "$bud_pid" || bud_rc=$?
[ "$bud_rc" = 0 ] || { tail -40 "$work/bud.log"; die "image build failed"; }
ok "image $IMAGE built ($(bah images --format '{{.Size}}' "$IMAGE" | head -1))"
new_id=$(bah images -q "$IMAGE" | head -1)
if [ -n "$old_id" ] && [ "$old_id" != "$new_id" ]; then
    bah rmi "$old_id" >/dev/null 2>&1 || true
fi

# ------------------------------------------------------------- 3. inspect
step "inspect the image"
fmt() { bah inspect --type image --format "$1" "$IMAGE"; }
user=$(fmt '{{.Docker.Config.User}}')
case ${user%%:*} in
    "" | 0 | root) bad "image user is '${user}', expected non-root" ;;
    *) ok "image runs as user $user" ;;
esac
mapfile -t entry < <(fmt '{{range .Docker.Config.Entrypoint}}{{println .}}{{end}}')
mapfile -t cmd < <(fmt '{{range .Docker.Config.Cmd}}{{println .}}{{end}}')
mapfile -t hc < <(fmt '{{if .Docker.Config.Healthcheck}}{{range .Docker.Config.Healthcheck.Test}}{{println .}}{{end}}{{end}}')
[ "${#entry[@]}" -gt 0 ] && ok "entrypoint: ${entry[*]}" || bad "no entrypoint"
[ "${hc[0]:-}" = CMD ] && ok "healthcheck: ${hc[*]:1}" || bad "no HEALTHCHECK CMD (${hc[*]:-none})"
# shellcheck disable=SC2016 # a Go template, not shell
fmt '{{range $k, $v := .Docker.Config.Volumes}}{{println $k}}{{end}}' | grep -x /models >/dev/null &&
    ok "/models is a volume" || bad "/models is not declared a VOLUME"
fmt '{{range .Docker.Config.Env}}{{println .}}{{end}}' | grep -x 'ATTND_HOST=0.0.0.0' >/dev/null &&
    ok "ATTND_HOST=0.0.0.0 set" || bad "ATTND_HOST=0.0.0.0 not in the image env"
run_ctr=$(bah from --pull=never "$IMAGE")
mnt=$(bah mount "$run_ctr")
extra=""
for f in usr/bin/gcc usr/bin/cc usr/bin/make usr/bin/curl usr/bin/wget \
    usr/include/uv.h usr/include/jansson.h usr/include/microhttpd.h \
    var/cache/apt/pkgcache.bin var/cache/apt/srcpkgcache.bin; do
    [ -e "$mnt/$f" ] && extra="$extra /$f"
done
[ -n "$(ls -A "$mnt/var/lib/apt/lists" 2>/dev/null)" ] && extra="$extra /var/lib/apt/lists/*"
[ -z "$extra" ] && ok "no build tools, headers, curl or apt caches in the image" ||
    bad "image holds what it should not:$extra"
[ -x "$mnt/usr/local/bin/attnd" ] && ok "/usr/local/bin/attnd present" || bad "no attnd binary"
log "  /models holds: $(cd "$mnt/models" 2>/dev/null && find . -mindepth 1 -maxdepth 2 | tr '\n' ' ')"
# The volume a plain `docker run` makes of /models starts as the image's,
# owner included: the daemon's user must own it for an upload to write.
foreign=$(find "$mnt/models" ! -user "${user%%:*}" -printf '/models/%P ' 2>/dev/null || echo "(find failed)")
[ -z "$foreign" ] && ok "/models and all in it belong to user ${user%%:*} (uploads can write)" ||
    bad "in /models, not user ${user%%:*}'s: $foreign"
bah umount "$run_ctr" >/dev/null
# The models shipped in the image load (the daemon's own validator).
if bah run --isolation chroot "$run_ctr" -- "${entry[0]}" --check-models /models \
    >"$work/check-models.log" 2>&1; then
    ok "shipped models: $(tr '\n' ' ' <"$work/check-models.log")"
else
    bad "attnd --check-models /models: $(tr '\n' ' ' <"$work/check-models.log")"
fi

# ----------------------------------------------------------------- 4. run
step "run the image's entrypoint"
# A free loopback port: the container shares the host network.
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
url=http://127.0.0.1:$port
# A model repository of our own, mounted over /models as the README says
# (readable by the image's non-root user).
chmod 755 "$work"
python3 deploy/container_check.py --write-model "$work/models"
chmod -R a+rX "$work/models"
# docker run -v puts the mount over the image's VOLUME; buildah run (chroot)
# would shadow it with the image's empty /models, so this container drops
# the volume declaration (the image keeps it, checked above).
bah config --volume /models- "$run_ctr"
# Listen on loopback only here (the image default 0.0.0.0 is checked above).
bah run --isolation chroot -e ATTND_PORT="$port" -e ATTND_HOST=127.0.0.1 \
    -e ATTND_GRPC_PORT=0 -v "$work/models:/models:ro" \
    "$run_ctr" -- "${entry[@]}" "${cmd[@]}" >"$work/attnd.log" 2>&1 &
run_pid=$!

# daemon_pid: the attnd process under our buildah run (host pid namespace),
# found by walking /proc/*/stat parent links down from buildah's pid.
daemon_pid() {
    local family=" $run_pid " st line p ppid comm rest
    for _ in 1 2 3 4 5 6; do
        for st in /proc/[0-9]*/stat; do
            read -r line <"$st" 2>/dev/null || continue
            p=${line%% *}
            comm=${line#*\(}
            comm=${comm%\)*}
            rest=${line##*\) }
            ppid=$(echo "$rest" | cut -d' ' -f2)
            case $family in
                *" $ppid "*)
                    [ "$comm" = attnd ] && { echo "$p"; return 0; }
                    case $family in *" $p "*) ;; *) family="$family$p " ;; esac
                    ;;
            esac
        done
    done
    return 1
}

ready=0
for _ in $(seq 1 120); do
    kill -0 "$run_pid" 2>/dev/null || break
    if curl -fsS -o /dev/null "$url/v2/health/ready" 2>/dev/null; then
        ready=1
        break
    fi
    sleep 0.5
done
if [ "$ready" != 1 ]; then
    cat "$work/attnd.log"
    die "the daemon did not become ready on $url within 60 s"
fi
ok "ready on $url"
dpid=$(daemon_pid) || die "cannot find the attnd process under buildah run"
uid=$(awk '/^Uid:/ {print $2}' "/proc/$dpid/status")
[ "$uid" != 0 ] && ok "daemon pid $dpid runs as uid $uid" || bad "daemon runs as root"

# ----------------------------------------------------------- 5. inference
step "inference, retained map, mounted model (seed 000 worked example)"
python3 deploy/container_check.py "$url" seed000 | sed 's/^/container-test: /' &&
    ok "sdpa, retained map and the mounted seed000 model match the seed" ||
    bad "inference checks failed (lines above)"

# ---------------------------------------------------------- 6. healthcheck
step "the image's HEALTHCHECK command"
hc_run() {
    bah run --isolation chroot -e ATTND_PORT="$port" -e ATTND_GRPC_PORT=0 \
        "$run_ctr" -- "${hc[@]:1}" \
        >>"$work/hc.log" 2>&1
}
if hc_run; then ok "healthcheck passes while serving"; else
    cat "$work/hc.log"
    bad "healthcheck failed while serving"
fi

# ------------------------------------------------------------- 7. SIGTERM
step "SIGTERM drains and exits 0"
kill -TERM "$dpid"
rc=""
for _ in $(seq 1 60); do
    if ! kill -0 "$run_pid" 2>/dev/null; then
        wait "$run_pid" && rc=0 || rc=$?
        break
    fi
    sleep 0.5
done
run_pid_done=$run_pid
run_pid=""
if [ -z "$rc" ]; then
    bad "still running 30 s after SIGTERM"
    kill -KILL "$dpid" 2>/dev/null || true
    wait "$run_pid_done" 2>/dev/null || true
elif [ "$rc" = 0 ]; then
    ok "exited 0 after SIGTERM"
else
    tail -20 "$work/attnd.log"
    bad "exit status $rc after SIGTERM"
fi
if hc_run; then bad "healthcheck still passes with the daemon stopped"; else
    ok "healthcheck fails once the daemon is gone"
fi
log "daemon log (last lines):"
tail -5 "$work/attnd.log" | sed 's/^/container-test:   | /'

echo "container-test: $passed passed, $failed failed"
[ "$failed" = 0 ]
