/*
 * test_seq.c - the server's sequence table (server/seq.c) on its own, part
 * one: ids, start / step / end / restart, the arrival order of steps, one
 * step of a sequence at a time, failures that change nothing (the K/V
 * pages reserved at launch, advanced on success, given back on failure),
 * the idle sweep and a step on its way. The retained map that ends when
 * it can no longer grow, and its scores, are test_seq_maps.c; limits,
 * other models, drops, expiry, listing, the batcher's count of expected
 * steps are test_seq_drops.c; all share seq_fixture.h (the stand-ins, the
 * models, the helpers).
 */
#include "tests/server/seq_fixture.h"

#include "server/maps_int.h"

/* ---- start, steps, end -------------------------------------------------- */

/* A start of 3 tokens, a step of 1 (with attention over 4 keys), a step of
 * 2 that ends it: lengths 3, 4, then gone; pages of 4 tokens are taken at
 * bind and kept between steps; the instance reference is held while live. */
START_TEST(start_step_end)
{
    srv_seq_info i;
    srv_job *a = job(M1, 3, "\"sequence_id\":42,\"sequence_start\":true");
    srv_job *b, *c;
    submit(a);
    ck_assert_int_eq(a->queued, 1);
    ck_assert_int_eq(a->status, 0);
    ck_assert_int_eq(info("42", NULL), 0); /* not live before it ran */
    ck_assert_int_eq(launch(a), 0);
    ck_assert_uint_eq(used(0), PAGE); /* 3 tokens: one page, at bind */
    ck_assert_int_eq(a->prep.seqs[0].s, 3);
    ck_assert_int_eq(info("42", NULL), 0);
    end(a, 1);
    ck_assert_int_eq(info("42", &i), 1);
    ck_assert_int_eq(i.length, 3);
    ck_assert_uint_eq(i.bytes, PAGE);
    ck_assert_str_eq(i.model, "m1");
    ck_assert_str_eq(i.map_id, "");
    ck_assert_uint_eq(i.idle_ms, 0);
    ck_assert_int_eq(g_inst[0].refs, 2);
    ck_assert_int_eq(M1->seq_stats.started, 1);
    ck_assert_int_eq(M1->seq_stats.live, 1);

    g_now += 25 * MS;
    ck_assert_int_eq(info("42", &i), 1);
    ck_assert_uint_eq(i.idle_ms, 25);
    b = jobo(M1, 1, "[{\"name\":\"attention\"}]", "\"sequence_id\":42");
    submit(b);
    ck_assert_int_eq(b->queued, 1);
    ck_assert_int_eq(info("42", &i), 1);
    ck_assert_uint_eq(i.idle_ms, 0); /* a step is on its way */
    ck_assert_int_eq(launch(b), 0);
    ck_assert_int_eq(b->st.t0, 3);
    ck_assert_int_eq(b->prep.seqs[0].s, 4);
    ck_assert_int_eq(b->prep.seqs[0].s_valid, 4);
    ck_assert_ptr_nonnull(b->prep.seqs[0].kv);
    ck_assert_int_eq(b->prep.shape[SRV_O_ATT][2], 1); /* [1, 2, 1, 4] */
    ck_assert_int_eq(b->prep.shape[SRV_O_ATT][3], 4);
    ck_assert_ptr_nonnull(b->prep.out[SRV_O_ATT]);
    ck_assert_uint_eq(used(0), PAGE); /* 4 tokens still fit one page */
    end(b, 1);
    ck_assert_int_eq(length("42"), 4);

    c = job(M1, 2, "\"sequence_id\":42,\"sequence_end\":true");
    submit(c);
    ck_assert_int_eq(launch(c), 0);
    ck_assert_uint_eq(used(0), 2 * PAGE); /* 6 tokens: a second page */
    ck_assert_int_eq(c->prep.seqs[0].s, 6);
    end(c, 1);
    ck_assert_int_eq(info("42", NULL), 0);
    ck_assert_uint_eq(used(0), 0);
    ck_assert_int_eq(g_inst[0].refs, 1);
    ck_assert_int_eq(M1->seq_stats.started, 1);
    ck_assert_int_eq(M1->seq_stats.ended, 1);
    ck_assert_int_eq(M1->seq_stats.live, 0);
    ck_assert_mem_eq(M1->seq_stats.dropped, (uint64_t[SRV_DROP_N]){0},
                     sizeof M1->seq_stats.dropped);

    /* ended: a step is unknown, and says how to begin again */
    refused(M1, 1, "\"sequence_id\":42", 400, "parameters.sequence_id: "
            "unknown sequence '42' (ended 0.0 s ago at 6 tokens: a step with "
            "sequence_end was answered); send sequence_start: true with the "
            "whole history to begin it again");
    ck_assert_int_eq(g_n_fail_ends, 1);
    job_free(a), job_free(b), job_free(c);
}
END_TEST

/* A start that is also the end: computed, counted, nothing kept. */
START_TEST(start_and_end_at_once)
{
    go(M1, 5, "\"sequence_id\":\"one\",\"sequence_start\":true,"
              "\"sequence_end\":true");
    ck_assert_int_eq(info("one", NULL), 0);
    ck_assert_uint_eq(used(0), 0);
    ck_assert_int_eq(g_inst[0].refs, 1);
    ck_assert_int_eq(M1->seq_stats.started, 1);
    ck_assert_int_eq(M1->seq_stats.ended, 1);
    ck_assert_int_eq(M1->seq_stats.live, 0);
}
END_TEST

/* The number 7, the string "7" and the Attnd-Sequence-Id header 7 name one
 * sequence; "07", "x7" and 2^64 - 1 are others. */
START_TEST(ids_number_string_header)
{
    srv_job *h;
    go(M1, 2, "\"sequence_id\":7,\"sequence_start\":true");
    go(M1, 1, "\"sequence_id\":\"7\"");
    ck_assert_int_eq(length("7"), 3);
    h = make(M1, 1, "7", NULL, ""); /* only the header */
    ck_assert_str_eq(h->st.id, "7");
    submit(h);
    ck_assert_int_eq(run(h, 1), 0);
    ck_assert_int_eq(length("7"), 4);
    job_free(h);

    go(M1, 1, "\"sequence_id\":\"07\",\"sequence_start\":true");
    go(M1, 1, "\"sequence_id\":\"x7\",\"sequence_start\":true");
    go(M1, 2, "\"sequence_id\":18446744073709551615,\"sequence_start\":true");
    ck_assert_int_eq(length("7"), 4);
    ck_assert_int_eq(length("07"), 1);
    ck_assert_int_eq(length("x7"), 1);
    ck_assert_int_eq(length("18446744073709551615"), 2);
    ck_assert_uint_eq(srv_seq_list(&g_s, NULL, 0), 4);
    ck_assert_int_eq(M1->seq_stats.live, 4);
}
END_TEST

/* ---- order ------------------------------------------------------------- */

/* Steps leave in arrival order whatever order they finish decoding in: a
 * start, then two steps of its sequence, decoded last-first. The held
 * steps wait; then the start runs alone, the steps one at a time after it,
 * each seeing the tokens of the one before. */
START_TEST(steps_keep_arrival_order)
{
    srv_job *a = job(M1, 3, "\"sequence_id\":5,\"sequence_start\":true");
    srv_job *b = job(M1, 1, "\"sequence_id\":5");
    srv_job *c = job(M1, 2, "\"sequence_id\":5");
    srv_seq_arrive(&g_s, &a->st);
    srv_seq_arrive(&g_s, &b->st);
    srv_seq_arrive(&g_s, &c->st);
    srv_seq_decoded(&g_s, &c->st, 1);
    srv_seq_decoded(&g_s, &b->st, 1);
    ck_assert_int_eq(c->st.where, SRV_STEP_HELD);
    ck_assert_int_eq(b->st.where, SRV_STEP_HELD);
    ck_assert_int_eq(b->queued + c->queued + b->status + c->status, 0);
    srv_seq_decoded(&g_s, &a->st, 1);
    ck_assert_int_eq(a->queued, 1);
    ck_assert_int_eq(b->st.where, SRV_STEP_WAITING);
    ck_assert_int_eq(c->st.where, SRV_STEP_WAITING);
    ck_assert_int_eq(b->queued + c->queued + b->status + c->status, 0);
    ck_assert_int_eq(run(a, 1), 0);
    ck_assert_int_eq(b->queued, 1); /* b, not c: it arrived first */
    ck_assert_int_eq(c->queued, 0);
    ck_assert_int_eq(run(b, 1), 0);
    ck_assert_int_eq(b->st.t0, 3);
    ck_assert_int_eq(c->queued, 1);
    ck_assert_int_eq(run(c, 1), 0);
    ck_assert_int_eq(c->st.t0, 4);
    ck_assert_int_eq(length("5"), 6);
    job_free(a), job_free(b), job_free(c);
}
END_TEST

/* A step waits for every earlier arrival's decode, a stateless request's
 * too (decoded with take = 0); an arrival that is answered while decoding
 * (deadline, client gone: srv_seq_abandon, or its job ending) no longer
 * holds anyone. Steps of different sequences run side by side. */
START_TEST(held_until_earlier_arrivals_decode)
{
    srv_job *x = job(M1, 1, "\"sequence_id\":\"plain\"");
    srv_job *y = job(M1, 1, "\"sequence_id\":\"plain\"");
    srv_job *z = job(M1, 1, "\"sequence_id\":\"plain\"");
    srv_job *a = job(M1, 2, "\"sequence_id\":1,\"sequence_start\":true");
    srv_job *b = job(M1, 2, "\"sequence_id\":2,\"sequence_start\":true");
    srv_job *c = job(M1, 2, "\"sequence_id\":3,\"sequence_start\":true");
    srv_seq_arrive(&g_s, &x->st); /* stand-ins for stateless requests */
    srv_seq_arrive(&g_s, &a->st);
    srv_seq_arrive(&g_s, &y->st);
    srv_seq_arrive(&g_s, &b->st);
    srv_seq_arrive(&g_s, &z->st);
    srv_seq_arrive(&g_s, &c->st);
    srv_seq_decoded(&g_s, &a->st, 1);
    srv_seq_decoded(&g_s, &b->st, 1);
    srv_seq_decoded(&g_s, &c->st, 1);
    ck_assert_int_eq(a->queued + b->queued + c->queued, 0);
    srv_seq_decoded(&g_s, &x->st, 0); /* not a step: a may go */
    ck_assert_int_eq(x->st.where, SRV_STEP_NONE);
    ck_assert_int_eq(a->queued, 1);
    ck_assert_int_eq(b->queued + c->queued, 0);
    srv_seq_abandon(&g_s, &y->st); /* answered while decoding: b may go */
    ck_assert_int_eq(b->queued, 1);
    ck_assert_int_eq(c->queued, 0);
    srv_seq_abandon(&g_s, &y->st); /* twice is harmless */
    srv_seq_step_end(&z->st, 0);   /* its job ends while decoding */
    ck_assert_int_eq(z->st.where, SRV_STEP_NONE);
    ck_assert_int_eq(c->queued, 1);
    /* three sequences' starts active at once */
    ck_assert_int_eq(run(c, 1), 0);
    ck_assert_int_eq(run(a, 1), 0);
    ck_assert_int_eq(run(b, 1), 0);
    ck_assert_int_eq(length("1") + length("2") + length("3"), 6);
    ck_assert_int_eq(a->status + b->status + c->status, 600);
    job_free(x), job_free(y), job_free(z);
    job_free(a), job_free(b), job_free(c);
}
END_TEST

/* A step whose job ends while it is held (its client went away) is never
 * routed; one that ends while waiting behind its sequence's active step
 * leaves the queue, and the next one goes in its place. */
START_TEST(steps_that_end_early_leave_no_trace)
{
    srv_job *x = job(M1, 1, "\"sequence_id\":\"plain\"");
    srv_job *a = job(M1, 2, "\"sequence_id\":8,\"sequence_start\":true");
    srv_job *h = job(M1, 1, "\"sequence_id\":8");
    srv_job *b, *c;
    srv_seq_arrive(&g_s, &x->st);
    submit(a);
    submit(h);
    ck_assert_int_eq(h->st.where, SRV_STEP_HELD);
    srv_seq_step_end(&h->st, 0);
    ck_assert_int_eq(h->st.where, SRV_STEP_NONE);
    srv_seq_decoded(&g_s, &x->st, 0);
    ck_assert_int_eq(a->queued, 1);
    ck_assert_int_eq(h->queued + h->status, 0);
    b = job(M1, 1, "\"sequence_id\":8");
    c = job(M1, 3, "\"sequence_id\":8");
    submit(b);
    submit(c);
    ck_assert_int_eq(b->st.where, SRV_STEP_WAITING);
    srv_seq_step_end(&b->st, 0);
    ck_assert_int_eq(b->st.where, SRV_STEP_NONE);
    ck_assert_int_eq(run(a, 1), 0);
    ck_assert_int_eq(b->queued, 0);
    ck_assert_int_eq(c->queued, 1);
    ck_assert_int_eq(run(c, 1), 0);
    ck_assert_int_eq(length("8"), 5);
    job_free(a), job_free(b), job_free(c);
    /* two starts of one id: the second's job ends while it waits, the
     * first fails: nothing is left of the id */
    a = job(M1, 2, "\"sequence_id\":9,\"sequence_start\":true");
    b = job(M1, 2, "\"sequence_id\":9,\"sequence_start\":true");
    submit(a);
    submit(b);
    srv_seq_step_end(&b->st, 0);
    ck_assert_int_eq(run(a, 0), 0);
    ck_assert_int_eq(info("9", NULL), 0);
    ck_assert_int_eq(g_n_fail_ends, 0);
    job_free(x), job_free(a), job_free(h), job_free(b);
}
END_TEST

/* ---- failures change nothing ------------------------------------------- */

/* A live, retained sequence of 5 tokens (2 pages). A step of 4 tokens needs
 * a third page: it is reserved at bind, and the step failing gives it back;
 * a step refused at bind (request-memory, kv-bytes) reserves nothing. In
 * every case the sequence is exactly as before (length, bytes, map, time of
 * its last step, pages, references, counters), and the next step works. */
START_TEST(failed_step_changes_nothing)
{
    srv_job *a = job(M1, 5, "\"sequence_id\":\"s\",\"sequence_start\":true,"
                            "\"retain\":true");
    srv_job *b, *c, *d, *f;
    snap before, after;
    float w[2 * 5 * 5] = {0};
    maps_put_args m = {.model = "m1", .b = 1, .h = 2, .t = 5, .s = 5,
                       .attention = w};
    char id[MAPS_ID_MAX];
    submit(a);
    ck_assert_int_eq(launch(a), 0);
    ck_assert_ptr_nonnull(a->prep.out[SRV_O_ATT]); /* retained: the map */
    ck_assert_int_eq(maps_put(g_s.maps, &m, id, NULL), 0); /* srv_seq_encode */
    snprintf(a->st.map_id, sizeof a->st.map_id, "%s", id);
    end(a, 1);
    g_now += 7 * MS;
    before = take_snap("s", M1, 0);
    ck_assert_int_eq(before.info.length, 5);
    ck_assert_uint_eq(before.info.bytes, 2 * PAGE);
    ck_assert_str_eq(before.info.map_id, id);
    ck_assert_uint_eq(before.info.idle_ms, 7);

    /* the computation fails after the reservation */
    b = job(M1, 4, "\"sequence_id\":\"s\"");
    submit(b);
    ck_assert_str_eq(b->st.map_id, id); /* the map it would grow */
    ck_assert_int_eq(launch(b), 0);
    ck_assert_uint_eq(used(0), 3 * PAGE);
    ck_assert_ptr_nonnull(b->prep.out[SRV_O_ATT]);
    b->st.map_id[0] = 0; /* as if its encode had lost the map */
    end(b, 0);
    after = take_snap("s", M1, 0);
    assert_same(&before, &after);

    /* an end step that fails ends nothing */
    c = job(M1, 1, "\"sequence_id\":\"s\",\"sequence_end\":true");
    submit(c);
    ck_assert_int_eq(run(c, 0), 0);
    after = take_snap("s", M1, 0);
    assert_same(&before, &after);

    /* refused at bind: its outputs are y (4 x 8 floats, at prepare) and,
     * at bind, attention [1, 2, 4, 9] (288 bytes); request-memory is one
     * byte short of the request with both */
    d = jobo(M1, 4, "[{\"name\":\"y\"},{\"name\":\"attention\"}]",
             "\"sequence_id\":\"s\"");
    ck_assert_uint_eq(d->prep.bytes, 4 * 8 * 4);
    g_s.cfg.request_memory = (long long)(d->in.bytes + d->prep.bytes + 288 - 1);
    submit(d);
    ck_assert_int_eq(launch(d), 413);
    ck_assert_msg(strstr(d->msg, "outputs.attention: this step needs more "
                         "than") && strstr(d->msg, "request-memory"),
                  "%s", d->msg);
    after = take_snap("s", M1, 0);
    assert_same(&before, &after);
    g_s.cfg.request_memory = 1 << 20;

    /* refused at bind: 5 + 28 tokens need 9 pages of a budget of 8, more
     * than the whole cache: 400, as no retry (503) could ever take them */
    f = job(M1, 28, "\"sequence_id\":\"s\"");
    submit(f);
    ck_assert_int_eq(launch(f), 400);
    ck_assert_str_eq(f->msg, "sequences: sequence 's' from 5 to 33 tokens "
                     "would need 1152 bytes of K/V, more than the whole K/V "
                     "cache of model 'm1' (1024 bytes, kv-bytes: 32 tokens): "
                     "no retry can take it; send at most 27 tokens");
    after = take_snap("s", M1, 0);
    assert_same(&before, &after);

    /* and it goes on from 5 tokens */
    job_free(b);
    b = job(M1, 2, "\"sequence_id\":\"s\"");
    submit(b);
    ck_assert_int_eq(launch(b), 0);
    ck_assert_int_eq(b->st.t0, 5);
    ck_assert_int_eq(b->prep.seqs[0].s, 7);
    end(b, 1);
    ck_assert_int_eq(length("s"), 7);
    ck_assert_int_eq(info("s", &after.info), 1);
    ck_assert_str_eq(after.info.map_id, id);
    ck_assert_uint_eq(after.info.idle_ms, 0);
    job_free(a), job_free(b), job_free(c), job_free(d), job_free(f);
}
END_TEST

/* past_end: a step of id past its end (409 at once), which is a step. */
static void past_end(const char *id, int len)
{
    char p[96];
    srv_job *a;
    snprintf(p, sizeof p, "\"sequence_id\":\"%s\",\"sequence_position\":%d",
             id, len + 1);
    a = job(M1, 1, p);
    submit(a);
    ck_assert_int_eq(a->status, 409); /* at its turn */
    job_free(a);
}

/* A step that fails still came: its sequence is not idle. A client that
 * retries a 503 (the K/V budget full: another sequence holds the rest, or
 * memory-budget once decoded) as it says, or sends a step past the end,
 * keeps its sequence; one that sends nothing for sequence-idle-ms (40 ms)
 * loses it. */
START_TEST(failed_steps_are_not_idle)
{
    srv_job *a;
    int i;
    go(M1, 16, "\"sequence_id\":\"s\",\"sequence_start\":true"); /* 4 pages */
    go(M1, 16, "\"sequence_id\":\"f\",\"sequence_start\":true"); /* 4 more */
    ck_assert_uint_eq(used(0), BUDGET);
    for (i = 0; i < 3; i++) { /* 90 ms of steps 30 ms apart */
        g_now += 30 * MS;
        a = job(M1, 1, "\"sequence_id\":\"s\"");
        submit(a);
        ck_assert_int_eq(launch(a), 503); /* a 9th page: f holds it */
        job_free(a);
        past_end("f", 16); /* f stays too */
        sweep();
        ck_assert_int_eq(length("s"), 16);
    }
    g_now += 30 * MS;
    past_end("s", 16);
    past_end("f", 16);
    sweep();
    ck_assert_int_eq(length("s"), 16);
    /* one decoded that fails before its turn (sched.c's decoded: no
     * memory-budget for it, 503 "retry shortly"; or answered already) */
    for (i = 0; i < 2; i++) {
        g_now += 30 * MS;
        a = job(M1, 1, "\"sequence_id\":\"s\"");
        srv_seq_arrive(&g_s, &a->st);
        srv_seq_decoded(&g_s, &a->st, 0);
        job_free(a);
        past_end("f", 16);
        sweep();
        ck_assert_int_eq(length("s"), 16);
    }
    g_now += 39 * MS;
    sweep();
    ck_assert_int_eq(length("s"), 16);
    g_now += 1 * MS;
    sweep();
    ck_assert_int_eq(info("s", NULL), 0);
    ck_assert_int_eq(info("f", NULL), 0);
    ck_assert_int_eq(M1->seq_stats.dropped[SRV_DROP_IDLE], 2);
    ck_assert_uint_eq(used(0), 0);
}
END_TEST

/* A restart (sequence_start on a live id) that fails, at bind or after,
 * keeps the old sequence whole; one that succeeds replaces it (counted as
 * dropped "restarted" and started again, still one live sequence). */
START_TEST(failed_restart_keeps_the_old_one)
{
    srv_job *a, *b, *c, *d;
    snap before, after;
    go(M1, 6, "\"sequence_id\":\"r\",\"sequence_start\":true");
    before = take_snap("r", M1, 0);
    ck_assert_uint_eq(before.used, 2 * PAGE);

    a = job(M1, 2, "\"sequence_id\":\"r\",\"sequence_start\":true");
    submit(a);
    ck_assert_int_eq(launch(a), 0);
    ck_assert_int_eq(a->st.t0, 0);           /* its own new cache */
    ck_assert_int_eq(a->prep.seqs[0].s, 2);
    ck_assert_uint_eq(used(0), 3 * PAGE);    /* old 2 + new 1 */
    end(a, 0);
    after = take_snap("r", M1, 0);
    assert_same(&before, &after);

    /* 7 pages for the new one next to the old 2: over the whole 8, which
     * no other sequence's end could make room for: 400 (a 503 was
     * retried for ever), not counted as refused; nothing changed */
    b = job(M1, 25, "\"sequence_id\":\"r\",\"sequence_start\":true");
    submit(b);
    ck_assert_int_eq(launch(b), 400);
    ck_assert_str_eq(b->msg, "sequences: the restart of sequence 'r' needs "
                     "896 bytes of K/V beside the 256 its old tokens hold "
                     "until it is answered, more than the whole K/V cache of "
                     "model 'm1' (1024 bytes, kv-bytes): no retry can take "
                     "it; DELETE /v2/sequences/{id} first, or send its tokens "
                     "without sequence_start at sequence_position 0 (they "
                     "replace the old ones in place)");
    after = take_snap("r", M1, 0);
    assert_same(&before, &after);
    job_free(b);

    /* 40 tokens alone exceed the whole cache (32): the advice counts the
     * old 2 pages (8 tokens) it keeps beside them, so 24 with
     * sequence_start (it said "send at most 32", which the paragraph
     * above refuses), and says how to send up to the whole cache */
    b = job(M1, 40, "\"sequence_id\":\"r\",\"sequence_start\":true");
    submit(b);
    ck_assert_int_eq(launch(b), 400);
    ck_assert_str_eq(b->msg, "sequences: the restart of sequence 'r' with 40 "
                     "tokens exceeds the whole K/V cache of model 'm1' (1024 "
                     "bytes, kv-bytes: 32 tokens): no retry can take it; its "
                     "old tokens stay until answered: send at most 24 with "
                     "sequence_start, or as many as the cache holds after "
                     "DELETE /v2/sequences/{id} or without sequence_start at "
                     "sequence_position 0");
    after = take_snap("r", M1, 0);
    assert_same(&before, &after);
    /* as it says: 24 with sequence_start fit beside the old 8 */
    job_free(b);
    b = job(M1, 24, "\"sequence_id\":\"r\",\"sequence_start\":true");
    submit(b);
    ck_assert_int_eq(launch(b), 0);
    end(b, 0);
    after = take_snap("r", M1, 0);
    assert_same(&before, &after);

    c = job(M1, 2, "\"sequence_id\":\"r\",\"sequence_start\":true");
    submit(c);
    ck_assert_int_eq(run(c, 1), 0);
    ck_assert_int_eq(length("r"), 2);
    ck_assert_uint_eq(used(0), PAGE);
    ck_assert_int_eq(g_inst[0].refs, 2);
    ck_assert_int_eq(M1->seq_stats.started, 2);
    ck_assert_int_eq(M1->seq_stats.dropped[SRV_DROP_RESTARTED], 1);
    ck_assert_int_eq(M1->seq_stats.live, 1);
    ck_assert_uint_eq(srv_seq_list(&g_s, NULL, 0), 1);

    /* 5 pages next to its 1 fit the 8, but not beside another sequence's
     * 3: 503, whose end makes room, counted as refused for the full cache */
    go(M1, 10, "\"sequence_id\":\"o\",\"sequence_start\":true");
    before = take_snap("r", M1, 0);
    ck_assert_uint_eq(before.used, 4 * PAGE);
    d = job(M1, 17, "\"sequence_id\":\"r\",\"sequence_start\":true");
    submit(d);
    ck_assert_int_eq(launch(d), 503);
    after = take_snap("r", M1, 0);
    ck_assert_uint_eq(after.stats.refused[SRV_REFUSE_KV_FULL],
                      before.stats.refused[SRV_REFUSE_KV_FULL] + 1);
    after.stats.refused[SRV_REFUSE_KV_FULL]--;
    assert_same(&before, &after);
    job_free(a), job_free(b), job_free(c), job_free(d);
}
END_TEST

/* A failed start leaves no sequence: a step queued behind it finds none. */
START_TEST(failed_start_then_step_is_unknown)
{
    srv_job *a = job(M1, 2, "\"sequence_id\":\"n\",\"sequence_start\":true");
    srv_job *b = job(M1, 1, "\"sequence_id\":\"n\"");
    submit(a);
    submit(b);
    ck_assert_int_eq(b->st.where, SRV_STEP_WAITING);
    ck_assert_int_eq(run(a, 0), 0);
    ck_assert_int_eq(b->queued, 0);
    ck_assert_int_eq(b->status, 400);
    ck_assert_ptr_nonnull(strstr(b->msg, "unknown sequence 'n'"));
    ck_assert_int_eq(info("n", NULL), 0);
    ck_assert_uint_eq(used(0), 0);
    ck_assert_int_eq(M1->seq_stats.started, 0);
    ck_assert_int_eq(M1->seq_stats.live, 0);
    job_free(a), job_free(b);
}
END_TEST

/* A retained start that fails after its encode put its map: the map goes
 * (nothing answered ever named it, and it would hold maps-bytes). */
START_TEST(failed_retained_start_drops_its_map)
{
    float w[2 * 2 * 2] = {0};
    maps_put_args m = {.model = "m1", .b = 1, .h = 2, .t = 2, .s = 2,
                       .attention = w};
    maps_info mi;
    char id[MAPS_ID_MAX];
    srv_job *a = job(M1, 2, "\"sequence_id\":\"k\",\"sequence_start\":true,"
                            "\"retain\":true");
    submit(a);
    ck_assert_int_eq(launch(a), 0);
    ck_assert_int_eq(maps_put(g_s.maps, &m, id, NULL), 0); /* srv_seq_encode */
    snprintf(a->st.map_id, sizeof a->st.map_id, "%s", id);
    ck_assert_int_eq(maps_info_get(g_s.maps, id, &mi), 0);
    end(a, 0);
    ck_assert_int_ne(maps_info_get(g_s.maps, id, &mi), 0);
    ck_assert_int_eq(info("k", NULL), 0);
    job_free(a);
}
END_TEST

/* ---- the idle sweep ---------------------------------------------------- */

/* The idle sweep and a step on its way: a request whose head came before
 * its sequence's deadline (sequence-idle-ms, 40) but is still decoding,
 * or decoded and held behind an earlier arrival, when the sweep runs
 * keeps the sequence: it may be its step (its id is not known before its
 * decode). For at most one more period; one that names another sequence
 * in its header, or came after the deadline, keeps nothing. */
START_TEST(idle_waits_for_a_step_on_its_way)
{
    srv_job *a, *b, *o, *late;
    go(M1, 3, "\"sequence_id\":\"w\",\"sequence_start\":true");
    g_now += 30 * MS;
    o = make(M1, 1, "other", NULL, "");
    o->st.t_head = g_now;
    srv_seq_arrive(&g_s, &o->st); /* another id's, by its header */
    a = job(M1, 1, "\"sequence_id\":\"w\"");
    a->st.t_head = g_now;
    srv_seq_arrive(&g_s, &a->st); /* decoding */
    g_now += 20 * MS;             /* 50 ms since the start */
    sweep();
    ck_assert_int_eq(length("w"), 3);
    srv_seq_decoded(&g_s, &a->st, 1); /* held behind o */
    ck_assert_int_eq(a->st.where, SRV_STEP_HELD);
    sweep();
    ck_assert_int_eq(length("w"), 3);
    srv_seq_decoded(&g_s, &o->st, 0); /* a's turn: its sequence is there */
    ck_assert_int_eq(a->queued, 1);
    ck_assert_int_eq(run(a, 1), 0);
    ck_assert_int_eq(length("w"), 4);
    ck_assert_int_eq(M1->seq_stats.dropped[SRV_DROP_IDLE], 0);

    /* a request that may be its step: for one more period at most */
    b = job(M1, 1, "\"sequence_id\":\"w\"");
    g_now += 39 * MS;
    b->st.t_head = g_now;
    srv_seq_arrive(&g_s, &b->st);
    g_now += 40 * MS; /* 79 */
    sweep();
    ck_assert_int_eq(length("w"), 4);
    g_now += 1 * MS; /* 80: two periods */
    sweep();
    ck_assert_int_eq(info("w", NULL), 0);
    ck_assert_int_eq(M1->seq_stats.dropped[SRV_DROP_IDLE], 1);
    srv_seq_decoded(&g_s, &b->st, 1);
    ck_assert_int_eq(b->status, 400); /* unknown: dropped (idle) */

    /* one naming another id, or come after the deadline, keeps nothing */
    go(M1, 3, "\"sequence_id\":\"w\",\"sequence_start\":true");
    o->st.where = SRV_STEP_NONE;
    srv_seq_arrive(&g_s, &o->st);
    g_now += 40 * MS;
    late = job(M1, 1, "\"sequence_id\":\"w\"");
    late->st.t_head = g_now;
    srv_seq_arrive(&g_s, &late->st);
    sweep();
    ck_assert_int_eq(info("w", NULL), 0);
    srv_seq_decoded(&g_s, &o->st, 0);
    srv_seq_decoded(&g_s, &late->st, 1);
    ck_assert_int_eq(late->status, 400);
    job_free(a), job_free(b), job_free(o), job_free(late);
}
END_TEST

/* A decoded step held behind an earlier arrival came before its
 * sequence's deadline: its id is known, it is a step, and it keeps the
 * sequence past the one more period a request that may be one gets, for
 * as long as it is held (the earlier arrivals' deadlines bound that); it
 * was dropped at two periods, and the step answered 400 unknown. */
START_TEST(held_step_keeps_its_sequence)
{
    srv_job *o, *a;
    go(M1, 3, "\"sequence_id\":\"k\",\"sequence_start\":true");
    g_now += 30 * MS;
    o = make(M1, 1, "other", NULL, ""); /* another id's, slow to decode */
    o->st.t_head = g_now;
    srv_seq_arrive(&g_s, &o->st);
    a = job(M1, 1, "\"sequence_id\":\"k\"");
    a->st.t_head = g_now;
    srv_seq_arrive(&g_s, &a->st);
    srv_seq_decoded(&g_s, &a->st, 1);
    ck_assert_int_eq(a->st.where, SRV_STEP_HELD);
    g_now += 100 * MS; /* 130 ms since the start: past two periods */
    sweep();
    ck_assert_int_eq(length("k"), 3);
    srv_seq_decoded(&g_s, &o->st, 0);
    ck_assert_int_eq(run(a, 1), 0);
    ck_assert_int_eq(length("k"), 4);
    ck_assert_int_eq(M1->seq_stats.dropped[SRV_DROP_IDLE], 0);
    job_free(o), job_free(a);
}
END_TEST

static Suite *seq_suite(void)
{
    Suite *s = suite_create("seq");
    TCase *tc = tcase_create("seq");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, start_step_end);
    tcase_add_test(tc, start_and_end_at_once);
    tcase_add_test(tc, ids_number_string_header);
    tcase_add_test(tc, steps_keep_arrival_order);
    tcase_add_test(tc, held_until_earlier_arrivals_decode);
    tcase_add_test(tc, steps_that_end_early_leave_no_trace);
    tcase_add_test(tc, failed_step_changes_nothing);
    tcase_add_test(tc, failed_steps_are_not_idle);
    tcase_add_test(tc, failed_restart_keeps_the_old_one);
    tcase_add_test(tc, failed_start_then_step_is_unknown);
    tcase_add_test(tc, failed_retained_start_drops_its_map);
    tcase_add_test(tc, idle_waits_for_a_step_on_its_way);
    tcase_add_test(tc, held_step_keeps_its_sequence);
    suite_add_tcase(s, tc);
    return s;
}

TU_MAIN(seq_suite)
