/*
 * maps_wait.c - the long poll behind the page's follow mode:
 *
 *   GET /v2/maps/{id}?wait=N[&version=V][&timeout_ms=M]
 *
 * answers what GET /v2/maps/{id} answers (the map's metadata) as soon as
 * the map's query rows (shape[2]) differ from N - a sequence's map grows
 * by the new rows of every step - or, with version=, its version differs
 * from V (a step that replaced rows: the rows may be as many as before),
 * or the map is gone (404), or after the
 * wait's timeout (the metadata unchanged: the client asks again), whichever
 * comes first. A map already different from N answers at once.
 *
 * Bounded so that watchers never starve inference: at most maps-waiters
 * connections wait at once (one more answers 503 with Retry-After), each
 * for at most maps-wait-ms (timeout_ms= may ask for less). A waiting
 * connection costs no thread: it is suspended (MHD) and one loop timer,
 * running only while someone waits, looks up each waiter's map every
 * TICK_MS (one lookup under the store's mutex per waiter; the map is
 * rendered only when it is answered), sooner when a waiter's time is up
 * before the next tick (the timer is set for the nearest of the two, so a
 * timeout_ms below TICK_MS, or between two ticks, is kept to the
 * millisecond, not rounded up to a tick). The same tick lets go of a waiter
 * whose client went: MHD does not read a suspended connection's socket, so
 * one poll(2) per waiter (no wait) looks for its end (a FIN, closed or
 * half-closed, or a reset; bytes of a pipelined next request are not an
 * end); such a waiter is answered like one whose time is up (a half-closed
 * client reads it), logged and counted 499 as nginx logs a client that
 * went, and MHD, now reading again, closes the connection. Without this a page that reloads
 * held its slot in maps-waiters and its connection (max-connections-per-ip)
 * until the wait's timeout. On SIGTERM every waiter is answered at once and
 * a new wait= answers at once, so the drain never waits on a watcher.
 *
 * Loop thread only.
 */
#include "server/srv.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TICK_MS 100 /* how often the waiters' maps are looked at */

/* Parse a decimal in [lo, hi] (lo >= 0): digits alone, not the white
 * space or sign strtoll lets before them; 0 or -1. */
static int parse_ll(const char *s, long long lo, long long hi, long long *out)
{
    char *end;
    long long v;
    if (!s || *s < '0' || *s > '9')
        return -1;
    errno = 0;
    v = strtoll(s, &end, 10);
    if (errno || *end || v < lo || v > hi)
        return -1;
    *out = v;
    return 0;
}

/* answer: r gets GET /v2/maps/{id}'s reply (metadata, or 404). */
static void answer(srv_req *r, const char *id)
{
    char path[64];
    maps_reply rep;
    memset(&rep, 0, sizeof rep);
    snprintf(path, sizeof path, "/v2/maps/%s", id);
    if (maps_http_get(r->s->maps, path, NULL, NULL, &rep) < 0) {
        srv_respond_error(r, 503, "maps: out of memory");
        return;
    }
    srv_respond(r, rep.status, rep.content_type, rep.body, rep.len);
}

static void unlink_waiter(srv_req *r)
{
    srv *s = r->s;
    if (!r->waiting)
        return;
    if (r->wait_prev)
        r->wait_prev->wait_next = r->wait_next;
    else
        s->waiters = r->wait_next;
    if (r->wait_next)
        r->wait_next->wait_prev = r->wait_prev;
    r->wait_prev = r->wait_next = NULL;
    r->waiting = 0;
    s->n_waiters--;
    if (!s->waiters)
        uv_timer_stop(&s->maps_wait_timer);
}

/* changed: does the map (info) differ from what r's client has? */
static int changed(const srv_req *r, const maps_info *info)
{
    return info->t != r->wait_t ||
           (r->wait_version >= 0 && info->version != r->wait_version);
}

/* in_ms: the milliseconds from now until `until` (srv_now_ns), rounded
 * up, at most TICK_MS: when the next look is due for that waiter. */
static uint64_t in_ms(uint64_t now, uint64_t until)
{
    uint64_t ms = until > now ? (until - now + 999999u) / 1000000u : 0;
    return ms < TICK_MS ? ms : TICK_MS;
}

/* on_tick: answer the waiters whose map changed, went away or whose time
 * is up, and those whose client went (MHD then closes them); then set the
 * timer, one shot, for the next look while some still wait: TICK_MS on,
 * or sooner when a waiter's time is up before (never 0 ms: a timer the
 * loop found due a little early looks again a millisecond later). */
static void on_tick(uv_timer_t *t)
{
    srv *s = t->data;
    uint64_t now = srv_now_ns(), next_ms = TICK_MS;
    srv_req *r = s->waiters, *next;
    maps_info info;
    for (; r; r = next) {
        next = r->wait_next;
        int went = 0;
        if (maps_info_get(s->maps, r->wait_id, &info) == 0 &&
            !changed(r, &info) && now < r->wait_until_ns &&
            !(went = srv_client_went(r->wait_fd))) {
            uint64_t ms = in_ms(now, r->wait_until_ns);
            next_ms = ms < next_ms ? ms : next_ms;
            continue;
        }
        unlink_waiter(r);
        answer(r, r->wait_id);
        r->went = went;
    }
    if (s->waiters)
        uv_timer_start(t, on_tick, next_ms ? next_ms : 1, 0);
}

void srv_maps_wait(srv_req *r, const char *id, const char *wait,
                   const char *version, const char *timeout)
{
    srv *s = r->s;
    long long n, v = -1, ms = s->cfg.maps_wait_ms;
    uint64_t due;
    const union MHD_ConnectionInfo *ci;
    maps_info info;
    if (parse_ll(wait, 0, 1 << 30, &n) < 0) {
        srv_respond_error(r, 400, "wait: expected the number of query rows "
                                  "the client has (an integer >= 0)");
        return;
    }
    if (version && parse_ll(version, 0, UINT32_MAX, &v) < 0) {
        srv_respond_error(r, 400, "version: expected the map's version the "
                                  "client has (an integer >= 0, from its "
                                  "metadata)");
        return;
    }
    if (timeout && parse_ll(timeout, 0, LLONG_MAX, &ms) < 0) {
        /* digits past what a long long holds: more than maps-wait-ms */
        if (!timeout[0] || timeout[strspn(timeout, "0123456789")]) {
            srv_respond_error(r, 400, "timeout_ms: expected milliseconds (an "
                                      "integer >= 0; more than maps-wait-ms "
                                      "waits maps-wait-ms)");
            return;
        }
        ms = s->cfg.maps_wait_ms;
    }
    if (ms > s->cfg.maps_wait_ms)
        ms = s->cfg.maps_wait_ms;
    r->wait_t = (int)n;
    r->wait_version = v;
    if (strlen(id) >= sizeof r->wait_id ||
        maps_info_get(s->maps, id, &info) != 0 || changed(r, &info) ||
        ms == 0 || s->draining) {
        answer(r, id); /* 404 for an unknown or malformed id */
        return;
    }
    if (s->n_waiters >= s->cfg.maps_waiters) {
        srv_respond_error(r, 503, "wait: %d connection%s already wait%s on "
                          "maps (maps-waiters); ask again later", s->n_waiters,
                          s->n_waiters == 1 ? "" : "s",
                          s->n_waiters == 1 ? "s" : "");
        return;
    }
    ci = MHD_get_connection_info(r->conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    r->wait_fd = ci ? ci->connect_fd : -1; /* open while r is suspended */
    memcpy(r->wait_id, id, strlen(id) + 1);
    r->wait_until_ns = srv_now_ns() + (uint64_t)ms * 1000000u;
    r->wait_prev = NULL;
    r->wait_next = s->waiters;
    if (s->waiters)
        s->waiters->wait_prev = r;
    s->waiters = r;
    r->waiting = 1;
    s->n_waiters++;
    /* the first waiter starts the looks (the first in TICK_MS, or at its
     * timeout if sooner); a later one brings the next look forward when
     * its time is up before it */
    due = in_ms(srv_now_ns(), r->wait_until_ns);
    if (!r->wait_next || due < uv_timer_get_due_in(&s->maps_wait_timer))
        uv_timer_start(&s->maps_wait_timer, on_tick, due ? due : 1, 0);
    srv_suspend(r);
}

void srv_maps_wait_drain(srv *s)
{
    while (s->waiters) {
        srv_req *r = s->waiters;
        unlink_waiter(r);
        answer(r, r->wait_id);
    }
}

void srv_maps_wait_cancel(srv_req *r)
{
    unlink_waiter(r);
}
