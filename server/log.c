/*
 * log.c - one line per request and the daemon's own messages, on stderr,
 * as text or JSON lines (--log-format).
 *
 * From srv_log_start to srv_log_stop the lines go through a buffer that a
 * thread of its own writes to stderr; before and after, each is written at
 * once. A request's line waits up to --log-flush-ms for others to share
 * its write; a daemon message, or a buffer half full, wakes the writer at
 * once. Why: a write(2) per request on the loop thread, with the line's
 * formatting, was ~5 us of its ~45 a request at 16 connections
 * (bench/ROUNDS.md, "Eighth round"), and a stderr that blocks (a full pipe
 * to a stalled log collector) must not stop the loop: past --log-buffer
 * bytes waiting, lines are dropped, counted (attnd_log_lines_dropped_total)
 * and reported once the writer catches up. Lines that stderr refuses (a
 * pipe whose reader went, a log file on a full disk) are counted there
 * too. Any thread may log.
 */
#include "server/srv.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

struct srv_logq {
    pthread_mutex_t mu;
    pthread_cond_t cv;     /* the writer waits on it */
    pthread_cond_t done_cv; /* srv_log_stop waits on it */
    pthread_t th;
    char *buf, *spare;     /* lines waiting; the writer's own */
    size_t len, cap;
    uint64_t first_ns;     /* CLOCK_MONOTONIC when buf's first line came */
    uint64_t flush_ns;     /* --log-flush-ms */
    int urgent, stop, done, json;
    uint64_t dropped;      /* lines dropped, ever */
    uint64_t unreported;   /* of them, not yet reported on stderr */
    /* the batch the writer has taken and is writing, for a crash report
     * (srv_log_crash_lines): NULL when none; hand_done of its hand_len
     * bytes written so far. Written by the writer alone, without mu. */
    _Atomic(const char *) hand;
    atomic_size_t hand_len, hand_done;
};

/* monotonic: CLOCK_MONOTONIC's ns (srv_now_ns) as a timespec, for the
 * condition variables' timed waits. */
static struct timespec monotonic(uint64_t ns)
{
    return (struct timespec){(time_t)(ns / 1000000000u), (long)(ns % 1000000000u)};
}

/* stamp: now as 2026-01-02T03:04:05.678Z; the date and time of day are
 * formatted once a second per thread. */
static void stamp(char *out, size_t n)
{
    static _Thread_local time_t sec = -1;
    static _Thread_local char day[80];
    struct timespec ts;
    struct tm tm;
    clock_gettime(CLOCK_REALTIME, &ts);
    if (ts.tv_sec != sec) {
        gmtime_r(&ts.tv_sec, &tm);
        snprintf(day, sizeof day, "%04d-%02d-%02dT%02d:%02d:%02d", tm.tm_year + 1900,
                 tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec);
        sec = ts.tv_sec;
    }
    int ms = (int)(ts.tv_nsec / 1000000) % 1000;
    size_t k = strnlen(day, sizeof day);
    if (n < k + 6) {
        if (n)
            *out = 0;
        return;
    }
    memcpy(out, day, k);
    memcpy(out + k, (char[]){'.', (char)('0' + ms / 100), (char)('0' + ms / 10 % 10),
                             (char)('0' + ms % 10), 'Z', 0}, 6);
}

/* esc: s into out (n bytes, NUL included) with what could break its line
 * or its JSON escaped: control characters and DEL (\n, \r, \t, else
 * \u00XX), each byte that begins no valid UTF-8 sequence (\ufffd: a
 * percent-decoded path, a label cut at a byte count); with mode ESC_JSON
 * (a JSON string's body) '"' and '\\' too, and with ESC_FIELD (a text
 * request line's path, id and model) the space as well (\u0020), so that
 * an id such as 'x model=y' cannot pass for the fields that follow it.
 * A daemon message in text (ESC_TEXT) escapes no quotes: its text stays
 * as written. Cut short at a whole character when out is full. */
enum { ESC_TEXT, ESC_JSON, ESC_FIELD };
static void esc(char *out, size_t n, const char *s, int mode)
{
    static const char hex[] = "0123456789abcdef";
    size_t o = 0, k, m;
    for (; *s; s += k) {
        unsigned char c = (unsigned char)*s;
        char e[8] = {'\\', (char)c, 0};
        const char *from = e;
        k = 1, m = 2;
        if (c >= 0x80) {
            k = oip_utf8_seq(s, strnlen(s, 4));
            from = k ? s : "\\ufffd";
            m = k ? k : 6;
            k = k ? k : 1;
        } else if (c == '\n' || c == '\r' || c == '\t') {
            e[1] = c == '\n' ? 'n' : c == '\r' ? 'r' : 't';
        } else if (c < 0x20 || c == 0x7f || (c == ' ' && mode == ESC_FIELD)) {
            memcpy(e, "\\u00", 4);
            e[4] = hex[c >> 4], e[5] = hex[c & 15];
            m = 6;
        } else if (mode == ESC_TEXT || (c != '"' && c != '\\')) {
            from = s, m = 1;
        }
        if (o + m >= n)
            break;
        memcpy(out + o, from, m);
        o += m;
    }
    if (n)
        out[o] = 0;
}

/* line_end: the length of a line snprintf wrote into out (cap bytes),
 * ending in '\n' even when it was cut short. */
static size_t line_end(char *out, size_t cap, int wrote)
{
    if (wrote < 0)
        return 0;
    if ((size_t)wrote >= cap) {
        out[cap - 2] = '\n';
        return cap - 1;
    }
    return (size_t)wrote;
}

/* message: a daemon message's line (level, text) in the chosen format. */
static size_t message(int json, char *out, size_t cap, const char *level,
                      const char *msg)
{
    char ts[100], text[2048];
    stamp(ts, sizeof ts);
    /* the message may quote a client (an uploaded config's key): one
     * line, whatever it holds */
    esc(text, sizeof text, msg, json ? ESC_JSON : ESC_TEXT);
    if (!json)
        return line_end(out, cap,
                        snprintf(out, cap, "%s %s attnd: %s\n", ts, level, text));
    return line_end(out, cap,
                    snprintf(out, cap, "{\"ts\":\"%s\",\"level\":\"%s\",\"msg\":\"%s\"}\n",
                             ts, level, text));
}

/* write_all: p[0..n) to stderr; on an error other than an interruption or
 * a full non-blocking pipe (a closed pipe, a full disk) the rest is lost:
 * returns how many lines were (a line cut by it included), 0 when all went.
 * done, when not NULL, follows how many bytes went. */
static uint64_t write_all(const char *p, size_t n, atomic_size_t *done)
{
    size_t went = 0;
    while (n) {
        ssize_t k = write(STDERR_FILENO, p, n);
        if (k > 0) {
            p += k;
            n -= (size_t)k;
            went += (size_t)k;
            if (done)
                atomic_store_explicit(done, went, memory_order_release);
        } else if (k < 0 && errno == EAGAIN) {
            struct pollfd pf = {STDERR_FILENO, POLLOUT, 0};
            poll(&pf, 1, 100);
        } else if (k == 0 || errno != EINTR) {
            uint64_t lines = 0;
            for (; n; n--)
                lines += *p++ == '\n';
            return lines;
        }
    }
    return 0;
}

static void *writer(void *arg)
{
    srv_logq *q = arg;
    srv_crash_role("the log writer");
    pthread_setname_np(pthread_self(), "attnd-log");
    pthread_mutex_lock(&q->mu);
    for (;;) {
        while (!q->len && !q->unreported && !q->stop)
            pthread_cond_wait(&q->cv, &q->mu);
        if (!q->len && !q->unreported)
            break; /* stopping, all written */
        /* a request's line waits for company, up to --log-flush-ms */
        struct timespec ts = monotonic(q->first_ns + q->flush_ns);
        while (!q->urgent && !q->stop && q->len < q->cap / 2 &&
               pthread_cond_timedwait(&q->cv, &q->mu, &ts) != ETIMEDOUT)
            ;
        char *b = q->buf;
        size_t n = q->len;
        uint64_t lost = q->unreported, failed;
        q->buf = q->spare;
        q->spare = b;
        q->len = 0;
        q->urgent = 0;
        q->unreported = 0;
        pthread_mutex_unlock(&q->mu);
        /* in hand from here to its write's end: a crash report prints
         * what of it is not yet written */
        atomic_store_explicit(&q->hand_len, n, memory_order_relaxed);
        atomic_store_explicit(&q->hand_done, 0, memory_order_relaxed);
        atomic_store_explicit(&q->hand, b, memory_order_release);
        /* lines stderr refused count as dropped; not reported, as stderr
         * is where the report would go */
        failed = write_all(b, n, &q->hand_done);
        atomic_store_explicit(&q->hand, NULL, memory_order_release);
        if (lost) {
            char msg[160], line[512];
            snprintf(msg, sizeof msg,
                     "%llu log line%s dropped: stderr did not keep up "
                     "(--log-buffer)", (unsigned long long)lost, lost == 1 ? "" : "s");
            size_t k = message(q->json, line, sizeof line, "warn", msg);
            failed += write_all(line, k, NULL);
        }
        pthread_mutex_lock(&q->mu);
        q->dropped += failed;
    }
    q->done = 1;
    pthread_cond_signal(&q->done_cv);
    pthread_mutex_unlock(&q->mu);
    return NULL;
}

/* emit: one whole line, through the writer when there is one. */
static void emit(srv *s, const char *line, size_t n, int urgent)
{
    srv_logq *q = s ? s->logq : NULL;
    int wake;
    if (!n)
        return;
    if (!q) {
        write_all(line, n, NULL);
        return;
    }
    pthread_mutex_lock(&q->mu);
    if (q->stop) { /* srv_log_stop is flushing: after those lines */
        pthread_mutex_unlock(&q->mu);
        write_all(line, n, NULL);
        return;
    }
    if (q->len + n > q->cap) {
        q->dropped++;
        q->unreported++;
        pthread_mutex_unlock(&q->mu);
        return;
    }
    urgent |= q->flush_ns == 0;
    wake = !q->len || (urgent && !q->urgent) ||
           (q->len < q->cap / 2 && q->len + n >= q->cap / 2);
    if (!q->len)
        q->first_ns = srv_now_ns();
    memcpy(q->buf + q->len, line, n);
    q->len += n;
    q->urgent |= urgent;
    pthread_mutex_unlock(&q->mu);
    if (wake)
        pthread_cond_signal(&q->cv);
}

static void logq_free(srv_logq *q)
{
    pthread_cond_destroy(&q->done_cv);
    pthread_cond_destroy(&q->cv);
    pthread_mutex_destroy(&q->mu);
    free(q->buf);
    free(q->spare);
    free(q);
}

int srv_log_start(srv *s)
{
    srv_logq *q = calloc(1, sizeof *q);
    pthread_condattr_t ca;
    sigset_t all, old;
    int ok;
    if (!q)
        return -1;
    q->cap = (size_t)s->cfg.log_buffer;
    q->flush_ns = (uint64_t)s->cfg.log_flush_ms * 1000000u;
    q->json = s->json_log;
    q->buf = malloc(q->cap);
    q->spare = malloc(q->cap);
    pthread_mutex_init(&q->mu, NULL);
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC); /* as srv_now_ns */
    pthread_cond_init(&q->cv, &ca);
    pthread_cond_init(&q->done_cv, &ca);
    pthread_condattr_destroy(&ca);
    /* the writer takes no signals: SIGTERM/SIGINT go to a thread that is
     * not inside a write that could block */
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    ok = q->buf && q->spare && pthread_create(&q->th, NULL, writer, q) == 0;
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (!ok) {
        logq_free(q);
        return -1;
    }
    s->logq = q;
    return 0;
}

/* srv_log_stop: the writer writes what is left, for up to LOG_EXIT_MS;
 * past that (stderr blocked) it is left behind, with its buffer, for the
 * process's exit to end. */
#define LOG_EXIT_MS 1000

void srv_log_stop(srv *s)
{
    srv_logq *q = s->logq;
    int done;
    if (!q)
        return;
    struct timespec ts = monotonic(srv_now_ns() + LOG_EXIT_MS * 1000000ull);
    pthread_mutex_lock(&q->mu);
    q->stop = 1;
    pthread_cond_signal(&q->cv);
    while (!q->done && pthread_cond_timedwait(&q->done_cv, &q->mu, &ts) != ETIMEDOUT)
        ;
    done = q->done;
    pthread_mutex_unlock(&q->mu);
    s->logq = NULL;
    if (!done) {
        pthread_detach(q->th);
        return;
    }
    pthread_join(q->th, NULL);
    logq_free(q);
}

/* Without mu, the writer's and other threads' stores may be half seen;
 * each answer stays inside one of the two buffers (cap bytes each, freed
 * only after the writer ends), whatever was read of which. */
void srv_log_crash_lines(srv *s, const char **hand, size_t *n_hand,
                         const char **queued, size_t *n_queued)
{
    srv_logq *q = s ? s->logq : NULL;
    const char *h = NULL;
    size_t n = 0, done = 0;
    *hand = *queued = NULL;
    *n_hand = *n_queued = 0;
    if (!q)
        return;
    h = atomic_load_explicit(&q->hand, memory_order_acquire);
    if (h) {
        n = atomic_load_explicit(&q->hand_len, memory_order_relaxed);
        done = atomic_load_explicit(&q->hand_done, memory_order_relaxed);
    }
    if (h && n <= q->cap && done < n) {
        while (done && h[done - 1] != '\n') /* from the line's start */
            done--;
        *hand = h + done;
        *n_hand = n - done;
    }
    n = q->len;
    if (n && n <= q->cap) {
        *queued = q->buf;
        *n_queued = n;
    }
}

uint64_t srv_log_dropped(srv *s)
{
    srv_logq *q = s->logq;
    uint64_t n;
    if (!q)
        return 0;
    pthread_mutex_lock(&q->mu);
    n = q->dropped;
    pthread_mutex_unlock(&q->mu);
    return n;
}

unsigned long long srv_every_due(srv_every *e, uint64_t now)
{
    unsigned long long n;
    e->n++;
    if (e->last_ns && now - e->last_ns < 1000000000ull)
        return 0;
    n = e->n;
    e->n = 0;
    e->last_ns = now;
    return n;
}

void srv_log(srv *s, const char *level, const char *fmt, ...)
{
    char msg[1024], line[3200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    emit(s, line, message(s && s->json_log, line, sizeof line, level, msg), 1);
}

/* A line being built without printf (a request's line is written per
 * request on the loop thread: snprintf took ~6,000 instructions of it). */
typedef struct {
    char *p, *end; /* end: the last byte, kept for the '\n' */
} linebuf;

static void put(linebuf *b, const char *s)
{
    size_t n = strlen(s), room = (size_t)(b->end - b->p);
    n = n < room ? n : room;
    memcpy(b->p, s, n);
    b->p += n;
}

static void put_u(linebuf *b, unsigned long long v)
{
    char d[24];
    put(b, srv_fmt_u(d, v));
}

static void put_i(linebuf *b, int v)
{
    if (v < 0) {
        put(b, "-");
        put_u(b, 0ull - (unsigned long long)v);
    } else {
        put_u(b, (unsigned long long)v);
    }
}

void srv_log_request(srv *s, const srv_req *r)
{
    /* each field escaped (6 bytes a byte at most): an id whole unless it
     * is mostly control characters */
    char ts[100], id[4 * OIP_MAX_ID], mdl[280], path[2100], line[4800];
    const char *m = r->method_name[0] ? r->method_name : "OTHER";
    uint64_t us = (srv_now_ns() - r->t0_ns) / 1000;
    linebuf b = {line, line + sizeof line - 1};
    stamp(ts, sizeof ts);
    int mode = s->json_log ? ESC_JSON : ESC_FIELD;
    esc(id, sizeof id, r->id, mode);
    esc(mdl, sizeof mdl, r->model, mode);
    if (r->vfold) { /* the path as sent: its "/versions/1" put back */
        char sent[sizeof r->path + 16];
        snprintf(sent, sizeof sent, "%.*s/versions/1%s", r->vfold - 1,
                 r->path, r->path + r->vfold - 1);
        esc(path, sizeof path, sent, mode);
    } else {
        esc(path, sizeof path, r->path, mode);
    }
    if (s->json_log) {
        put(&b, "{\"ts\":\""), put(&b, ts);
        put(&b, "\",\"level\":\"info\",\"method\":\""), put(&b, m);
        put(&b, "\",\"path\":\""), put(&b, path);
        put(&b, "\",\"status\":"), put_i(&b, r->status);
        put(&b, ",\"id\":\""), put(&b, id);
        put(&b, "\",\"model\":\""), put(&b, mdl);
        put(&b, "\",\"batch\":"), put_i(&b, r->batch);
        put(&b, ",\"queue_us\":"), put_u(&b, r->queue_us);
        put(&b, ",\"compute_us\":"), put_u(&b, r->compute_us);
        put(&b, ",\"total_us\":"), put_u(&b, us);
        put(&b, "}");
    } else {
        put(&b, ts), put(&b, " info "), put(&b, m), put(&b, " "), put(&b, path);
        put(&b, " "), put_i(&b, r->status);
        put(&b, " id="), put(&b, id[0] ? id : "-");
        put(&b, " model="), put(&b, mdl[0] ? mdl : "-");
        put(&b, " batch="), put_i(&b, r->batch);
        put(&b, " queue_us="), put_u(&b, r->queue_us);
        put(&b, " compute_us="), put_u(&b, r->compute_us);
        put(&b, " total_us="), put_u(&b, us);
    }
    *b.p++ = '\n';
    emit(s, line, (size_t)(b.p - line), 0);
}
