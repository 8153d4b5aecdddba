#!/usr/bin/env python3
"""HTTP benchmark of attnd, with two peers: a bare libmicrohttpd server and
the same layer served by FastAPI/uvicorn + PyTorch.

    python3 bench/http_bench.py --attnd build/default/attnd --bare build/default/bench/bare_mhd

1. Small requests: `demo` (d_model 64), T=16, JSON, through wrk at 1, 16 and
   64 connections against attnd, against bare_mhd (which reads the body
   and answers a fixed body of the same size) and against
   bench/fastapi_peer.py (two uvicorn workers on their own sockets, one
   torch thread each, the same weights; its answer is checked equal to
   attnd's before it is timed), same run: req/s, p50/p99 latency and the
   ratios to the bare server; then the issue's aims with where each server
   stands (req/s >= 0.6x bare at every point, p50 at one connection <= 2x
   bare's). Then the CPU each server and wrk spent per request at each
   point (/proc times, RUSAGE_CHILDREN), attnd's own work per request
   (decode, layer, encode: /metrics at one connection), the share of
   requests each point ran inline on the loop thread, and the work roof
   at 16 and 64 connections: the req/s of a server doing the bare
   server's work plus attnd's on every core, losing nothing between
   threads (cores / (work + bare's CPU + wrk's CPU per request)), as a
   ratio to bare and the fraction of it attnd reaches; at one connection
   the latency roof, bare's p50 and round trip plus that work. Then the
   loop bound: attnd with every small request inline on its loop thread
   (its cheapest path), one process and then two sharing the port
   (--reuse-port: two loops sharing nothing, the most a second loop
   thread could add) at 16 and 64 connections, and the CPU roof: the
   cores spent on nothing but attnd's inline requests and wrk's.
2. Batched decoder steps: bench/decode_http.py's d_model 2048, 32 heads,
   8 kv heads layer, one client then 32 concurrent clients each stepping a
   sequence (128-token prompt, 32 one-token steps; the clients are
   bench/step_client.c, keep-alive connections on one epoll thread, so the figure
   is the server's and not the load generator's): steps/s, p50 and the
   ratio, whose aim is >= 8x (the engine runs the 32 steps as one batch);
   then bench/bench_decode.c (--engine) on the same layer, prompts and
   steps without HTTP: the engine's own 1 and 32 steps/s and ratio (the
   ceiling of attnd's on this machine), the bytes read and FLOPs per
   second against memcpy's and sgemm's rates measured in the same run,
   the memory roof (32 steps whose bytes are all read at memcpy's rate)
   and the compute roof (their FLOPs all at sgemm's rate).
3. One large request: B=8, T=512, d_model=768 (a random 12-head weight set
   written to a temporary repository), JSON and binary: MB/s in and ms end
   to end (median of 3).
   Then a small layer (d_model 64, 4 heads, 2 kv heads of 16: the size
   the page's live view steps), one client stepping one sequence (16-token
   prompt, 256 one-token steps), attnd and the Python peer taking turns:
   steps/s, p50, their ratios, and the share of attnd's steps that ran
   inline on the loop thread (a lone client's). Then attnd's client once
   more with a second connection open and idle, as a metrics scraper
   leaves it between scrapes, by default and with --inline-idle-ms 0
   (every open connection counts): steps/s and the share inline.
The small-request points run attnd and bare --small-runs times (3), taking
turns, and show the pair whose ratio is the median, with every pair's
ratio: the machine's speed drifts by a quarter over minutes, and one run
of each moved the 1-connection ratio from 0.59x to 0.72x between rounds.
The decode and engine points run --decode-runs times (3), 1 and 32 taking
turns, and print the median and every run.
Peak RSS of attnd (VmHWM) is printed at the end. Everything runs on
127.0.0.1 and is bounded in time (wrk -d per point).
"""
import argparse
import http.client
import json
import os
import random
import re
import resource
import socket
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def start(cmd, pattern, stream):
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE if stream == "out" else subprocess.DEVNULL,
                         stderr=subprocess.PIPE if stream == "err" else subprocess.DEVNULL, text=True)
    f = p.stdout if stream == "out" else p.stderr
    deadline = time.time() + 30
    while time.time() < deadline:
        line = f.readline()
        if not line:
            break
        m = re.search(pattern, line)
        if m:
            # keep draining the pipe so the server never blocks on a full pipe
            import threading
            threading.Thread(target=lambda: [None for _ in f], daemon=True).start()
            return p, int(m.group(1))
    p.kill()
    sys.exit(f"could not start {cmd[0]}")


def wait_ready(port):
    for _ in range(500):
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            c.request("GET", "/v2/health/ready")
            if c.getresponse().status == 200:
                return
        except OSError:
            pass
        time.sleep(0.02)
    sys.exit("attnd never became ready")


def post(port, path, body, headers):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
    t0 = time.perf_counter()
    c.request("POST", path, body=body, headers=headers)
    r = c.getresponse()
    data = r.read()
    dt = time.perf_counter() - t0
    if r.status != 200:
        sys.exit(f"POST {path}: {r.status} {data[:300]!r}")
    return dt, data


def parse_ms(v):
    m = re.fullmatch(r"([\d.]+)(us|ms|s|m|h)", v)
    if not m:
        sys.exit(f"cannot read wrk latency {v!r}")
    return float(m.group(1)) * {"us": 1e-3, "ms": 1, "s": 1e3, "m": 6e4, "h": 3.6e6}[m.group(2)]


def wrk(url, conns, secs, script):
    out = subprocess.run(["wrk", "-t", str(min(2, conns)), "-c", str(conns), "-d", f"{secs}s",
                          "--latency", "-s", script, url],
                         capture_output=True, text=True, timeout=secs + 60).stdout
    if "Latency Distribution" not in out:
        sys.exit(f"wrk gave no latency distribution:\n{out}")
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    p50 = parse_ms(re.search(r"^\s+50%\s+(\S+)", out, re.M).group(1))
    p99 = parse_ms(re.search(r"^\s+99%\s+(\S+)", out, re.M).group(1))
    non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    n = int(re.search(r"(\d+) requests in", out).group(1))
    return rps, p50, p99, int(non2xx.group(1)) if non2xx else 0, n


def cpu_seconds(pid):
    """User + system CPU seconds of process pid (all its threads) so far."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def loop_seconds(pid):
    """User + system CPU seconds of process pid's main thread (attnd's
    loop thread) so far."""
    with open(f"/proc/{pid}/task/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def wrk_cpu(url, conns, secs, script, pids):
    """wrk's figures at one point, then the CPU per request (us) of the
    server (pids: one process or several sharing the port, summed), of wrk
    itself (a waited-for child: RUSAGE_CHILDREN) and of the servers' main
    threads (attnd's loop threads)."""
    def kids():
        r = resource.getrusage(resource.RUSAGE_CHILDREN)
        return r.ru_utime + r.ru_stime
    pids = pids if isinstance(pids, list) else [pids]
    def cpu():
        return (sum(cpu_seconds(p) for p in pids), kids(), sum(loop_seconds(p) for p in pids))
    c0 = cpu()
    r = wrk(url, conns, secs, script)
    c1 = cpu()
    n = max(r[4], 1)
    return r + tuple((b - a) / n * 1e6 for a, b in zip(c0, c1))


def free_port():
    with socket.socket() as sk:
        sk.bind(("127.0.0.1", 0))
        return sk.getsockname()[1]


def loop_bound(a, repo, lua, bare_points):
    """What more loop threads could give on this machine: attnd with every
    small request inline on its loop thread (no hand-off, the cheapest
    path), as one process, then as two sharing the port (--reuse-port:
    two loops that share nothing, the most a second loop thread could
    add), at 16 and 64 connections; then the CPU roof: the cores shared
    with wrk, spent only on attnd's inline requests and wrk's."""
    print("the loop bound: every small request inline on a loop thread (--inline-conns 100000), "
          "one attnd, then two sharing the port (--reuse-port 1: two loops sharing nothing)")
    got = {}
    for procs in (1, 2):
        port = free_port()
        ps = [start([a.attnd, "--port", str(port), "--grpc-port", "0", "--models", repo,
                     "--inline-conns", "100000", "--reuse-port", "1", "--queue-size", "1024"],
                    r"listening on http://127\.0\.0\.1:(\d+)", "err")[0] for _ in range(procs)]
        try:
            for _ in range(10 * procs):  # each new connection may reach either process
                wait_ready(port)
            for c in (16, 64):
                r = wrk_cpu(f"http://127.0.0.1:{port}/v2/models/demo/infer", c, a.seconds, lua,
                            [p.pid for p in ps])
                got[procs, c] = r
                print(f"  {procs} process{'es' if procs > 1 else ''}, {c} conns: {r[0]:.0f} req/s, "
                      f"{r[0] / bare_points[c][0]:.2f}x bare; CPU per request attnd {r[5]:.1f} us "
                      f"(loop thread{'s' if procs > 1 else ''} {r[7]:.1f}), wrk {r[6]:.1f}"
                      + (f"  ({r[3]} non-2xx!)" if r[3] else ""))
        finally:
            for p in ps:
                p.terminate()
                p.wait(timeout=30)
    cores = len(os.sched_getaffinity(0))
    for c in (16, 64):
        r, b = got[1, c], bare_points[c]
        # wrk spends less per request on the bare server's quicker answers:
        # the roof takes that, the lower figure
        roof = cores / ((r[5] + b[6]) * 1e-6)
        print(f"  CPU roof at {c} connections: {cores} cores / (attnd's inline {r[5]:.1f} + wrk's {b[6]:.1f} us "
              f"at bare's point) = {roof:.0f} req/s, {roof / b[0]:.2f}x bare: every cycle of both cores "
              f"on these two, none idle or lost between threads")


def demo_work(port, model="demo"):
    """attnd's counters for a model (`demo`): requests, seconds spent
    decoding, computing and encoding them, and requests run inline
    (/metrics). The connection is closed before it returns: an open one
    would keep the next point's lone client from running inline
    (--inline-conns)."""
    for attempt in range(40):  # right after wrk -c64, its connections may
        try:                   # still fill --max-connections-per-ip (64)
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            c.request("GET", "/metrics")
            text = c.getresponse().read().decode()
            c.close()
            break
        except (ConnectionError, http.client.HTTPException):
            if attempt == 39:
                raise
            time.sleep(0.05)
    vals = []
    for name in ("count_total", "compute_input_duration_seconds_total",
                 "compute_infer_duration_seconds_total", "compute_output_duration_seconds_total",
                 "inline_count_total"):
        m = re.search(r'^attnd_inference_' + name + r'\{model="' + model + r'"[^}]*\} (\S+)$', text, re.M)
        if not m:
            sys.exit(f"attnd's /metrics has no attnd_inference_{name} for {model}")
        vals.append(float(m.group(1)))
    return vals


def write_model(folder, d, heads):
    """A random canonical weight set: W_q, W_k, W_v, W_o (d x d), F32."""
    os.makedirs(folder)
    rnd = random.Random(7)
    scale = 1 / d ** 0.5
    names, header, off = ["W_q", "W_k", "W_v", "W_o"], {}, 0
    for n in names:
        header[n] = {"dtype": "F32", "shape": [d, d], "data_offsets": [off, off + 4 * d * d]}
        off += 4 * d * d
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(os.path.join(folder, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        for _ in names:
            f.write(struct.pack(f"<{d * d}f", *[rnd.uniform(-scale, scale) for _ in range(d * d)]))
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump({"n_heads": heads}, f)


def decode_y(port, steps, model="llama", dm=2048):
    """A short sequence (steps: [(x bytes, rows)], the first one starts it)
    on a decoder layer; every answer's y as floats."""
    import decode_http
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    ys = []
    for i, (x, t) in enumerate(steps):
        b, hl = decode_http.body(x, t, 4242, i == 0, dm)
        c.request("POST", f"/v2/models/{model}/infer", b,
                  {"Inference-Header-Content-Length": str(hl),
                   "Content-Type": "application/octet-stream"})
        r = c.getresponse()
        data = r.read()
        if r.status != 200:
            sys.exit(f"decode check: HTTP {r.status}: {data[:300]!r}")
        h = int(r.getheader("Inference-Header-Content-Length"))
        ys.append(struct.unpack(f"<{(len(data) - h) // 4}f", data[h:]))
    c.close()
    return ys


def peer_y_diff(aport, pyport, model, dm, prompt, seed):
    """attnd's and the Python peer's y for one sequence of `model` (a
    `prompt`-token start, then two one-token steps, the same seeded x):
    (max |diff|, largest |y| of attnd's); exits when their lengths differ."""
    rnd = random.Random(seed)
    steps = [(struct.pack(f"<{t * dm}f", *[rnd.uniform(-1, 1) for _ in range(t * dm)]), t)
             for t in (prompt, 1, 1)]
    ya, yp = decode_y(aport, steps, model, dm), decode_y(pyport, steps, model, dm)
    if any(len(sa) != len(sp) for sa, sp in zip(ya, yp)):
        sys.exit(f"{model} check: the Python peer's y is not as long as attnd's")
    return (max(abs(u - v) for sa, sp in zip(ya, yp) for u, v in zip(sa, sp)),
            max(abs(u) for sa in ya for u in sa))


def decode_point(a, tmp, procs):
    """Batched decoder steps, 1 then 32 clients, attnd and the Python peer
    (its y checked equal to attnd's on a short sequence first)."""
    sys.path.insert(0, HERE)
    import decode_http
    script = os.path.join(HERE, "decode_http.py")
    repo = os.path.join(tmp, "decode")
    os.makedirs(repo)
    decode_http.write_layer(os.path.join(repo, "llama"))
    decode_http.write_layer(os.path.join(repo, "small"), **SMALL)
    pyport = None
    if a.python:
        py, pyport = start([a.python, os.path.join(HERE, "fastapi_peer.py"), "--models", repo,
                            "--workers", "2"], r"listening on http://127\.0\.0\.1:(\d+)", "out")
        procs.append(py)
        at, aport = start([a.attnd, "--port", "0", "--grpc-port", "0", "--models", repo],
                          r"listening on http://127\.0\.0\.1:(\d+)", "err")
        procs.append(at)
        wait_ready(aport)
        diff, scale = peer_y_diff(aport, pyport, "llama", decode_http.DM, 8, 5)
        if diff > 1e-4 * max(scale, 1):
            sys.exit(f"decode check: the Python peer's y differs from attnd's (max |diff| {diff:g})")
        at.terminate()
        at.wait(timeout=30)
    # Each point runs a.decode_runs times, 1 and 32 clients taking turns
    # (so both see the same minutes), and the median counts: 32 steps of
    # one client last ~50 ms, and one slow moment of a shared machine moved
    # a single run by 2x.
    runs = {}
    for who, extra in (("attnd", []), ("python", ["--port", str(pyport)] if pyport else None)):
        if extra is None:
            continue
        for _ in range(a.decode_runs):
            for n in (1, 32):
                out = subprocess.run([sys.executable, script, "--client", a.client, a.attnd, str(n), "--prompt",
                                      str(a.decode_prompt), "--steps", str(a.decode_steps)] + extra,
                                     capture_output=True, text=True, timeout=900)
                m = re.search(r"tps=([\d.]+)", out.stdout)
                if not m:
                    sys.exit(f"decode_http.py {who} {n}: {out.stdout}{out.stderr}")
                p50 = re.search(r"p50_ms=([\d.]+)", out.stdout)
                runs.setdefault((who, n), []).append(
                    (float(m.group(1)), float(p50.group(1)) if p50 else float("nan")))
    tps = {}
    for (who, n), v in runs.items():
        # the run whose steps/s is the median, whole (its p50 with it)
        tps[who, n], tps[who, n, "p50"] = sorted(v)[len(v) // 2]
        tps[who, n, "all"] = "/".join(f"{t:.0f}" for t, _ in v)
    print(f"\nbatched decode: d_model 2048, H 32, H_kv 8, {a.decode_prompt}-token prompts, "
          f"{a.decode_steps} one-token steps, binary, median of {a.decode_runs} runs"
          + (f"; python peer's y equal to attnd's (max |diff| {diff:.1e})" if pyport else ""))
    for who in ("attnd", "python"):
        if (who, 1) in tps:
            r = tps[who, 32] / tps[who, 1]
            print(f"  {who:>6}: 1 client {tps[who, 1]:.0f} steps/s (p50 {tps[who, 1, 'p50']:.1f} ms), "
                  f"32 clients {tps[who, 32]:.0f} steps/s (p50 {tps[who, 32, 'p50']:.1f} ms): {r:.1f}x"
                  + (f" (aim >= 8x: {'met' if r >= 8 else 'not met'})" if who == "attnd" else "")
                  + (f"; runs {tps[who, 1, 'all']} and {tps[who, 32, 'all']}" if a.decode_runs > 1 else ""))
    if a.engine:
        engine_point(a, tps)
    small_steps_point(a, repo, pyport, procs)


# The small decoder layer: the page's live view steps a sequence of a model
# this size, and its steps are a lone client's small requests.
SMALL = {"dm": 64, "h": 4, "hkv": 2, "dk": 16}


def small_steps_point(a, repo, pyport, procs):
    """One client stepping one sequence of the small layer (16-token prompt,
    then a.small_steps one-token steps, binary), attnd against the Python
    peer, taking turns a.decode_runs times (median); the peer's y checked
    equal to attnd's first. Prints steps/s, p50 and the share of attnd's
    steps that ran inline on the loop thread, the rate of steps each sent
    twice at its sequence_position (step_client --resend: every second
    request rewinds the sequence); then the same with a scraper's idle
    connection open (scraped_steps)."""
    if not a.small_steps:
        return
    dm = SMALL["dm"]
    at, aport = start_small(a, repo, [])
    procs.append(at)
    diff = None
    if pyport:
        diff, _ = peer_y_diff(aport, pyport, "small", dm, 16, 6)
        if diff > 1e-5:
            sys.exit(f"small steps check: the Python peer's y differs from attnd's (max |diff| {diff:g})")
    w0 = demo_work(aport, "small")
    runs, resent = {}, []
    for r in range(a.decode_runs):
        for who, port in (("attnd", aport), ("python", pyport)):
            if port:
                runs.setdefault(who, []).append(small_client(a, port, 1000 * (r + 1), who))
        resent.append(small_client(a, aport, 1000 * (r + 1) + 500, "attnd --resend", ["--resend"]))
    share = inline_share(w0, demo_work(aport, "small"))
    at.terminate()
    at.wait(timeout=30)
    print(f"\nsmall decoder steps: d_model {dm}, H {SMALL['h']}, H_kv {SMALL['hkv']}, 16-token prompt, "
          f"{a.small_steps} one-token steps, 1 client, binary, median of {a.decode_runs} runs"
          + (f"; python peer's y equal to attnd's (max |diff| {diff:.1e})" if diff is not None else ""))
    med = {who: sorted(v)[len(v) // 2] for who, v in runs.items()}
    for who, (t, p50) in med.items():
        print(f"  {who:>6}: {t:.0f} steps/s (p50 {p50:.3f} ms); runs "
              + "/".join(f"{x:.0f}" for x, _ in runs[who]))
    if "python" in med:
        print(f"  attnd/python: {med['attnd'][0] / med['python'][0]:.1f}x the steps/s, "
              f"{med['python'][1] / med['attnd'][1]:.1f}x lower p50")
    print(f"  attnd's steps run inline on the loop thread (/metrics): {share:.0f}%")
    rs = sorted(resent)[len(resent) // 2]
    print(f"  attnd, each step sent twice at its sequence_position (the second replaces the first, as a "
          f"client whose answer was lost sends it again): {rs[0]:.0f} requests/s (p50 {rs[1]:.3f} ms), "
          f"{rs[0] / med['attnd'][0]:.2f} of the plain steps' rate; runs " + "/".join(f"{x:.0f}" for x, _ in resent))
    for args, what in (([], "default"), (["--inline-idle-ms", "0"], "--inline-idle-ms 0: every open connection counts")):
        t, share = scraped_steps(a, repo, args, 1000 * (a.decode_runs + 2))
        print(f"  attnd with a scraper's keep-alive open (one GET /metrics, then 1.2 s idle; {what}): "
              f"{t:.0f} steps/s, {share:.0f}% inline")


def start_small(a, repo, args):
    """attnd on the small point's repository, ready: (process, port)."""
    at, port = start([a.attnd, "--port", "0", "--grpc-port", "0", "--models", repo] + args,
                     r"listening on http://127\.0\.0\.1:(\d+)", "err")
    wait_ready(port)
    return at, port


def small_client(a, port, seq_base, who, extra=()):
    """step_client stepping one sequence of the small layer: (steps/s, p50 ms)."""
    out = subprocess.run([a.client, "--port", str(port), "--n", "1", "--prompt", "16",
                          "--steps", str(a.small_steps), "--model", "small", "--d-model", str(SMALL["dm"]),
                          "--seq-base", str(seq_base), *extra],
                         capture_output=True, text=True, timeout=300)
    m = re.search(r"tps=([\d.]+) p50_ms=([\d.]+)", out.stdout)
    if out.returncode or not m:
        sys.exit(f"step_client {who} (small): {out.stdout}{out.stderr}")
    return float(m.group(1)), float(m.group(2))


def inline_share(w0, w1):
    """% of the requests between two demo_work readings that ran inline."""
    return 100 * (w1[4] - w0[4]) / max(w1[0] - w0[0], 1)


def scraped_steps(a, repo, args, seq_base):
    """The small point's client once more, with a second connection open
    and idle, as a metrics scraper leaves it between scrapes: steps/s and
    the share run inline (--inline-idle-ms)."""
    at, aport = start_small(a, repo, args)
    try:
        w0 = demo_work(aport, "small")
        scraper = http.client.HTTPConnection("127.0.0.1", aport, timeout=30)
        scraper.request("GET", "/metrics")
        scraper.getresponse().read()
        time.sleep(1.2)
        t, _ = small_client(a, aport, seq_base, "attnd (scraper open)")
        scraper.close()
        return t, inline_share(w0, demo_work(aport, "small"))
    finally:
        at.terminate()
        at.wait(timeout=30)


def engine_point(a, tps):
    """The engine alone (bench_decode, no HTTP) on the same layer, prompts
    and steps, 2 threads: the ceiling of the decode point's ratio on this
    machine, and the step's bytes and FLOPs against memcpy and sgemm."""
    got = {1: [], 32: []}
    for _ in range(a.decode_runs):
        out = subprocess.run([a.engine, "--threads", str(a.threads or os.cpu_count() or 1), "--no-peer",
                              "--n", "1,32", "--prompt", str(a.decode_prompt), "--steps", str(a.decode_steps)],
                             capture_output=True, text=True, timeout=900)
        for line in out.stdout.splitlines():
            m = re.match(r"decode n=(\d+) (.*)", line)
            if m and int(m.group(1)) in got:
                got[int(m.group(1))].append(
                    {k: float(v) for k, v in re.findall(r"(\w+)=([-\d.naif]+)", m.group(2))})
        if not got[1] or not got[32]:
            sys.exit(f"bench_decode gave no n=1 and n=32 lines:\n{out.stdout}{out.stderr}")
    # the run whose steps/s is the median, whole (its rates belong together)
    eng = {n: sorted(v, key=lambda e: e["engine_tps"])[len(v) // 2] for n, v in got.items()}
    e1, e32 = eng[1]["engine_tps"], eng[32]["engine_tps"]
    each = {n: "/".join(f"{e['engine_tps']:.0f}" for e in v) for n, v in got.items()}
    print(f"  engine: 1 sequence {e1:.0f} steps/s, 32 sequences {e32:.0f} steps/s: {e32 / e1:.1f}x "
          f"(bench_decode, no HTTP, same layer and steps, median of {a.decode_runs}"
          + (f": {each[1]} and {each[32]}" if a.decode_runs > 1 else "")
          + f"); attnd reaches {tps['attnd', 1] / e1:.2f} and {tps['attnd', 32] / e32:.2f} of it")
    for n in (1, 32):
        e = eng[n]
        print(f"  engine at {n:>2}: reads {e['engine_gbps']:.1f} GB/s (weights + K/V), "
              f"{e['bw_frac']:.2f} of memcpy's {e['memcpy_gbps']:.1f}; computes {e['step_gflops']:.0f} GFLOP/s, "
              f"{e['step_gflops'] / e['sgemm_gflops']:.2f} of sgemm's {e['sgemm_gflops']:.0f}")
    roof = e32 / eng[32]["bw_frac"]
    print(f"  memory roof at 32: every byte of a batch (weights, K/V) read at memcpy's rate gives "
          f"{roof:.0f} steps/s, {roof / e1:.1f}x the engine's 1-sequence rate "
          f"(which reads at {eng[1]['bw_frac']:.1f}x memcpy's rate: its bytes stay in cache)")
    croof = e32 * eng[32]["sgemm_gflops"] / eng[32]["step_gflops"]
    print(f"  compute roof at 32: every FLOP of a batch at sgemm's rate ({a.threads or os.cpu_count() or 1} threads) "
          f"gives {croof:.0f} steps/s, "
          f"{croof / e1:.1f}x the engine's 1-sequence rate; the lower roof, "
          f"{min(roof, croof) / e1:.1f}x, bounds the ratio on this machine")


def small_body():
    """The small request: demo, x [1, 16, 64], seeded values."""
    rnd = random.Random(1)
    return json.dumps({"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 16, 64],
                                   "data": [round(rnd.uniform(-1, 1), 6) for _ in range(16 * 64)]}]})


def thp_tunables(t):
    """GLIBC_TUNABLES t with glibc.malloc.hugetlb=1 added unless it names
    that tunable, as attnd's attn_blas_reexec does for itself."""
    if t and "glibc.malloc.hugetlb" in t:
        return t
    return (t + ":" if t else "") + "glibc.malloc.hugetlb=1"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--attnd", default=os.path.join(ROOT, "build/default/attnd"))
    ap.add_argument("--bare", default=os.path.join(ROOT, "build/default/bench/bare_mhd"))
    ap.add_argument("--client", default=os.path.join(ROOT, "build/default/bench/step_client"),
                    help="bench/step_client.c, built: the decoder-step clients")
    ap.add_argument("--engine", default=os.path.join(ROOT, "build/default/bench/bench_decode"),
                    help="bench_decode: the engine alone on the decode point's layer and steps ('' skips)")
    ap.add_argument("--seconds", type=int, default=5, help="wrk duration per point")
    ap.add_argument("--small-runs", type=int, default=3,
                    help="runs of attnd and bare at each small-request point, taking turns; the pair "
                         "whose attnd/bare ratio is the median counts (the upper middle one of an even "
                         "number)")
    ap.add_argument("--threads", type=int, default=0, help="attnd --threads")
    ap.add_argument("--decode-prompt", type=int, default=128)
    ap.add_argument("--decode-steps", type=int, default=32, help="0 skips the decode point")
    ap.add_argument("--small-steps", type=int, default=256,
                    help="one-token steps of the small-layer point (0 skips it; needs --decode-steps)")
    ap.add_argument("--decode-runs", type=int, default=3,
                    help="runs of each decode and engine point (1 and 32 taking turns); the median "
                         "run counts (the upper middle one of an even number)")
    ap.add_argument("--python", default="/usr/bin/python3",
                    help="the Python with torch and fastapi for the peer ('' skips it)")
    a = ap.parse_args()
    if a.decode_runs < 1 or a.small_runs < 1:
        ap.error("--decode-runs and --small-runs must be at least 1")
    if not shutil.which("wrk"):
        sys.exit("wrk is missing: tools/install-deps.sh bench")
    # the Python peers call the same OpenBLAS as attnd (PyTorch 1.13 from
    # Debian): give them the kernels attnd runs (README, "BLAS kernels")
    ver = subprocess.run([a.attnd, "--version"], capture_output=True, text=True).stdout
    m = re.search(r"OpenBLAS kernels (\w+)", ver)
    if m and "OPENBLAS_CORETYPE" not in os.environ:
        os.environ["OPENBLAS_CORETYPE"] = m.group(1)
    # and the malloc setting attnd gives itself (bench/ROUNDS.md, "Eighth
    # round"):
    # every process of the run asks for transparent huge pages alike
    os.environ["GLIBC_TUNABLES"] = thp_tunables(os.environ.get("GLIBC_TUNABLES"))
    print(f"{ver.strip()}; Python peers with OPENBLAS_CORETYPE="
          f"{os.environ.get('OPENBLAS_CORETYPE', '(unset)')}, every process with "
          f"GLIBC_TUNABLES={os.environ['GLIBC_TUNABLES']}")
    tmp = tempfile.mkdtemp(prefix="attnd-bench-")
    procs = []
    try:
        repo = os.path.join(tmp, "models")
        os.makedirs(repo)
        shutil.copytree(os.path.join(ROOT, "models", "demo"), os.path.join(repo, "demo"))
        write_model(os.path.join(repo, "big"), 768, 12)
        at, aport = start([a.attnd, "--port", "0", "--grpc-port", "0", "--models", repo, "--threads", str(a.threads),
                           "--max-json-body", str(512 << 20), "--max-body", str(512 << 20),
                           "--request-memory", str(2 << 30), "--memory-budget", str(8 << 30),
                           "--queue-size", "1024"],
                          r"listening on http://127\.0\.0\.1:(\d+)", "err")
        procs.append(at)
        wait_ready(aport)
        small = small_body()
        rnd = random.Random(2)
        _, resp = post(aport, "/v2/models/demo/infer", small, {"Content-Type": "application/json"})
        bare, bport = start([a.bare, "0", str(len(resp))], r"listening on http://127\.0\.0\.1:(\d+)", "out")
        procs.append(bare)
        pyport = None
        if a.python:
            prepo = os.path.join(tmp, "pymodels")
            os.makedirs(prepo)
            shutil.copytree(os.path.join(ROOT, "models", "demo"), os.path.join(prepo, "demo"))
            py, pyport = start([a.python, os.path.join(HERE, "fastapi_peer.py"), "--models", prepo,
                                "--workers", "2"], r"listening on http://127\.0\.0\.1:(\d+)", "out")
            procs.append(py)
            _, presp = post(pyport, "/v2/models/demo/infer", small, {"Content-Type": "application/json"})
            ya = json.loads(resp)["outputs"][0]
            yp = json.loads(presp)["outputs"][0]
            diff = max(abs(u - v) for u, v in zip(ya["data"], yp["data"]))
            if ya["shape"] != yp["shape"] or len(ya["data"]) != len(yp["data"]) or diff > 1e-5:
                sys.exit(f"the Python peer's y differs from attnd's (max |diff| {diff:g})")
            print(f"python peer: FastAPI/uvicorn + PyTorch {a.python}, 2 workers x 1 torch thread; "
                  f"y equal to attnd's (max |diff| {diff:.1e}), answer {len(presp)} B")
        lua = os.path.join(tmp, "post.lua")
        with open(lua, "w") as f:
            f.write('wrk.method = "POST"\nwrk.headers["Content-Type"] = "application/json"\n'
                    f"wrk.body = {json.dumps(small)}\n")
        print(f"small requests: demo, T=16, d_model=64, JSON body {len(small)} B, answer {len(resp)} B; "
              f"wrk {a.seconds}s per point")
        print(f"{'conns':>5} | {'attnd req/s':>11} {'p50 ms':>7} {'p99 ms':>7} | "
              f"{'bare req/s':>10} {'p50 ms':>7} {'p99 ms':>7} | "
              f"{'python req/s':>12} {'p50 ms':>7} {'p99 ms':>7} | {'attnd/bare':>10} {'python/bare':>11}")
        points, inline, pair_runs = {}, {}, {}
        for c in (1, 16, 64):
            # attnd and bare take turns a.small_runs times (the machine's
            # speed drifts by a quarter over minutes); the pair whose ratio
            # is the median counts, whole
            pairs = []
            for _ in range(a.small_runs):
                w0 = demo_work(aport)
                ra = wrk_cpu(f"http://127.0.0.1:{aport}/v2/models/demo/infer", c, a.seconds, lua, at.pid)
                w1 = demo_work(aport)
                rb = wrk_cpu(f"http://127.0.0.1:{bport}/v2/models/demo/infer", c, a.seconds, lua, bare.pid)
                pairs.append((ra[0] / rb[0], ra, rb, w0, w1))
            pair_runs[c] = "/".join(f"{x[0]:.2f}" for x in pairs)
            _, ra, rb, w0, w1 = sorted(pairs, key=lambda x: x[0])[len(pairs) // 2]
            inline[c] = inline_share(w0, w1)
            if c == 1:  # attnd's own work per request, nothing else running
                work = [(u - v) / max(w1[0] - w0[0], 1) * 1e6 for u, v in zip(w1[1:4], w0[1:4])]
            rp = (wrk(f"http://127.0.0.1:{pyport}/v2/models/demo/infer", c, a.seconds, lua)
                  if pyport else (float("nan"),) * 3 + (0,))
            points[c] = (ra, rb, rp)
            note = "".join(f"  ({r[3]} non-2xx from {n}!)" for n, r in (("attnd", ra), ("python", rp)) if r[3])
            print(f"{c:>5} | {ra[0]:>11.0f} {ra[1]:>7.2f} {ra[2]:>7.2f} | "
                  f"{rb[0]:>10.0f} {rb[1]:>7.2f} {rb[2]:>7.2f} | "
                  f"{rp[0]:>12.0f} {rp[1]:>7.2f} {rp[2]:>7.2f} | "
                  f"{ra[0] / rb[0]:>10.2f} {rp[0] / rb[0]:>11.2f}{note}")
        if a.small_runs > 1:
            print(f"attnd and bare took turns {a.small_runs} times at each point; the pair whose ratio is "
                  f"the median is shown; every pair's attnd/bare: "
                  + ", ".join(f"{pair_runs[c]} at {c}" for c in (1, 16, 64)))
        print("aims (small requests, vs the bare server):")
        for c in (1, 16, 64):
            ra, rb, rp = points[c]
            print(f"  req/s at {c:>2} connections >= 0.6x bare: attnd {ra[0] / rb[0]:.2f}x "
                  f"({'met' if ra[0] / rb[0] >= 0.6 else 'not met'}), python {rp[0] / rb[0]:.2f}x")
        ra, rb, rp = points[1]
        print(f"  p50 at 1 connection <= 2x bare's ({rb[1]:.3f} ms): attnd {ra[1] / rb[1]:.1f}x "
              f"({'met' if ra[1] / rb[1] <= 2 else 'not met'}), python {rp[1] / rb[1]:.1f}x")
        # The machine's limit for the 0.6x aim: a server that did the bare
        # server's work plus attnd's decode, layer and encode, with nothing
        # lost between threads, on every core wrk leaves it.
        cores = len(os.sched_getaffinity(0))
        w = sum(work)
        print("CPU per request, us (each server's /proc times over its point, and wrk's own, / requests):")
        print("  " + ", ".join(f"{c} conns: attnd {points[c][0][5]:.1f} (wrk {points[c][0][6]:.1f}), "
                               f"bare {points[c][1][5]:.1f} (wrk {points[c][1][6]:.1f})" for c in (1, 16, 64)))
        print("  of attnd's, its loop thread: " + ", ".join(
            f"{points[c][0][7]:.1f} at {c} ({points[c][0][7] * points[c][0][0] / 1e4:.0f}% of a core)"
            for c in (1, 16, 64)) + "; the rest on the pool and the log writer")
        print(f"  attnd's own work at 1 connection (/metrics): decode {work[0]:.1f} + layer {work[1]:.1f} "
              f"+ encode {work[2]:.1f} = {w:.1f} us, {w / points[1][1][5]:.1f}x the bare server's whole request")
        print("  requests run inline on the loop thread (/metrics; the rest on the pool): " +
              ", ".join(f"{inline[c]:.0f}% at {c}" for c in (1, 16, 64)))
        ra, rb, _ = points[1]
        # one connection: each request waits for the one before, so the
        # work adds to the bare server's round trip
        lat = rb[1] + w / 1000
        rps = 1 / (1 / rb[0] + w * 1e-6)
        print(f"  latency roof at 1 connection: bare's p50 + that work = {lat:.3f} ms, {lat / rb[1]:.1f}x bare's "
              f"(aim <= 2x; attnd {ra[1] / rb[1]:.1f}x); bare's round trip + the work = {rps:.0f} req/s, "
              f"{rps / rb[0]:.2f}x bare (aim >= 0.6x; attnd reaches {ra[0] / rps:.2f} of it)")
        for c in (16, 64):
            ra, rb, _ = points[c]
            roof = cores / ((w + rb[5] + rb[6]) * 1e-6)
            print(f"  work roof at {c} connections: {cores} cores / (that work + bare's {rb[5]:.1f} + wrk's "
                  f"{rb[6]:.1f} us) = {roof:.0f} req/s, {roof / rb[0]:.2f}x bare; attnd reaches {ra[0] / roof:.2f} of it")

        loop_bound(a, repo, lua, {c: points[c][1] for c in (16, 64)})

        if a.decode_steps:
            decode_point(a, tmp, procs)

        B, T, D = 8, 512, 768
        xs = [round(rnd.uniform(-1, 1), 6) for _ in range(B * T * D)]
        jbody = json.dumps({"inputs": [{"name": "x", "datatype": "FP32", "shape": [B, T, D], "data": xs}]}).encode()
        head = json.dumps({"inputs": [{"name": "x", "datatype": "FP32", "shape": [B, T, D],
                                       "parameters": {"binary_data_size": 4 * B * T * D}}],
                           "parameters": {"binary_data_output": True}}).encode()
        bbody = head + struct.pack(f"<{B * T * D}f", *xs)
        print(f"\nlarge request: B={B}, T={T}, d_model={D}, 12 heads (median of 3)")
        print(f"{'form':>6} | {'bytes in':>10} | {'ms end to end':>13} | {'MB/s in':>8}")
        for form, body, hdr in (("JSON", jbody, {"Content-Type": "application/json"}),
                                ("binary", bbody, {"Inference-Header-Content-Length": str(len(head))})):
            times = [post(aport, "/v2/models/big/infer", body, hdr)[0] for _ in range(3)]
            t = statistics.median(times)
            print(f"{form:>6} | {len(body):>10} | {t * 1000:>13.1f} | {len(body) / t / 1e6:>8.1f}")
        def hwm(p):
            with open(f"/proc/{p.pid}/status") as f:
                return int(re.search(r"VmHWM:\s+(\d+) kB", f.read()).group(1)) / 1024
        print(f"\npeak RSS: attnd {hwm(at):.0f} MiB (with the large requests), "
              f"bare_mhd {hwm(bare):.1f} MiB")
    finally:
        for p in procs:
            p.terminate()
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
