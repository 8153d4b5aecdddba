/*
 * exec.c - the pthread executor of exec.h: n_threads - 1 workers that sleep
 * on a condition variable between runs, and the caller, all taking indices
 * from one shared counter.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* sched_getaffinity, CPU_COUNT */
#endif
#include "exec.h"

#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <unistd.h>

#include "attn.h"
#include "kernel.h"

struct attn_exec {
    pthread_mutex_t mu;
    pthread_cond_t wake; /* workers: a new run (generation) or shutdown */
    pthread_cond_t done; /* caller: every worker has left the run */
    pthread_t *threads;  /* (n_threads - 1) */
    int n_threads;
    int stop;
    unsigned long gen; /* run number; workers join each run once */
    int busy;          /* workers still inside the current run */
    /* The current run; read by workers under mu, then index by index. */
    void (*fn)(void *arg, size_t i);
    void *arg;
    size_t n;
    size_t next; /* next index to hand out (under mu) */
};

/* Take and run indices until none is left. Called with mu held; returns
 * with mu held. */
static void drain(attn_exec *ex)
{
    while (ex->next < ex->n) {
        size_t i = ex->next++;
        void (*fn)(void *, size_t) = ex->fn;
        void *arg = ex->arg;
        pthread_mutex_unlock(&ex->mu);
        fn(arg, i);
        pthread_mutex_lock(&ex->mu);
    }
}

/* worker: one pool thread. Sleeps until attn_exec_run bumps gen, drains
 * the shared index counter with the others, and the last one to finish
 * signals done; exits on stop. BLAS stays single-threaded inside it. */
static void *worker(void *p)
{
    attn_exec *ex = p;
    unsigned long seen = 0;
    attn__blas_single();
    pthread_mutex_lock(&ex->mu);
    for (;;) {
        while (!ex->stop && ex->gen == seen)
            pthread_cond_wait(&ex->wake, &ex->mu);
        if (ex->stop)
            break;
        seen = ex->gen;
        drain(ex);
        if (--ex->busy == 0)
            pthread_cond_signal(&ex->done);
    }
    pthread_mutex_unlock(&ex->mu);
    return NULL;
}

int attn_cpu_count(void)
{
    long n = -1;
#ifdef __linux__
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0)
        n = CPU_COUNT(&set);
#endif
    if (n < 1)
        n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : n > 1024 ? 1024 : (int)n;
}

/*
 * attn_exec_create: starts n_threads - 1 workers (n_threads 0 =
 * attn_cpu_count()). On failure every started worker is joined and nothing
 * leaks.
 */
int attn_exec_create(attn_exec **out, int n_threads)
{
    if (!out || n_threads < 0 || n_threads > 1024)
        return ATTN_EINVAL;
    *out = NULL;
    if (n_threads == 0)
        n_threads = attn_cpu_count();
    attn_exec *ex = calloc(1, sizeof(*ex));
    if (!ex)
        return ATTN_ENOMEM;
    ex->n_threads = 1;
    if (pthread_mutex_init(&ex->mu, NULL) != 0)
        goto fail_mu;
    if (pthread_cond_init(&ex->wake, NULL) != 0)
        goto fail_wake;
    if (pthread_cond_init(&ex->done, NULL) != 0)
        goto fail_done;
    attn__blas_single();
    if (n_threads > 1) {
        ex->threads = calloc((size_t)n_threads - 1, sizeof(pthread_t));
        if (!ex->threads)
            goto fail;
        for (int i = 0; i < n_threads - 1; i++) {
            if (pthread_create(&ex->threads[i], NULL, worker, ex) != 0)
                goto fail;
            ex->n_threads++;
        }
    }
    *out = ex;
    return 0;
fail:
    attn_exec_destroy(ex);
    return ATTN_ENOMEM;
fail_done:
    pthread_cond_destroy(&ex->wake);
fail_wake:
    pthread_mutex_destroy(&ex->mu);
fail_mu:
    free(ex);
    return ATTN_ENOMEM;
}

/* attn_exec_destroy: stops and joins the workers; must not race a run. */
void attn_exec_destroy(attn_exec *ex)
{
    if (!ex)
        return;
    pthread_mutex_lock(&ex->mu);
    ex->stop = 1;
    pthread_cond_broadcast(&ex->wake);
    pthread_mutex_unlock(&ex->mu);
    for (int i = 0; i < ex->n_threads - 1; i++)
        pthread_join(ex->threads[i], NULL);
    free(ex->threads);
    pthread_cond_destroy(&ex->done);
    pthread_cond_destroy(&ex->wake);
    pthread_mutex_destroy(&ex->mu);
    free(ex);
}

int attn_exec_threads(const attn_exec *ex)
{
    return ex ? ex->n_threads : 1;
}

/*
 * attn_exec_run: fn(arg, i) for every i in [0, n) across the workers and
 * the caller; returns when every call has returned. ex NULL runs inline.
 */
void attn_exec_run(attn_exec *ex, size_t n, void (*fn)(void *arg, size_t i),
                   void *arg)
{
    if (n == 0 || !fn)
        return;
    if (!ex || ex->n_threads == 1 || n == 1) {
        for (size_t i = 0; i < n; i++)
            fn(arg, i);
        return;
    }
    pthread_mutex_lock(&ex->mu);
    ex->fn = fn;
    ex->arg = arg;
    ex->n = n;
    ex->next = 0;
    ex->busy = ex->n_threads - 1;
    ex->gen++;
    pthread_cond_broadcast(&ex->wake);
    drain(ex);
    while (ex->busy > 0)
        pthread_cond_wait(&ex->done, &ex->mu);
    pthread_mutex_unlock(&ex->mu);
}
