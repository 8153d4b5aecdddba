#!/usr/bin/env bash
# bench_lb.sh ATTND_BIN - what deploy/nginx.conf costs: the same wrk load
# (POST sdpa infer, the seed-000 example, keep-alive) sent to one attnd
# replica directly and through nginx to that same replica, in one run.
# Prints requests/s and latency of each, their ratio, and peak RSS of attnd
# and nginx. Everything on 127.0.0.1, ports picked here, bounded in time:
# BENCH_LB_SECONDS (5) per side, BENCH_LB_CONNECTIONS (8).
set -euo pipefail
bin=${1:?usage: bench/bench_lb.sh path/to/attnd}
root=$(cd "$(dirname "$0")/.." && pwd)
secs=${BENCH_LB_SECONDS:-5}
conns=${BENCH_LB_CONNECTIONS:-8}
for c in wrk nginx python3; do
    command -v "$c" >/dev/null || { echo "bench_lb: $c missing (tools/install-deps.sh bench)" >&2; exit 2; }
done
dir=$(mktemp -d /tmp/attnd-bench-lb.XXXXXX)
chmod 755 "$dir"
mkdir -p "$dir/logs" "$dir/models"
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$dir"
}
trap cleanup EXIT

read -r port lb <<<"$(python3 -c '
import socket
s = [socket.socket() for _ in range(2)]
for x in s: x.bind(("127.0.0.1", 0))
print(*[x.getsockname()[1] for x in s])')"

ATTND_HOST=127.0.0.1 ATTND_PORT=$port ATTND_GRPC_PORT=0 ATTND_MODELS=$dir/models ATTND_THREADS=1 \
    "$bin" 2>"$dir/logs/attnd.log" &
attnd_pid=$!
pids+=("$attnd_pid")

# deploy/nginx.conf with its three replicas pointed at the one above.
sed -e "s/listen 127.0.0.1:8080;/listen 127.0.0.1:$lb;/" \
    -e "s/server 127.0.0.1:808[123] /server 127.0.0.1:$port /" \
    "$root/deploy/nginx.conf" >"$dir/nginx.conf"
nginx -p "$dir/" -c "$dir/nginx.conf" -e "$dir/logs/error.log" -g 'daemon off;' &
nginx_pid=$!
pids+=("$nginx_pid")

wait_ok() {
    for _ in $(seq 1 100); do
        python3 -c "import urllib.request,sys; urllib.request.urlopen(sys.argv[1], timeout=1)" "$1" \
            2>/dev/null && return 0
        sleep 0.1
    done
    echo "bench_lb: $1 not ready" >&2
    exit 1
}
wait_ok "http://127.0.0.1:$port/v2/health/ready"
wait_ok "http://127.0.0.1:$lb/v2/health/ready"

cat >"$dir/post.lua" <<'EOF'
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.body = '{"inputs":[{"name":"q","datatype":"FP32","shape":[2,4],"data":[2,0,2,0,0,4,0,2]},{"name":"k","datatype":"FP32","shape":[2,4],"data":[1,0,1,0,0,1,0,0]},{"name":"v","datatype":"FP32","shape":[2,2],"data":[1,2,3,0]}]}'
done = function(summary, latency, requests)
  io.write(string.format("RESULT %.1f %.3f %.3f %d %d\n",
    summary.requests / (summary.duration / 1e6), latency.mean / 1000,
    latency:percentile(99) / 1000, summary.errors.status + summary.errors.connect
    + summary.errors.read + summary.errors.write + summary.errors.timeout,
    summary.requests))
end
EOF

run() { # run NAME URL -> "rps mean_ms p99_ms errors requests"
    wrk -t1 -c"$conns" -d"${secs}s" -s "$dir/post.lua" "$2/v2/models/sdpa/infer" |
        awk '/^RESULT/ {print $2, $3, $4, $5, $6}'
}
hwm() { awk '/^VmHWM/ {printf "%.1f", $2 / 1024}' "/proc/$1/status"; }
# nginx's peak is its largest worker's (the master only forwards signals).
nginx_hwm() {
    local best=0 p v
    for p in $(cat "/proc/$nginx_pid/task/$nginx_pid/children" 2>/dev/null) "$nginx_pid"; do
        v=$(awk '/^VmHWM/ {print $2}' "/proc/$p/status" 2>/dev/null || echo 0)
        [ "${v:-0}" -gt "$best" ] && best=$v
    done
    awk -v k="$best" 'BEGIN {printf "%.1f", k / 1024}'
}

read -r d_rps d_mean d_p99 d_err d_n <<<"$(run direct "http://127.0.0.1:$port")"
read -r n_rps n_mean n_p99 n_err n_n <<<"$(run nginx "http://127.0.0.1:$lb")"
printf 'case=direct requests=%s rps=%s mean_ms=%s p99_ms=%s errors=%s\n' "$d_n" "$d_rps" "$d_mean" "$d_p99" "$d_err"
printf 'case=nginx  requests=%s rps=%s mean_ms=%s p99_ms=%s errors=%s\n' "$n_n" "$n_rps" "$n_mean" "$n_p99" "$n_err"
awk -v a="$d_rps" -v b="$n_rps" -v c="$d_mean" -v d="$n_mean" \
    'BEGIN {printf "ratio rps nginx/direct=%.3f mean_latency nginx/direct=%.3f\n", b / a, d / c}'
echo "peak_rss_mb attnd=$(hwm "$attnd_pid") nginx_worker=$(nginx_hwm)"
echo "(${secs}s per side, $conns connections, wrk -t1, attnd --threads 1, $(nproc) cores shared)"
