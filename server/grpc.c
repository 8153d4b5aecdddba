/*
 * grpc.c - the gRPC door's calls: HTTP/2 streams (nghttp2), message
 * framing, answers in order, status and trailers. See grpc.h for why
 * nghttp2; grpc_rpc.c and grpc_meta.c have the methods, grpc_conn.c the
 * sockets.
 *
 * A connection (grpc_conn.c) is a uv_tcp_t and an nghttp2 server session:
 * bytes read go into nghttp2_session_mem_recv, whose callbacks (grpc_h2.c)
 * build calls (one per HTTP/2 stream) and read their messages; frames to
 * write come from nghttp2_session_mem_send and leave by uv_write. A call's
 * request messages (5-byte gRPC prefix, then protobuf) each become a slot:
 * an srv_req handed to the REST handler of the method. Slots answer in
 * any order (srv_respond -> on_answer) and are delivered in arrival order,
 * so a stream's responses keep its requests' order. Nothing calls nghttp2_session_mem_send from inside an nghttp2
 * callback: answers mark the connection, and an idle handle flushes marked
 * connections once per loop turn.
 *
 * Lifetimes: a call is freed when nghttp2 closes its stream (or with its
 * connection); its unanswered slots then detach (an infer job finishes
 * without them) or are orphaned until their handler answers. An srv_req
 * counts in s->live_reqs until freed, so a drain waits for gRPC calls in
 * flight as it does for REST ones; the drain asks about the connections
 * here too (srv_grpc_busy, srv_grpc_unsent), and a drain cut short ends
 * their open calls (srv_grpc_finish). Loop thread only.
 */
#include "server/grpc_int.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto/oip_pb.h"

/* ---- small helpers ---------------------------------------------------------- */

/* pct: grpc-message's percent-encoding of s into out (cap bytes). */
static void pct(const char *s, char *out, size_t cap)
{
    static const char hex[] = "0123456789ABCDEF";
    size_t o = 0;
    for (; *s && o + 4 < cap; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch >= 0x20 && ch < 0x7f && ch != '%') {
            out[o++] = (char)ch;
        } else {
            out[o++] = '%';
            out[o++] = hex[ch >> 4];
            out[o++] = hex[ch & 15];
        }
    }
    out[o] = 0;
}

static void free_req(srv *s, srv_req *r)
{
    if (r->suspended) { /* unanswered: its call went while its job ran */
        r->suspended = 0;
        s->n_suspended--;
    }
    srv_mem_give(s, r->mem + r->resp_mem);
    free(r->body);
    free(r->resp);
    free(r);
    s->live_reqs--;
    srv_check_stop(s);
}

/* slot_free: a slot that was never queued (chunk_free frees those). */
static void slot_free(srv *s, gslot *sl)
{
    free(sl->out);
    free(sl->big);
    srv_mem_give(s, sl->mem);
    free(sl);
}

/* ---- ending a call ---------------------------------------------------------- */

/* drop_begun: the message the call was receiving and its memory-budget. */
static void drop_begun(gcall *call)
{
    free(call->msg);
    call->msg = NULL;
    srv_mem_give(call->c->g->s, call->msg_mem);
    call->msg_mem = 0;
}

/* drop_msgs: the call's buffered messages and their memory-budget. */
static void drop_msgs(gcall *call)
{
    srv *s = call->c->g->s;
    while (call->hhead) {
        ghold *h = call->hhead;
        call->hhead = h->next;
        srv_mem_give(s, h->mem);
        free(h->msg);
        free(h);
    }
    call->htail = NULL;
    drop_begun(call);
    free(call->unary);
    call->unary = NULL;
    srv_mem_give(s, call->unary_mem);
    call->unary_mem = 0;
}

/* log_call: the log line of a call or request with no answer of its own to
 * log (one ended before its message became a request: refused key,
 * unknown method, bad framing; or a request whose call went: 499), as
 * REST logs every request. */
static void log_call(gcall *call, srv_req *r, int status)
{
    srv_req tmp;
    if (!r) {
        memset(&tmp, 0, sizeof tmp);
        snprintf(tmp.method_name, sizeof tmp.method_name, "%s",
                 call->method[0] ? call->method : "POST");
        snprintf(tmp.path, sizeof tmp.path, "%s", call->path);
        tmp.t0_ns = call->t0_ns;
        r = &tmp;
    }
    r->status = status;
    srv_log_request(call->c->g->s, r);
}

/* call_end: the call's final status; trailers follow the queued messages
 * (pump sends them). Once. */
void srv_grpc__call_end(gcall *call, int code, const char *msg)
{
    if (call->ending)
        return;
    if (code != GRPC_OK && !call->answered) /* (a wrong content-type: 415) */
        log_call(call, NULL, call->http_status ? call->http_status
                                               : srv_grpc_http_status(code));
    call->ending = 1;
    call->code = code;
    snprintf(call->end_msg, sizeof call->end_msg, "%s", msg ? msg : "");
    drop_msgs(call);
    call->c->g->s->http.grpc_codes[code < GRPC_N_CODES ? code : GRPC_INTERNAL]++;
    srv_grpc__schedule(call->c);
}

/* srv_grpc__call_fail: see grpc_int.h. Ended at once, a stream's requests
 * in flight went unanswered (their jobs cut as the stream closed), however
 * many had been sent whole before the broken message: a sequence's steps
 * ran or not by how far the pool had come. */
void srv_grpc__call_fail(gcall *call, int code, const char *msg)
{
    if (call->ending || call->failing)
        return;
    if (!call->m || !call->m->stream || (!call->shead && !call->hhead)) {
        srv_grpc__call_end(call, code, msg);
        return;
    }
    if (call->skipped) /* its echo: what came of it */
        srv_grpc__skipped_echo(call);
    call->skipping = 0;
    drop_begun(call);
    call->hdr_got = 0;
    call->t_msg_ns = 0;
    call->failing = 1;
    call->code = code;
    snprintf(call->end_msg, sizeof call->end_msg, "%s", msg ? msg : "");
    srv_grpc__schedule(call->c);
}

static void trailers(const gcall *call, nghttp2_nv *nv, char *num, char *msg)
{
    snprintf(num, 8, "%d", call->code);
    pct(call->end_msg, msg, GRPC_ERRMAX * 3);
    nv[0] = (nghttp2_nv){(uint8_t *)"grpc-status", (uint8_t *)num, 11,
                         strlen(num), NGHTTP2_NV_FLAG_NONE};
    nv[1] = (nghttp2_nv){(uint8_t *)"grpc-message", (uint8_t *)msg, 12,
                         strlen(msg), NGHTTP2_NV_FLAG_NONE};
}

/* chunk_free: a sent (or abandoned) chunk and the slot it is part of; the
 * slot's own bytes are given back here, the chunk's as they are sent. */
static void chunk_free(gconn *c, gchunk *k)
{
    gslot *sl = (gslot *)(void *)((char *)k - offsetof(gslot, chunk));
    if (k->buf != sl->msg)
        free(k->buf);
    free(sl->big); /* (none: stream_msg took it) */
    free(sl);
    c->queued -= sizeof *sl;
    srv_mem_give(c->g->s, sizeof *sl);
}

/* data_read: nghttp2 pulls the call's queued messages; past the last one
 * it sends the trailers (grpc-status, grpc-message). */
static ssize_t data_read(nghttp2_session *h2, int32_t id, uint8_t *buf,
                         size_t length, uint32_t *flags,
                         nghttp2_data_source *src, void *ud)
{
    gcall *call = src->ptr;
    size_t n = 0;
    (void)ud;
    while (n < length && call->chead) {
        gchunk *k = call->chead;
        size_t take = k->end - k->off;
        if (take > length - n)
            take = length - n;
        memcpy(buf + n, k->buf + k->off, take);
        n += take;
        k->off += take;
        call->c->queued -= take;
        srv_mem_give(call->c->g->s, take);
        if (k->off == k->end) {
            call->chead = k->next;
            if (!call->chead)
                call->ctail = NULL;
            chunk_free(call->c, k);
        }
    }
    if (!call->chead && call->ending) {
        nghttp2_nv nv[2];
        char num[8], msg[GRPC_ERRMAX * 3];
        trailers(call, nv, num, msg);
        *flags |= NGHTTP2_DATA_FLAG_EOF | NGHTTP2_DATA_FLAG_NO_END_STREAM;
        nghttp2_submit_trailer(h2, id, nv, 2);
        if (call->c->h2_nomem) /* the trailers are lost: flush closes it */
            return NGHTTP2_ERR_CALLBACK_FAILURE;
        call->ended = 1;
        return (ssize_t)n;
    }
    if (n == 0) {
        call->deferred = 1;
        return NGHTTP2_ERR_DEFERRED;
    }
    return (ssize_t)n;
}

/* queue_chunk: sl's answer, buf[off, end), is sent next on its call; the
 * chunk takes buf and the slot (chunk_free). Both count in --grpc-buffer
 * and memory-budget until then. */
static void queue_chunk(gcall *call, gslot *sl, char *buf, size_t off, size_t end)
{
    gchunk *k = &sl->chunk;
    k->buf = buf;
    k->off = off;
    k->end = end;
    call->c->queued += end - off + sizeof *sl;
    srv_mem_give(call->c->g->s, sl->mem); /* (counted again just below) */
    sl->mem = 0;
    srv_mem_hold(call->c->g->s, end - off + sizeof *sl); /* until sent */
    if (call->ctail)
        call->ctail->next = k;
    else
        call->chead = k;
    call->ctail = k;
}

/* srv_grpc__frame: see grpc_int.h. */
size_t srv_grpc__frame(char *buf, size_t at, size_t len)
{
    unsigned char *p = (unsigned char *)buf + at - 5;
    if (len > GRPC_MSG_MAX) /* its prefix would say len mod 2^32 */
        return SIZE_MAX;
    p[0] = 0;
    p[1] = (unsigned char)(len >> 24);
    p[2] = (unsigned char)(len >> 16);
    p[3] = (unsigned char)(len >> 8);
    p[4] = (unsigned char)len;
    return at - 5;
}

/* too_long: sl's answer (len bytes, a message of its own or within a
 * stream's) is more than one gRPC message carries: it goes, and sl
 * answers RESOURCE_EXHAUSTED instead. */
static void too_long(gslot *sl, size_t len)
{
    free(sl->out);
    sl->out = NULL;
    sl->code = GRPC_RESOURCE_EXHAUSTED;
    snprintf(sl->msg, GRPC_ERRMAX, "response: %zu bytes, more than one gRPC "
             "message carries (4294967295); ask for fewer outputs or send "
             "fewer tokens", len);
}

/* srv_grpc__fits: see grpc_int.h. */
int srv_grpc__fits(gslot *sl, int stream)
{
    size_t len;
    if (sl->code != GRPC_OK)
        return 1;
    len = sl->out_len - OIP_PB_HEADROOM;
    /* in a stream's field 2 it takes a tag and a varint more (11 bytes at
     * most): stream_msg's frame then holds it */
    if (len <= GRPC_MSG_MAX - (stream ? 11 : 0))
        return 1;
    too_long(sl, len);
    if (sl->r) /* its log line says the refusal, not the answer made */
        sl->r->status = srv_grpc_http_status(GRPC_RESOURCE_EXHAUSTED);
    return 0;
}

/* take_out: the slot's answer message, which the chunk takes: out, or for
 * an empty one (pack() gives NULL) the slot's own room */
static char *take_out(gslot *sl)
{
    char *b = sl->out ? sl->out : sl->msg;
    sl->out = NULL;
    return b;
}

/* stream_msg: a slot's answer as a ModelStreamInferResponse chunk (which
 * takes the slot): the infer response becomes field 2 (written in the
 * headroom in front of it), an error field 1 (its words moved on to leave
 * room for the frame, the tag and the length in front of them), then its
 * request's echo as field 2 (moved up from SLOT_ECHO_AT to follow them;
 * present even when empty, as Triton's is). */
static void stream_msg(gcall *call, gslot *sl)
{
    unsigned char var[10], tag;
    size_t len, at, nv, tail = 0;
    char *b;
    if (sl->code == GRPC_OK) {
        len = sl->out_len - OIP_PB_HEADROOM;
        at = OIP_PB_HEADROOM;
        tag = 0x12; /* field 2, length-delimited */
        b = take_out(sl);
    } else {
        /* error_message is a protobuf string: UTF-8, or a client's
         * parser refuses the whole stream (a message may quote bytes a
         * client sent, or be cut inside a character) */
        oip_utf8_mend(sl->msg);
        len = strnlen(sl->msg, GRPC_ERRMAX - 1);
        at = 16;
        tag = 0x0a; /* field 1, length-delimited */
        if ((b = sl->big)) { /* a long echo: the answer is written there */
            sl->big = NULL;
            memcpy(b + at, sl->msg, len);
        } else {
            b = sl->msg;
            memmove(b + at, b, len);
        }
        b[at + len] = 0x12; /* infer_response: field 2, length-delimited */
        tail = 1 + oip_pb_put_varint((unsigned char *)b + at + len + 1,
                                     sl->echo_len);
        memmove(b + at + len + tail, b + SLOT_ECHO_AT, sl->echo_len);
        tail += sl->echo_len;
    }
    nv = oip_pb_put_varint(var, len);
    at -= nv;
    memcpy(b + at, var, nv);
    b[--at] = (char)tag;
    len += nv + 1 + tail;
    queue_chunk(call, sl, b, srv_grpc__frame(b, at, len), at + len);
}

/* pump: hand held stream messages on (unless the connection is paused),
 * deliver the call's answered slots in order, then send headers, resume
 * the data or finish, as the queue allows. */
void srv_grpc__pump(gcall *call)
{
    gconn *c = call->c;
    srv *s = c->g->s;
    while (call->hhead && !c->paused && !call->ending &&
           call->n_slots < (int)s->cfg.queue_size) {
        ghold *h = call->hhead;
        call->hhead = h->next;
        if (!call->hhead)
            call->htail = NULL;
        srv_grpc__dispatch(call, h->msg, h->len, h->mem, h->late, h->t0);
        free(h);
    }
    while (call->shead && call->shead->done) {
        gslot *sl = call->shead;
        call->shead = sl->next;
        if (!call->shead)
            call->stail = NULL;
        call->n_slots--;
        if (!call->ending)
            srv_grpc__fits(sl, call->m->stream);
        if (sl->r) {
            srv_log_request(s, sl->r);
            free_req(s, sl->r);
            sl->r = NULL;
        }
        if (!call->ending) {
            if (call->m->stream) {
                s->http.grpc_msgs[sl->code < GRPC_N_CODES ? sl->code : GRPC_INTERNAL]++;
                stream_msg(call, sl);
                continue;
            }
            if (sl->code == GRPC_OK) {
                char *b = sl->out ? sl->out : sl->msg;
                size_t at = srv_grpc__frame(b, OIP_PB_HEADROOM,
                                            sl->out_len - OIP_PB_HEADROOM);
                /* (srv_grpc__fits made sure of its length) */
                queue_chunk(call, sl, take_out(sl), at, sl->out_len);
                srv_grpc__call_end(call, GRPC_OK, NULL);
                continue;
            }
            call->answered = 1;
            srv_grpc__call_end(call, sl->code, sl->msg);
        }
        slot_free(s, sl);
    }
    if (call->m && call->m->stream && !call->shead && !call->hhead &&
        !call->ending) {
        if (call->failing) { /* its requests before the break answered */
            char msg[GRPC_ERRMAX];
            snprintf(msg, sizeof msg, "%s", call->end_msg);
            srv_grpc__call_end(call, call->code, msg);
        } else if (call->half_closed)
            srv_grpc__call_end(call, GRPC_OK, NULL);
        else if (s->draining && !(call->hdr_got && !call->late))
            /* nothing in flight, nor a message begun before the signal
             * still coming (it is served first) */
            srv_grpc__call_end(call, GRPC_UNAVAILABLE,
                               "server: draining (shutting down); retry on "
                               "another replica");
    }
    if (call->ended || c->closing)
        return;
    if (!call->headers_sent && (call->chead || call->ending)) {
        nghttp2_nv nv[4];
        char num[8], msg[GRPC_ERRMAX * 3], st[8];
        nghttp2_data_provider prd;
        int n = 0;
        call->headers_sent = 1;
        snprintf(st, sizeof st, "%d", call->http_status ? call->http_status : 200);
        nv[n++] = (nghttp2_nv){(uint8_t *)":status", (uint8_t *)st, 7,
                               strlen(st), NGHTTP2_NV_FLAG_NONE};
        nv[n++] = (nghttp2_nv){(uint8_t *)"content-type",
                               (uint8_t *)"application/grpc", 12, 16,
                               NGHTTP2_NV_FLAG_NONE};
        if (!call->chead) { /* trailers-only */
            trailers(call, nv + n, num, msg);
            call->ended = 1;
            nghttp2_submit_response(c->h2, call->id, nv, (size_t)n + 2, NULL);
            return;
        }
        prd.source.ptr = call;
        prd.read_callback = data_read;
        nghttp2_submit_response(c->h2, call->id, nv, (size_t)n, &prd);
    } else if (call->headers_sent && call->deferred &&
               (call->chead || call->ending)) {
        call->deferred = 0;
        nghttp2_session_resume_data(c->h2, call->id);
    }
}

/* ---- slots: one request message -------------------------------------------- */

/* on_answer: srv_respond on a slot's request (srv.h): the method turns the
 * answer into the response message; delivery waits for the flush. */
static void on_answer(srv_req *r)
{
    gslot *sl = r->door_ctx;
    char err[GRPC_ERRMAX];
    if (!sl) { /* the call went away first: logged as answered, as REST's
                * request of a client that went */
        srv_log_request(r->s, r);
        free_req(r->s, r);
        return;
    }
    err[0] = 0;
    sl->code = sl->call->m->reply(r, &sl->out, &sl->out_len, err);
    if (sl->code != GRPC_OK)
        snprintf(sl->msg, GRPC_ERRMAX, "%s", err);
    sl->done = 1;
    srv_grpc__schedule(sl->call->c);
}

/* slot_abandon: the call is gone: detach or orphan the slot's request. */
static void slot_abandon(srv *s, gslot *sl)
{
    srv_req *r = sl->r;
    if (r) {
        if (r->job) { /* its work goes on unanswered: 499, as nginx logs a
                       * client that closed first */
            srv_sched_detach(r);
            log_call(sl->call, r, 499);
            free_req(s, r);
        } else if (!r->have_resp && !sl->done) {
            /* its handler still holds it (a slot answered at dispatch, its
             * deadline past or its message refused, has none); on_answer
             * logs it */
            r->door_ctx = NULL;
        } else {
            log_call(sl->call, r, r->status);
            free_req(s, r);
        }
    }
    slot_free(s, sl);
}

/* The longest echo: its answer's frame length must fit 32 bits. */
#define ECHO_LONGEST (UINT32_MAX - SLOT_ECHO_BIG(0) - 32)

/* echo: what the error answer of sl, a stream's request, echoes of it
 * (req, len bytes: its message or their start): in the slot, or when it
 * is longer (an id over 255 bytes) in its own buffer, counted against
 * memory-budget; with no memory for that, nothing (the error still goes). */
static void echo(gslot *sl, const char *req, size_t len)
{
    srv *s = sl->call->c->g->s;
    oip_pb_echo e;
    size_t n;
    oip_pb_peek_echo(req, len, &e);
    n = oip_pb_echo_size(&e);
    if (n <= OIP_PB_ECHO_MAX) {
        sl->echo_len = oip_pb_echo_encode(&e, sl->msg + SLOT_ECHO_AT);
        return;
    }
    if (n > ECHO_LONGEST || srv_mem_take(s, SLOT_ECHO_BIG(n)) < 0)
        return;
    if (!(sl->big = malloc(SLOT_ECHO_BIG(n)))) {
        srv_mem_give(s, SLOT_ECHO_BIG(n));
        return;
    }
    sl->mem += SLOT_ECHO_BIG(n);
    sl->echo_len = oip_pb_echo_encode(&e, sl->big + SLOT_ECHO_AT);
}

/* dispatch: one complete request message (msg malloc'd, taken; late: it
 * began after SIGTERM, so it is refused as new work is). */
void srv_grpc__dispatch(gcall *call, char *msg, size_t len, size_t mem,
                        int late, uint64_t t0)
{
    srv *s = call->c->g->s;
    gslot *sl = calloc(1, sizeof *sl);
    srv_req *r = calloc(1, sizeof *r);
    char err[GRPC_ERRMAX];
    srv_handler h;
    int code = GRPC_INTERNAL;
    uint64_t now = srv_now_ns();
    err[0] = 0;
    if (!sl || !r) { /* a stream: this request's error, in its place */
        free(sl);
        free(r);
        if (call->m->stream)
            srv_grpc__slot_error(call, GRPC_UNAVAILABLE, GRPC_OOM_MSG, msg, len);
        else
            srv_grpc__call_end(call, GRPC_UNAVAILABLE, GRPC_OOM_MSG);
        free(msg);
        srv_mem_give(s, mem);
        return;
    }
    sl->call = call;
    if (call->m->stream) /* for its error answer, if it gets one */
        echo(sl, msg, len);
    r->s = s;
    r->mem = mem; /* the message's share of memory-budget goes with it */
    r->t0_ns = now;
    r->t_msg_ns = t0 ? t0 : now;
    r->late = late; /* new work after SIGTERM is refused (sched.c) */
    r->method = SRV_POST;
    memcpy(r->method_name, "POST", 5);
    snprintf(r->path, sizeof r->path, "%s", call->path);
    if ((r->has_seq_hdr = call->has_seq_hdr))
        memcpy(r->seq_hdr, call->seq_hdr, sizeof r->seq_hdr);
    r->on_answer = on_answer;
    r->door_ctx = sl;
    s->live_reqs++;
    sl->r = r;
    /* the slot and its request count from now, as its answer does once
     * queued (queue_chunk gives this back): a stream's answered requests
     * wait behind one still running, up to queue-size of them */
    sl->mem += sizeof *sl + sizeof *r;
    srv_mem_hold(s, sizeof *sl + sizeof *r);
    if (call->stail)
        call->stail->next = sl;
    else
        call->shead = sl;
    call->stail = sl;
    call->n_slots++;
    if (call->deadline_ns && now < call->deadline_ns) {
        r->deadline_ms = (long long)((call->deadline_ns - now) / 1000000u);
        if (r->deadline_ms < 1)
            r->deadline_ms = 1;
    } else if (call->deadline_ns && srv_grpc__is_infer(call->m)) {
        /* passed: an inference is answered by srv_h_infer once its model
         * is known, and counted there as that model's timeout */
        r->expired = 1;
    } else if (call->deadline_ns) { /* passed: 504, as a bad message is */
        free(msg);
        code = GRPC_DEADLINE_EXCEEDED;
        snprintf(err, sizeof err, "deadline: the client's deadline passed");
    }
    if (err[0] || !(h = srv_grpc_handler(call->m, r, msg, len, &code, err))) {
        r->status = srv_grpc_http_status(code); /* logged as REST's */
        sl->code = code;
        snprintf(sl->msg, GRPC_ERRMAX, "%s", err);
        sl->done = 1;
        srv_grpc__schedule(call->c);
        return;
    }
    h(r); /* answers now or later, through on_answer */
}

/* slot_error: a stream request answered with an error before it became
 * an srv_req (its bytes were refused); it keeps its place in the order. */
gslot *srv_grpc__slot_error(gcall *call, int code, const char *msg,
                            const char *req, size_t len)
{
    srv *s = call->c->g->s;
    gslot *sl;
    /* counted from now: a stream's refused messages are not held back as
     * the others are (a paused connection's, queue-size), so the budget
     * is what bounds them; with no room, the stream ends with the error */
    if (srv_mem_take(s, sizeof *sl) < 0) {
        srv_grpc__call_end(call, code, msg);
        return NULL;
    }
    if (!(sl = calloc(1, sizeof *sl))) {
        srv_mem_give(s, sizeof *sl);
        srv_grpc__call_end(call, GRPC_UNAVAILABLE, GRPC_OOM_MSG);
        return NULL;
    }
    sl->mem = sizeof *sl;
    snprintf(sl->msg, GRPC_ERRMAX, "%s", msg);
    sl->call = call;
    sl->code = code;
    if (call->stail)
        call->stail->next = sl;
    else
        call->shead = sl;
    call->stail = sl;
    call->n_slots++;
    if (req)
        srv_grpc__slot_echo(sl, req, len);
    return sl;
}

void srv_grpc__slot_echo(gslot *sl, const char *req, size_t len)
{
    echo(sl, req, len);
    sl->done = 1;
    srv_grpc__schedule(sl->call->c);
}

void srv_grpc__skipped_echo(gcall *call)
{
    srv_grpc__slot_echo(call->skipped, call->head,
                        call->msg_got < sizeof call->head ? call->msg_got
                                                          : sizeof call->head);
    call->skipped = NULL;
}

void srv_grpc__call_free(gcall *call)
{
    gconn *c = call->c;
    srv *s = c->g->s;
    while (call->shead) {
        gslot *sl = call->shead;
        call->shead = sl->next;
        slot_abandon(s, sl);
    }
    while (call->chead) {
        gchunk *k = call->chead;
        call->chead = k->next;
        c->queued -= k->end - k->off;
        srv_mem_give(s, k->end - k->off);
        chunk_free(c, k);
    }
    c->unconsumed += call->unconsumed; /* its window is the connection's now */
    if (call->counted)
        srv_guard_call_end(&c->guard);
    /* the client went away first; a stream the HTTP/2 layer reset before
     * its HEADERS were whole and right (te, a pseudo-header twice, a
     * header list too long, a block whose CONTINUATION never came) was
     * never a call, and no client cancelled it */
    if (!call->ending && call->counted)
        s->http.grpc_codes[GRPC_CANCELLED]++;
    drop_msgs(call);
    if (call->prev)
        call->prev->next = call->next;
    else
        c->calls = call->next;
    if (call->next)
        call->next->prev = call->prev;
    else
        c->calls_tail = call->prev;
    free(call);
    srv_mem_give(s, CALL_COST);
    if (s->draining) /* the drain may wait for this call */
        srv_check_stop(s);
}

/* srv_grpc_step_coming: see grpc.h. */
int srv_grpc_step_coming(const srv *s, const char *id, uint64_t before)
{
    const gconn *c;
    const gcall *call;
    const ghold *h;
    if (!s->grpc)
        return 0;
    for (c = s->grpc->conns; c; c = c->next)
        for (call = c->calls; call; call = call->next) {
            if (call->ending || !srv_grpc__is_infer(call->m) ||
                (call->has_seq_hdr && strcmp(call->seq_hdr, id) != 0))
                continue;
            /* a message coming, or whole and not yet a request (a unary
             * call's until its END_STREAM, a stream's held) */
            if ((call->hdr_got || call->msg || call->unary) &&
                !call->skipping && call->msg_t0 < before)
                return 1;
            for (h = call->hhead; h; h = h->next)
                if (h->t0 < before)
                    return 1;
        }
    return 0;
}

/* ---- the drain's view of the connections ------------------------------------ */

/* answered: the call has its answer or its status: ending, or its first
 * request answered (pump delivers it next). */
static int answered(const gcall *call)
{
    return call->ending || (call->shead && call->shead->done);
}

void srv_grpc_finish(srv *s)
{
    srv_grpc *g = s->grpc;
    gconn *c;
    gcall *call;
    if (!g)
        return;
    for (c = g->conns; c; c = c->next) {
        for (call = c->calls; call; call = call->next)
            if (!answered(call))
                srv_grpc__call_end(call, GRPC_UNAVAILABLE,
                                   "server: draining (shutting down): the drain "
                                   "was cut short before the call was whole; not done");
        nghttp2_submit_goaway(c->h2, NGHTTP2_FLAG_NONE,
                              nghttp2_session_get_last_proc_stream_id(c->h2),
                              NGHTTP2_NO_ERROR, NULL, 0);
        srv_grpc__schedule(c);
    }
}

int srv_grpc_unsent(const srv *s, int *conns, size_t *bytes)
{
    const gconn *c;
    const gcall *call;
    const gchunk *k;
    int calls = 0;
    *conns = 0;
    *bytes = 0;
    if (!s->grpc)
        return 0;
    for (c = s->grpc->conns; c; c = c->next) {
        int n = 0;
        size_t b = c->wpending;
        for (call = c->calls; call; call = call->next) {
            if (!answered(call))
                continue;
            n++;
            for (k = call->chead; k; k = k->next)
                b += k->end - k->off;
        }
        if (n || c->wpending) {
            calls += n;
            (*conns)++;
            *bytes += b;
        }
    }
    return calls;
}

int srv_grpc_busy(const srv *s)
{
    const gconn *c;
    if (!s->grpc)
        return 0;
    for (c = s->grpc->conns; c; c = c->next)
        if (!c->closing && (c->calls || c->wpending || (c->held && c->held_early)))
            return 1;
    return 0;
}
