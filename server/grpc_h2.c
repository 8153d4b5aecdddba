/*
 * grpc_h2.c - the nghttp2 session callbacks of the gRPC door: a call built
 * from each request stream's HEADERS (method, authorization, grpc-timeout),
 * its request messages read from DATA (5-byte prefix, then protobuf; each
 * whole one dispatched as a slot, grpc.c), its half-close, the reset of a
 * call ended while its client still sends, and its end with the stream.
 * Loop thread only.
 */
#include "server/grpc_int.h"
#include "server/seq.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* A grpc-timeout longer than this (about 31 years; 99999999H is 11,000)
 * is taken as this: no deadline attnd keeps is longer (deadline-ms is at
 * most an hour), and in ns beside the monotonic clock it cannot pass 2^64,
 * which wrapped a deadline of centuries to one already past. */
#define TIMEOUT_MAX_MS 1000000000000LL

/* timeout_ms: a grpc-timeout value ("100m", "5S", at most 8 digits and a
 * unit), rounded up to ms, at most TIMEOUT_MAX_MS; -1 when malformed. */
static long long timeout_ms(const char *v, size_t n)
{
    long long x = 0, ms;
    size_t i;
    if (n < 2 || n > 9)
        return -1;
    for (i = 0; i + 1 < n; i++) {
        if (v[i] < '0' || v[i] > '9')
            return -1;
        x = x * 10 + (v[i] - '0');
    }
    switch (v[n - 1]) {
    case 'H': ms = x * 3600000; break;
    case 'M': ms = x * 60000; break;
    case 'S': ms = x * 1000; break;
    case 'm': ms = x; break;
    case 'u': ms = (x + 999) / 1000; break;
    case 'n': ms = (x + 999999) / 1000000; break;
    default: return -1;
    }
    return ms < TIMEOUT_MAX_MS ? ms : TIMEOUT_MAX_MS;
}

/* ct_ok: is v (a content-type, vlen bytes) gRPC with protobuf messages:
 * application/grpc, or +proto, with any parameters after a ';'? Another
 * codec (+json) would have its messages misread as protobuf. */
static int ct_ok(const char *v, size_t vlen)
{
    if (vlen < 16 || memcmp(v, "application/grpc", 16) != 0)
        return 0;
    v += 16;
    vlen -= 16;
    if (vlen && *v == '+') {
        if (vlen < 6 || strncasecmp(v + 1, "proto", 5) != 0)
            return 0;
        v += 6;
        vlen -= 6;
    }
    return !vlen || *v == ';';
}

static int on_begin_headers(nghttp2_session *h2, const nghttp2_frame *f,
                            void *ud)
{
    gconn *c = ud;
    srv *s = c->g->s;
    gcall *call;
    c->hlist = 0; /* a block begins: a call's, or trailers */
    if (f->hd.type != NGHTTP2_HEADERS ||
        f->headers.cat != NGHTTP2_HCAT_REQUEST)
        return 0;
    if (srv_mem_take(s, CALL_COST) < 0) { /* refused, not begun */
        unsigned long long n = srv_every_due(&c->g->refused_log, srv_now_ns());
        if (n)
            srv_log(s, "warn", "grpc: %llu stream%s refused since the last "
                    "such line: the memory for request bodies, open calls "
                    "and unsent answers (%lld bytes, memory-budget) is in "
                    "use", n, n == 1 ? "" : "s", s->cfg.memory_budget);
        nghttp2_submit_rst_stream(h2, NGHTTP2_FLAG_NONE, f->hd.stream_id,
                                  NGHTTP2_REFUSED_STREAM);
        srv_grpc__schedule(c);
        return 0;
    }
    call = calloc(1, sizeof *call);
    if (!call) { /* refused, not begun: the client may send it again */
        srv_mem_give(s, CALL_COST);
        srv_log(s, "warn", "grpc: a stream refused: out of memory for its call");
        nghttp2_submit_rst_stream(h2, NGHTTP2_FLAG_NONE, f->hd.stream_id,
                                  NGHTTP2_REFUSED_STREAM);
        srv_grpc__schedule(c);
        return 0;
    }
    call->c = c;
    call->id = f->hd.stream_id;
    call->t0_ns = srv_now_ns();
    call->prev = c->calls_tail; /* last: flush pumps calls oldest first */
    if (c->calls_tail)
        c->calls_tail->next = call;
    else
        c->calls = call;
    c->calls_tail = call;
    nghttp2_session_set_stream_user_data(h2, f->hd.stream_id, call);
    return 0;
}

static int on_header(nghttp2_session *h2, const nghttp2_frame *f,
                     const uint8_t *name, size_t nlen, const uint8_t *value,
                     size_t vlen, uint8_t flags, void *ud)
{
    gconn *c = ud;
    gcall *call = nghttp2_session_get_stream_user_data(h2, f->hd.stream_id);
    const char *n = (const char *)name, *v = (const char *)value;
    (void)flags;
    /* past what SETTINGS allowed, no client of ours sends it (each checks
     * it before sending): the HPACK table makes a byte a field of 4 KB,
     * so one block of 147 KB (HEADERS and 8 CONTINUATIONs) was 590 MB of
     * fields, each checked by nghttp2 before this callback: the loop was
     * 280 ms busy with it, every other client waiting. The stream is
     * reset (nghttp2: RST_STREAM INTERNAL_ERROR), the rest of its block
     * decoded with no callback or check. */
    c->hlist += nlen + vlen + 32;
    if (c->hlist > MAX_HEADER_LIST)
        return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
    if (!call || f->hd.type != NGHTTP2_HEADERS ||
        f->headers.cat != NGHTTP2_HCAT_REQUEST)
        return 0;
    if (nlen == 5 && !memcmp(n, ":path", 5)) {
        /* one longer than any method: its start and "..." (named in its
         * UNIMPLEMENTED and its log line; no method matches it) */
        size_t k = vlen < sizeof call->path ? vlen : sizeof call->path - 4;
        memcpy(call->path, v, k);
        memcpy(call->path + k, "...", vlen == k ? 1 : 4);
        if (vlen == k)
            call->path[k] = 0;
    } else if (nlen == 7 && !memcmp(n, ":method", 7)) {
        size_t k = strspn(v, "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
                             "abcdefghijklmnopqrstuvwxyz");
        if (k == vlen && k && k < sizeof call->method)
            memcpy(call->method, v, k), call->method[k] = 0;
        else
            memcpy(call->method, "OTHER", 6);
        if (!(vlen == 4 && !memcmp(v, "POST", 4)))
            call->http_status = 405;
    } else if (nlen == 12 && !memcmp(n, "content-type", 12)) {
        call->has_ct = 1;
        if (!ct_ok(v, vlen) && !call->http_status)
            call->http_status = 415;
    } else if (nlen == 13 && !memcmp(n, "authorization", 13)) {
        /* two are refused (begin), as over REST: neither door picks one */
        if (!call->n_auth++)
            call->auth_ok = srv_key_ok(c->g->s->cfg.api_key, v, vlen);
    } else if (nlen == 12 && !memcmp(n, "grpc-timeout", 12)) {
        /* a second is refused (begin): it took the first's place, so a
         * malformed first was served, an expired one run */
        if (!call->has_timeout++)
            call->timeout_ms = timeout_ms(v, vlen);
    } else if (nlen == 17 && !memcmp(n, "attnd-sequence-id", 17) &&
               !call->has_seq_hdr++) {
        /* a second is refused (begin), as over REST: a proxy may route
         * on the other one */
        size_t k = vlen < sizeof call->seq_hdr ? vlen : sizeof call->seq_hdr - 1;
        memcpy(call->seq_hdr, v, k);
        call->seq_hdr[k] = 0;
    }
    return 0;
}

/* begin: the request headers are complete: method, auth, deadline. */
static void begin(gcall *call)
{
    srv *s = call->c->g->s;
    if (!call->counted) {
        call->counted = 1;
        srv_guard_call_begin(&call->c->guard);
        call->t_msg_ns = srv_now_ns(); /* a unary call's message: from now */
        call->late = srv_grpc__late(call->c); /* begun before the signal: served */
    }
    /* what no gRPC client sends (PROTOCOL-HTTP2.md: POST, and 415 for a
     * content-type not application/grpc...): a probe (curl, a browser, a
     * REST client at the wrong port) is told, not served */
    if (!call->has_ct && !call->http_status)
        call->http_status = 415;
    if (call->http_status == 405) {
        char msg[96];
        snprintf(msg, sizeof msg, ":method %s: gRPC calls are POST",
                 call->method);
        srv_grpc__call_end(call, GRPC_INTERNAL, msg);
        return;
    }
    if (call->http_status) {
        srv_grpc__call_end(call, GRPC_INTERNAL, call->has_ct
                           ? "content-type: expected application/grpc "
                             "(or application/grpc+proto)"
                           : "content-type: missing; expected "
                             "application/grpc");
        return;
    }
    call->m = srv_grpc_method(call->path);
    if (!call->m) {
        char msg[400];
        if (strstr(call->path, "SharedMemory")) /* System..., Cuda... */
            snprintf(msg, sizeof msg, "method %.160s: " SRV_NO_SHM,
                     call->path);
        else
            snprintf(msg, sizeof msg, "method %.160s: not served by attnd "
                     "(see proto/kserve.proto)", call->path);
        srv_grpc__call_end(call, GRPC_UNIMPLEMENTED, msg);
        return;
    }
    if (call->m->stream) /* a stream may idle between its messages */
        call->t_msg_ns = 0;
    if (call->m->auth && s->cfg.api_key[0] && call->n_auth > 1) {
        srv_grpc__call_end(call, GRPC_UNAUTHENTICATED, "authorization: sent "
                 "more than once; send one 'authorization: Bearer <key>'");
        return;
    }
    if (call->m->auth && s->cfg.api_key[0] && !call->auth_ok) {
        srv_grpc__call_end(call, GRPC_UNAUTHENTICATED, "authorization: missing or wrong "
                 "API key (send 'authorization: Bearer <key>' metadata)");
        return;
    }
    if (call->has_timeout > 1) {
        srv_grpc__call_end(call, GRPC_INVALID_ARGUMENT, "grpc-timeout: sent "
                           "more than once; send one");
        return;
    }
    if (call->has_seq_hdr > 1 && srv_grpc__is_infer(call->m)) {
        srv_grpc__call_end(call, GRPC_INVALID_ARGUMENT, "attnd-sequence-id: "
                           "sent more than once; send one (a proxy may have "
                           "routed the call on another)");
        return;
    }
    if (call->timeout_ms < 0) {
        srv_grpc__call_end(call, GRPC_INVALID_ARGUMENT, "grpc-timeout: malformed");
        return;
    }
    if (call->has_timeout) /* 0 has passed already: answered at once */
        call->deadline_ns = srv_now_ns() + (uint64_t)call->timeout_ms * 1000000u;
}

/* half_close: the client sent END_STREAM. */
static void half_close(gcall *call)
{
    call->half_closed = 1;
    call->t_msg_ns = 0;
    if (call->ending || call->failing)
        return;
    if (call->hdr_got || call->msg) {
        srv_grpc__call_fail(call, GRPC_INVALID_ARGUMENT,
                 "request: the stream ended inside a message");
        return;
    }
    if (!call->m->stream) {
        if (!call->unary) {
            srv_grpc__call_end(call, GRPC_INVALID_ARGUMENT,
                     "request: a unary call takes one message, got none");
            return;
        }
        {   /* the call no longer holds it: dispatch frees it on failure */
            char *m = call->unary;
            size_t mem = call->unary_mem;
            call->unary = NULL;
            call->unary_mem = 0;
            srv_grpc__dispatch(call, m, call->unary_len, mem, call->late,
                               call->msg_t0);
        }
    }
    srv_grpc__schedule(call->c);
}

static int on_frame_recv(nghttp2_session *h2, const nghttp2_frame *f, void *ud)
{
    gcall *call;
    /* a header block taken carried its bytes on the wire (with its
     * CONTINUATIONs'), not its fields: through the HPACK table 16 bytes
     * name a 4 KB field 16 times, and counted so, a 25-byte HEADERS let
     * 512 KB of frames carrying nothing pass for a call's */
    if (f->hd.type == NGHTTP2_HEADERS)
        ((gconn *)ud)->carried += f->hd.length;
    if (f->hd.type != NGHTTP2_HEADERS && f->hd.type != NGHTTP2_DATA)
        return 0;
    call = nghttp2_session_get_stream_user_data(h2, f->hd.stream_id);
    if (!call)
        return 0;
    if (f->hd.type == NGHTTP2_HEADERS && f->headers.cat == NGHTTP2_HCAT_REQUEST)
        begin(call);
    if ((f->hd.flags & NGHTTP2_FLAG_END_STREAM) && !call->half_closed)
        half_close(call);
    return 0;
}

/* on_data: request bytes: 5-byte prefix (compressed flag, length), then
 * the message, repeatedly. */
static int on_data(nghttp2_session *h2, uint8_t flags, int32_t id,
                   const uint8_t *data, size_t len, void *ud)
{
    gcall *call = nghttp2_session_get_stream_user_data(h2, id);
    srv *s = ((gconn *)ud)->g->s;
    (void)flags;
    if (call) {
        call->unconsumed += len; /* given back to the window by flush */
        ((gconn *)ud)->carried += len;
    } else
        ((gconn *)ud)->unconsumed += len;
    while (call && !call->ending && !call->failing && call->m && len) {
        if (call->hdr_got < 5) {
            size_t take = 5 - (size_t)call->hdr_got;
            uint32_t mlen;
            char msg[200];
            const char *refused; /* why this message is not read */
            if (call->hdr_got == 0) /* a message begins */
                call->msg_t0 = srv_now_ns();
            if (call->hdr_got == 0 && call->m->stream) {
                call->t_msg_ns = srv_now_ns();
                call->msg_seen = 0;
                call->late = srv_grpc__late((gconn *)ud);
            }
            if (take > len)
                take = len;
            call->msg_seen += take;
            memcpy(call->hdr + call->hdr_got, data, take);
            call->hdr_got += (int)take;
            data += take;
            len -= take;
            if (call->hdr_got < 5)
                break;
            mlen = (uint32_t)call->hdr[1] << 24 | (uint32_t)call->hdr[2] << 16 |
                   (uint32_t)call->hdr[3] << 8 | call->hdr[4];
            if (call->hdr[0] > 1) {
                srv_grpc__call_fail(call, GRPC_INTERNAL, "message: bad compressed-flag byte");
                break;
            }
            if (call->hdr[0] == 1) {
                srv_grpc__call_fail(call, GRPC_UNIMPLEMENTED, "message: compressed messages "
                         "are not supported (grpc-encoding identity only)");
                break;
            }
            if ((long long)mlen > s->cfg.max_body) {
                snprintf(msg, sizeof msg, "message: %u bytes is over the limit "
                         "of %lld (max-body)", mlen, s->cfg.max_body);
                srv_grpc__call_fail(call, GRPC_RESOURCE_EXHAUSTED, msg);
                break;
            }
            if (!call->m->stream && call->n_msgs) {
                srv_grpc__call_end(call, GRPC_INVALID_ARGUMENT,
                         "request: a unary call takes one message");
                break;
            }
            refused = NULL;
            /* in size_t: 4 GiB - 1 plus one wrapped to 0 in 32 bits (a
             * max-body past 4 GiB lets such a length through), and its
             * bytes went into a malloc(0) */
            if (srv_mem_take(s, (size_t)mlen + 1u + MSG_COST) < 0) {
                snprintf(msg, sizeof msg, "server: the memory for request "
                         "bodies and unsent answers (%lld bytes, memory-budget) "
                         "is in use; retry shortly", s->cfg.memory_budget);
                refused = msg;
                /* a step retried as told counts (sched.c's rule) */
                if (call->has_seq_hdr && srv_grpc__is_infer(call->m))
                    srv_seq_touch(s, call->seq_hdr);
            } else if (!(call->msg = malloc((size_t)mlen + 1u))) {
                srv_mem_give(s, (size_t)mlen + 1u + MSG_COST);
                refused = GRPC_OOM_MSG;
            } else {
                call->msg_mem = (size_t)mlen + 1u + MSG_COST;
            }
            if (refused && !call->m->stream) {
                srv_grpc__call_end(call, GRPC_UNAVAILABLE, refused);
                break;
            }
            if (refused) { /* a stream: this request's error, its bytes
                            * dropped unread but their start kept for the
                            * echo (answered once it has come) */
                call->skipped = srv_grpc__slot_error(call, GRPC_UNAVAILABLE,
                                                     refused, NULL, 0);
                call->skipping = 1;
            }
            call->msg_len = mlen;
            call->msg_got = 0;
        }
        {
            size_t take = call->msg_len - call->msg_got;
            if (take > len)
                take = len;
            if (!call->skipping)
                memcpy(call->msg + call->msg_got, data, take);
            else if (call->msg_got < sizeof call->head)
                memcpy(call->head + call->msg_got, data,
                       take < sizeof call->head - call->msg_got
                           ? take : sizeof call->head - call->msg_got);
            call->msg_got += take;
            call->msg_seen += take;
            /* whole: no more rate; a unary call's message ends at its
             * END_STREAM, as REST's body at its last byte: until then it
             * is held, and a client that never sends it must not hold it
             * for good */
            if (call->msg_got == call->msg_len && call->m->stream)
                call->t_msg_ns = 0;
            data += take;
            len -= take;
        }
        if (call->skipping && call->skipped &&
            (call->msg_got >= sizeof call->head ||
             call->msg_got == call->msg_len)) {
            /* its echo is all in: answered now, its place in the order
             * kept, while the rest of its bytes are still skipped */
            srv_grpc__skipped_echo(call);
        }
        if (call->skipping && call->msg_got == call->msg_len) {
            call->skipping = 0;
            call->hdr_got = 0;
            call->n_msgs++;
        } else if (call->msg_got == call->msg_len) {
            char *m = call->msg;
            call->msg = NULL;
            call->hdr_got = 0;
            call->n_msgs++;
            size_t mem = call->msg_mem;
            call->msg_mem = 0;
            if (call->m->stream && (call->c->paused || call->hhead ||
                                    call->n_slots >= (int)s->cfg.queue_size)) {
                /* held (its window kept closed) until answers drain:
                 * queue-size in flight per stream, --grpc-buffer unsent */
                ghold *hm = calloc(1, sizeof *hm);
                if (!hm) {
                    free(m);
                    srv_mem_give(s, mem);
                    srv_grpc__call_fail(call, GRPC_UNAVAILABLE, GRPC_OOM_MSG);
                    break;
                }
                hm->msg = m, hm->len = call->msg_len, hm->mem = mem;
                hm->late = call->late;
                hm->t0 = call->msg_t0;
                if (call->htail)
                    call->htail->next = hm;
                else
                    call->hhead = hm;
                call->htail = hm;
            } else if (call->m->stream) {
                srv_grpc__dispatch(call, m, call->msg_len, mem, call->late,
                                   call->msg_t0);
            } else {
                call->unary = m;
                call->unary_len = call->msg_len;
                call->unary_mem = mem;
            }
        }
    }
    return 0;
}

static int on_stream_close(nghttp2_session *h2, int32_t id, uint32_t code,
                           void *ud)
{
    gcall *call = nghttp2_session_get_stream_user_data(h2, id);
    (void)code;
    (void)ud;
    if (call) {
        nghttp2_session_set_stream_user_data(h2, id, NULL);
        srv_grpc__call_free(call);
    }
    return 0;
}

/* on_frame_send: a call's last HEADERS (trailers, END_STREAM) went out
 * while its client may still send (the call ended early: an error, a
 * message over max-body, min-body-rate): RST_STREAM NO_ERROR asks the
 * client to stop (RFC 9113 8.1) and closes the stream now, so a client
 * that sends nothing more cannot hold the call, and with it the
 * connection, open. */
static int on_frame_send(nghttp2_session *h2, const nghttp2_frame *f, void *ud)
{
    gcall *call;
    if (f->hd.type == NGHTTP2_DATA || f->hd.type == NGHTTP2_HEADERS)
        ((gconn *)ud)->carried += f->hd.length; /* answers: calls carried */
    /* a GOAWAY with an error is the HTTP/2 layer's (attnd's own say
     * NO_ERROR): e.g. nghttp2's limit on stream resets (CVE-2023-44487) */
    if (f->hd.type == NGHTTP2_GOAWAY && f->goaway.error_code != NGHTTP2_NO_ERROR &&
        !((gconn *)ud)->h2_nomem) /* then flush says out of memory */
        srv_grpc__h2_error(ud, f->goaway.error_code, NULL);
    if (f->hd.type != NGHTTP2_HEADERS || !(f->hd.flags & NGHTTP2_FLAG_END_STREAM))
        return 0;
    call = nghttp2_session_get_stream_user_data(h2, f->hd.stream_id);
    if (call && !call->half_closed) {
        nghttp2_submit_rst_stream(h2, NGHTTP2_FLAG_NONE, f->hd.stream_id,
                                  NGHTTP2_NO_ERROR);
        /* what its client sent before it read this carries no call (its
         * stream is gone: nghttp2 drops it), and is no flood: up to the
         * stream's window, counted as it comes (grpc_conn.c's
         * scan_frames); counted at once, a HEADERS answered at once let
         * 8 MiB of frames carrying nothing pass */
        ((gconn *)ud)->reset_credit += STREAM_WINDOW;
    }
    return 0;
}

void srv_grpc__callbacks(nghttp2_session_callbacks *cbs)
{
    nghttp2_session_callbacks_set_on_begin_headers_callback(cbs, on_begin_headers);
    nghttp2_session_callbacks_set_on_header_callback(cbs, on_header);
    nghttp2_session_callbacks_set_on_frame_recv_callback(cbs, on_frame_recv);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cbs, on_data);
    nghttp2_session_callbacks_set_on_stream_close_callback(cbs, on_stream_close);
    nghttp2_session_callbacks_set_on_frame_send_callback(cbs, on_frame_send);
}

/* srv_grpc__scan_frames (grpc_conn.c's, moved here whole): follow the
 * frame headers of the n bytes c read (after the client's preface),
 * returning how many it took: with bound, it stops before a HEADERS
 * frame past TURN_CALLS this turn whose header is in these bytes. A DATA
 * frame on a stream with no call (one ended
 * early, whose client sent before it read the reset; nghttp2 drops it
 * unseen) counts as carried, up to what such calls left (reset_credit).
 * Looked up before nghttp2 reads those bytes, so a stream is judged as
 * it was when the read began: one whose HEADERS are in the same read is
 * new (past the last stream nghttp2 took), and its DATA on_data's; looked
 * up after, a call closed later in the same read (its client's
 * RST_STREAM behind its DATA) had its DATA counted twice, on_data's and
 * this one's, so such reads bought a flood the credit's worth of junk. */
size_t srv_grpc__scan_frames(gconn *c, const uint8_t *p, size_t n, int bound)
{
    const uint8_t *p0 = p;
    while (n) {
        size_t k;
        if (c->preface_got < 24) {
            k = 24 - c->preface_got < n ? 24 - c->preface_got : n;
            c->preface_got += k;
        } else if (c->fskip) {
            k = c->fskip < n ? c->fskip : n;
            c->fskip -= k;
        } else {
            k = 9u - (size_t)c->fh_got < n ? 9u - (size_t)c->fh_got : n;
            memcpy(c->fh + c->fh_got, p, k);
            c->fh_got += (int)k;
            if (c->fh_got == 9) {
                uint32_t sid = ((uint32_t)c->fh[5] & 0x7f) << 24 |
                               (uint32_t)c->fh[6] << 16 |
                               (uint32_t)c->fh[7] << 8 | c->fh[8];
                uint64_t len = (uint64_t)c->fh[0] << 16 |
                               (uint64_t)c->fh[1] << 8 | c->fh[2];
                c->fh_got = 0;
                if (c->fh[3] == NGHTTP2_HEADERS &&
                    ++c->turn_heads > TURN_CALLS && bound &&
                    (size_t)(p - p0) + k >= 9)
                    return (size_t)(p - p0) + k - 9; /* the rest: next turn */
                c->fskip = (size_t)len;
                if (c->fh[3] == NGHTTP2_DATA && c->reset_credit && sid &&
                    (int32_t)sid <=
                        nghttp2_session_get_last_proc_stream_id(c->h2) &&
                    !nghttp2_session_get_stream_user_data(c->h2,
                                                          (int32_t)sid)) {
                    if (len > c->reset_credit)
                        len = c->reset_credit;
                    c->carried += len;
                    c->reset_credit -= len;
                }
            }
        }
        p += k;
        n -= k;
    }
    return (size_t)(p - p0);
}
