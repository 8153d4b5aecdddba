/*
 * exec.h - a small pthread executor for running an attn_plan's tiles.
 *
 * The CLI, tests and benchmarks use it; the daemon drives plans from its
 * libuv pool instead, so the core never sees libuv. attn_exec_run() runs
 * fn(arg, i) for every i in [0, n) and returns when all have finished; the
 * calling thread works too. Workers are created once and sleep between runs.
 * One run at a time per executor (calls are serialised by the caller).
 */
#ifndef ATTN_EXEC_H
#define ATTN_EXEC_H

#include <stddef.h>

typedef struct attn_exec attn_exec;

/* attn_exec_create: n_threads total threads including the caller (>= 1;
 * 0 means attn_cpu_count()). Returns 0 or ATTN_ENOMEM/EINVAL. */
int attn_exec_create(attn_exec **out, int n_threads);

/* attn_cpu_count: the CPUs the calling thread may run on (its affinity
 * mask: taskset, a container's cpuset), else the online ones; 1..1024. */
int attn_cpu_count(void);
void attn_exec_destroy(attn_exec *ex);
int attn_exec_threads(const attn_exec *ex);
void attn_exec_run(attn_exec *ex, size_t n, void (*fn)(void *arg, size_t i),
                   void *arg);

#endif
