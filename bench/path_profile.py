#!/usr/bin/env python3
"""Where a small request's time goes in attnd: counts per request.

    python3 bench/path_profile.py --attnd build/default/attnd [--requests 1000]
        [--attnd-args '--inline-conns 0']   (the pool path, as under load)

Serves `demo` T=16 JSON requests (the small request of bench/http_bench.py)
one after another on one keep-alive connection, twice per tool: once with a
warm-up only, once with the warm-up and N more requests. The difference of
the two runs divided by N is what one request costs, start-up and shutdown
cancelled out:

- strace -f -c: system calls per request, by name;
- valgrind --tool=callgrind: instructions per request (repeatable on a busy
  machine, unlike time), split by where they run (attnd's server/, proto/,
  core/ sources, libmicrohttpd, libuv, libc, OpenBLAS, ...), the top
  functions, and call counts per request of the heap (malloc, calloc,
  realloc, free), of copies (memcpy/memmove) and of the loop <-> pool
  hand-offs (uv_queue_work: one work item goes to a pool thread and its
  completion comes back to the loop thread).

Needs strace and valgrind (tools/install-deps.sh bench). Bounded in time:
about a minute on two cores.
"""
import argparse
import collections
import http.client
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import http_bench  # noqa: E402  (start, wait_ready, small_body)


def serve(cmd, env, body, warm, n, stream="err"):
    """Start cmd (an attnd under a tool, or bare_mhd with stream "out"),
    send warm + n requests, stop it."""
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE if stream == "out" else subprocess.DEVNULL,
                         stderr=subprocess.PIPE if stream == "err" else subprocess.DEVNULL,
                         text=True, env=env)
    f = p.stdout if stream == "out" else p.stderr
    port = None
    deadline = time.time() + 120
    while time.time() < deadline:
        line = f.readline()
        if not line:
            break
        m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", line)
        if m:
            port = int(m.group(1))
            break
    if port is None:
        p.kill()
        sys.exit(f"could not start {' '.join(cmd[:3])}")
    import threading
    threading.Thread(target=lambda: [None for _ in f], daemon=True).start()
    http_bench.wait_ready(port)
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    for _ in range(warm + n):
        c.request("POST", "/v2/models/demo/infer", body=body,
                  headers={"Content-Type": "application/json"})
        r = c.getresponse()
        r.read()
        if r.status != 200:
            sys.exit(f"request failed: {r.status}")
    c.close()
    # under strace the daemon is strace's child: SIGTERM goes to it (attnd
    # drains and exits 0, then strace writes its table)
    try:
        with open(f"/proc/{p.pid}/task/{p.pid}/children") as f:
            kids = [int(k) for k in f.read().split()]
    except OSError:
        kids = []
    os.kill(kids[0] if kids else p.pid, signal.SIGTERM)
    p.wait(timeout=120)


def strace_counts(path):
    """{syscall: calls} from strace -c's table."""
    out = {}
    with open(path) as f:
        for line in f:
            m = re.match(r"\s*[\d.]+\s+[\d.]+\s+\d+\s+(\d+)(?:\s+\d+)?\s+(\w+)\s*$", line)
            if m:
                out[m.group(2)] = int(m.group(1))
    return out


def callgrind_costs(path):
    """Exclusive Ir per (object, file, function), calls per callee name, and
    calls per (caller function [place], callee name)."""
    names = {}
    excl = collections.Counter()
    calls = collections.Counter()
    pairs = collections.Counter()
    ob = fl = fn = None
    skip = False

    def name(kind, rest):
        m = re.match(r"\((\d+)\)(?:\s+(.*))?", rest)
        if not m:
            return rest.strip()
        key = (kind, m.group(1))
        if m.group(2) is not None:
            names[key] = m.group(2).strip()
        return names.get(key, "?")

    cfn = None
    with open(path) as f:
        for line in f:
            line = line.rstrip("\n")
            if skip:
                skip = False
                continue
            if line.startswith("ob="):
                ob = name("ob", line[3:])
            elif line.startswith("fl="):
                fl = name("fl", line[3:])
            elif line.startswith(("fi=", "fe=")):
                name("fl", line[3:])
            elif line.startswith("fn="):
                fn = name("fn", line[3:])
            elif line.startswith("cob="):
                name("ob", line[4:])
            elif line.startswith(("cfi=", "cfl=")):
                name("fl", line[4:])
            elif line.startswith("cfn="):
                cfn = name("fn", line[4:])
            elif line.startswith("calls="):
                calls[cfn] += int(line[6:].split()[0])
                pairs[(f"{fn} [{where(ob, fl)}]", cfn)] += int(line[6:].split()[0])
                skip = True  # the next line is the call's inclusive cost
            elif line and (line[0].isdigit() or line[0] in "+-*"):
                parts = line.split()
                if len(parts) >= 2:
                    excl[(ob, fl, fn)] += int(parts[1])
    return excl, calls, pairs


def where(ob, fl):
    """A place to group instructions by: attnd's folder, or the library."""
    base = os.path.basename(ob or "?")
    if base == "attnd":
        m = re.search(r"(?:^|/)(server|proto|core)/[^/]*$", fl or "")
        return "attnd " + (m.group(1) + "/" if m else "(other)")
    m = re.match(r"lib([\w+-]+?)(?:[-.]|$)", base)
    return m.group(1) if m else base


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--attnd", default=os.path.join(ROOT, "build/default/attnd"))
    ap.add_argument("--requests", type=int, default=1000)
    ap.add_argument("--warm", type=int, default=100)
    ap.add_argument("--threads", type=int, default=2, help="attnd --threads")
    ap.add_argument("--top", type=int, default=15)
    ap.add_argument("--attnd-args", default="",
                    help="more attnd settings, e.g. '--inline-conns 0' for the pool path")
    ap.add_argument("--bare", default=os.path.join(ROOT, "build/default/bench/bare_mhd"),
                    help="bare_mhd, profiled the same way for comparison ('' skips it)")
    a = ap.parse_args()
    for tool in ("strace", "valgrind", "callgrind_annotate"):
        if not shutil.which(tool):
            sys.exit(f"{tool} is missing: tools/install-deps.sh bench")
    tmp = tempfile.mkdtemp(prefix="attnd-profile-")
    try:
        repo = os.path.join(tmp, "models")
        os.makedirs(repo)
        shutil.copytree(os.path.join(ROOT, "models", "demo"), os.path.join(repo, "demo"))
        body = http_bench.small_body()
        attnd = [a.attnd, "--port", "0", "--grpc-port", "0", "--models", repo, "--threads", str(a.threads)] + a.attnd_args.split()
        # as attnd sets them for itself (by running itself again, which
        # valgrind would not follow)
        env = dict(os.environ, OPENBLAS_NUM_THREADS="1",
                   GLIBC_TUNABLES=http_bench.thp_tunables(os.environ.get("GLIBC_TUNABLES")))
        n = a.requests
        print(f"path profile: demo T=16 JSON ({len(body)} B), one keep-alive connection, "
              f"attnd --threads {a.threads} {a.attnd_args}; per request = (run with {a.warm}+{n} requests "
              f"- run with {a.warm}) / {n}")

        sc = []
        for k in (0, n):
            out = os.path.join(tmp, f"strace.{k}")
            serve(["strace", "-f", "-c", "-o", out] + attnd, env, body, a.warm, k)
            sc.append(strace_counts(out))
        diff = {s: (sc[1].get(s, 0) - sc[0].get(s, 0)) / n for s in set(sc[0]) | set(sc[1])}
        rows = sorted(((v, s) for s, v in diff.items() if v >= 0.05 and s != "total"),
                      reverse=True)
        print(f"\nsystem calls per request (strace -f -c): {sum(v for v, _ in rows):.1f}")
        print("  " + ", ".join(f"{s} {v:.1f}" for v, s in rows))

        cg = []
        for k in (0, n):
            out = os.path.join(tmp, f"callgrind.{k}")
            serve(["valgrind", "--tool=callgrind", "--callgrind-out-file=" + out] + attnd,
                  env, body, a.warm, k)
            cg.append(callgrind_costs(out))
        if a.bare and os.path.exists(a.bare):
            bare = [a.bare, "0", "12901"]
            bs, bi = [], []
            for k in (0, n):
                out = os.path.join(tmp, f"bare.strace.{k}")
                serve(["strace", "-f", "-c", "-o", out] + bare, env, body, a.warm, k, "out")
                bs.append(sum(v for s, v in strace_counts(out).items() if s != "total"))
                out = os.path.join(tmp, f"bare.callgrind.{k}")
                serve(["valgrind", "--tool=callgrind", "--callgrind-out-file=" + out] + bare,
                      env, body, a.warm, k, "out")
                bi.append(sum(callgrind_costs(out)[0].values()))
            print(f"\nbare_mhd, same requests: {(bs[1] - bs[0]) / n:.1f} system calls and "
                  f"{(bi[1] - bi[0]) / n:,.0f} instructions per request")
        excl = collections.Counter(cg[1][0])
        excl.subtract(cg[0][0])
        calls = collections.Counter(cg[1][1])
        calls.subtract(cg[0][1])
        pairs = collections.Counter(cg[1][2])
        pairs.subtract(cg[0][2])
        total = sum(excl.values()) / n
        print(f"\ninstructions per request (callgrind, all threads): {total:,.0f}")
        by_place = collections.Counter()
        for (ob, fl, fn), v in excl.items():
            by_place[where(ob, fl)] += v
        print("  by place: " + ", ".join(f"{p} {v / n:,.0f} ({100 * v / n / total:.0f}%)"
                                         for p, v in by_place.most_common() if v / n >= 0.005 * total))
        by_fn = collections.Counter()
        for (ob, fl, fn), v in excl.items():
            by_fn[f"{fn} [{where(ob, fl)}]"] += v
        print(f"  top {a.top} functions (exclusive):")
        for f, v in by_fn.most_common(a.top):
            print(f"    {v / n:>10,.0f}  {100 * v / n / total:4.1f}%  {f}")
        heap = {k: calls[k] / n for k in ("malloc", "calloc", "realloc", "posix_memalign", "free")}
        print("  calls per request: heap " + ", ".join(f"{k} {v:.1f}" for k, v in heap.items() if v)
              + f"; memcpy/memmove {sum(v for k, v in calls.items() if k and re.match(r'(__)?mem(cpy|move)', k)) / n:.1f}"
              + f"; loop<->pool hand-offs (uv_queue_work) {calls['uv_queue_work'] / n:.1f}"
              + f"; MHD suspend/resume {calls['MHD_suspend_connection'] / n:.1f}/"
              f"{calls['MHD_resume_connection'] / n:.1f}; MHD_run {calls['MHD_run'] / n:.1f}")
        heap_fns = ("malloc", "calloc", "realloc", "posix_memalign")
        by_caller = collections.Counter()
        for (caller, callee), v in pairs.items():
            if callee in heap_fns:
                by_caller[caller] += v
        print("  allocations per request by caller: " +
              ", ".join(f"{c} {v / n:.1f}" for c, v in by_caller.most_common() if v / n >= 0.5))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
