/*
 * test_seq_drops.c - the server's sequence table (server/seq.c and
 * server/seq_drops.c) on its own: drops (DELETE, unload, reload, idle),
 * drain expiry, the batcher's count of expected steps, listing and
 * freeing. The limits, steps on another model and retain are
 * test_seq_limits.c; the rest test_seq.c and test_seq_maps.c; all share
 * seq_fixture.h.
 */
#include "tests/server/seq_fixture.h"

#include "tests/fail_alloc.h" /* held: the blocks live (none counted under
                                 * a sanitizer, whose leak check does it) */

/* ---- drops --------------------------------------------------------------- */

/* DELETE: unknown ids are -1; a live sequence goes at once (counted,
 * logged) unless a bound step of it runs, then when that step ends; a step
 * already on the model queue but not bound finds it gone at bind. */
START_TEST(delete_now_or_after_the_running_step)
{
    char owner[SRV_NAME_MAX], msg[512];
    srv_seq_info i;
    srv_job *a, *b;
    ck_assert_int_eq(srv_seq_delete(&g_s, "nope", owner), -1);
    go(M1, 3, "\"sequence_id\":\"d\",\"sequence_start\":true");
    ck_assert_int_eq(srv_seq_delete(&g_s, "d", owner), 0);
    ck_assert_str_eq(owner, "m1");
    ck_assert_str_eq(g_log, "sequence 'd' of model 'm1' dropped (deleted, 3 "
                     "tokens)");
    ck_assert_int_eq(info("d", NULL), 0);
    ck_assert_uint_eq(used(0), 0);
    ck_assert_int_eq(g_inst[0].refs, 1);
    ck_assert_int_eq(M1->seq_stats.dropped[SRV_DROP_DELETED], 1);
    ck_assert_int_eq(M1->seq_stats.live, 0);
    ck_assert_int_eq(srv_seq_delete(&g_s, "d", owner), -1);

    /* queued, not bound: dropped now, the step is refused at bind */
    go(M1, 3, "\"sequence_id\":\"d\",\"sequence_start\":true");
    a = job(M1, 1, "\"sequence_id\":\"d\"");
    submit(a);
    ck_assert_int_eq(a->queued, 1);
    ck_assert_int_eq(srv_seq_delete(&g_s, "d", owner), 0);
    ck_assert_int_eq(M1->seq_stats.dropped[SRV_DROP_DELETED], 2);
    ck_assert_uint_eq(used(0), 0);
    ck_assert_int_eq(launch(a), 400);
    ck_assert_str_eq(a->msg, "parameters.sequence_id: sequence 'd' was dropped "
                     "(deleted) before this step ran; send sequence_start: "
                     "true with the whole history to begin it again");
    ck_assert_int_eq(info("d", NULL), 0);

    /* bound and running: it goes when the step ends, even a good one;
     * an unload meanwhile does not change why (the first reason stands) */
    go(M1, 3, "\"sequence_id\":\"d\",\"sequence_start\":true");
    b = job(M1, 2, "\"sequence_id\":\"d\"");
    submit(b);
    ck_assert_int_eq(launch(b), 0);
    ck_assert_int_eq(srv_seq_delete(&g_s, "d", owner), 0);
    srv_seq_drop_model(M1);
    /* being dropped: not live to a second DELETE either (as to GET) */
    ck_assert_int_eq(srv_seq_delete(&g_s, "d", owner), -1);
    ck_assert_int_eq(M1->seq_stats.dropped[SRV_DROP_DELETED], 2);
    ck_assert_int_eq(info("d", NULL), 0); /* not listed any more */
    ck_assert_int_eq(srv_seq_get(&g_s, "d", &i, msg, sizeof msg), -1);
    ck_assert_str_eq(msg, "sequence 'd' is being dropped (deleted): its cache "
                     "goes when its running step ends");
    ck_assert_uint_eq(used(0), 2 * PAGE); /* its pages are in the plan */
    end(b, 1);
    ck_assert_int_eq(M1->seq_stats.dropped[SRV_DROP_DELETED], 3);
    ck_assert_int_eq(M1->seq_stats.dropped[SRV_DROP_UNLOADED], 0);
    ck_assert_int_eq(srv_seq_get(&g_s, "d", &i, msg, sizeof msg), -1);
    ck_assert_str_eq(msg, "sequence 'd' dropped 0.0 s ago at 5 tokens: deleted");
    ck_assert_int_eq(M1->seq_stats.live, 0);
    ck_assert_uint_eq(used(0), 0);
    ck_assert_int_eq(g_inst[0].refs, 1);
    ck_assert_str_eq(g_log, "sequence 'd' of model 'm1' dropped (deleted, 5 "
                     "tokens)");
    job_free(a), job_free(b);
}
END_TEST

/* DELETE while a restart (sequence_start on a live id) is on its way
 * (README "Races"): the old sequence goes at once and the restart, once
 * answered 200, holds the id again. Meanwhile that restart is a new
 * sequence on its way and counts as one under max-sequences: with
 * max-sequences 1 another start is refused (503) until it ends, and a
 * failed one gives its place back. */
START_TEST(delete_during_a_restart)
{
    char owner[SRV_NAME_MAX];
    srv_job *a, *d, *e;
    const char *full = "sequences: 1 live or starting (max-sequences 1); end "
                       "some or retry later";
    g_s.cfg.max_sequences = 1;
    go(M1, 3, "\"sequence_id\":\"r\",\"sequence_start\":true");
    /* bound and running */
    a = job(M1, 2, "\"sequence_id\":\"r\",\"sequence_start\":true");
    submit(a);
    ck_assert_int_eq(launch(a), 0);
    ck_assert_int_eq(srv_seq_delete(&g_s, "r", owner), 0);
    ck_assert_int_eq(M1->seq_stats.dropped[SRV_DROP_DELETED], 1);
    ck_assert_int_eq(M1->seq_stats.live, 0);
    /* r's restart takes the place */
    refused(M1, 1, "\"sequence_id\":\"n\",\"sequence_start\":true", 503, full);
    end(a, 1);
    ck_assert_int_eq(length("r"), 2);
    ck_assert_int_eq(M1->seq_stats.live, 1);
    ck_assert_int_eq(M1->seq_stats.dropped[SRV_DROP_RESTARTED], 0);
    /* r is live */
    refused(M1, 1, "\"sequence_id\":\"n\",\"sequence_start\":true", 503, full);
    ck_assert_uint_eq(srv_seq_list(&g_s, NULL, 0), 1);

    /* on the model queue, not bound yet, and then failing: its place is
     * free again */
    d = job(M1, 2, "\"sequence_id\":\"r\",\"sequence_start\":true");
    submit(d);
    ck_assert_int_eq(d->queued, 1);
    ck_assert_int_eq(srv_seq_delete(&g_s, "r", owner), 0);
    ck_assert_int_eq(M1->seq_stats.live, 0);
    ck_assert_int_eq(run(d, 0), 0);
    ck_assert_int_eq(info("r", NULL), 0);
    ck_assert_uint_eq(used(0), 0);
    ck_assert_int_eq(g_inst[0].refs, 1);
    e = job(M1, 1, "\"sequence_id\":\"n\",\"sequence_start\":true");
    submit(e);
    ck_assert_int_eq(e->queued, 1);
    ck_assert_int_eq(run(e, 1), 0);
    ck_assert_uint_eq(srv_seq_list(&g_s, NULL, 0), 1);
    job_free(a), job_free(d), job_free(e);
}
END_TEST

/* A sequence that went is remembered for sequence-idle-ms (40), at most
 * max-sequences of them: a step to it is told how it went (ended; dropped
 * and why), one sent again at a position its ended sequence held is 409
 * (it was carried out); a restart, expiry or the cap forgets it. */
START_TEST(gone_sequences_are_remembered)
{
    char owner[SRV_NAME_MAX];
    srv_job *j;
    const char *unknown_tail = "; send sequence_start: true with the whole "
                               "history to begin it again";
    char want[512];
    g_s.cfg.max_sequences = 2;
    go(M1, 3, "\"sequence_id\":\"e\",\"sequence_start\":true");
    go(M1, 1, "\"sequence_id\":\"e\",\"sequence_end\":true,\"sequence_position\":3");
    g_now += 1500 * MS;
    /* its last step sent again */
    refused(M1, 1, "\"sequence_id\":\"e\",\"sequence_end\":true,\"sequence_position\":3",
            409, "parameters.sequence_position: sequence 'e' ended 1.5 s ago "
            "at 4 tokens: a step with sequence_end was answered; position 3 "
            "was in it (its steps were carried out), and an ended sequence "
            "takes no step: its last one cannot be sent again (for that, leave "
            "sequence_end off and DELETE /v2/sequences/{id} when done)");
    /* a step past its end, or with no position */
    snprintf(want, sizeof want, "parameters.sequence_id: unknown sequence "
             "'e' (ended 1.5 s ago at 4 tokens: a step with sequence_end was "
             "answered)%s", unknown_tail);
    refused(M1, 1, "\"sequence_id\":\"e\",\"sequence_position\":4", 400, want);
    refused(M1, 1, "\"sequence_id\":\"e\"", 400, want);
    ck_assert_int_eq(info("e", NULL), 0);
    ck_assert_uint_eq(used(0), 0);
    /* deleted: dropped, and why */
    go(M1, 2, "\"sequence_id\":\"d\",\"sequence_start\":true");
    ck_assert_int_eq(srv_seq_delete(&g_s, "d", owner), 0);
    ck_assert_int_eq(srv_seq_delete(&g_s, "d", owner), -1);
    snprintf(want, sizeof want, "parameters.sequence_id: unknown sequence 'd' "
             "(dropped 0.0 s ago at 2 tokens: deleted)%s", unknown_tail);
    refused(M1, 1, "\"sequence_id\":\"d\"", 400, want);
    /* a third one gone (max-sequences 2): the oldest, 'e', is forgotten */
    go(M1, 1, "\"sequence_id\":\"f\",\"sequence_start\":true,\"sequence_end\":true");
    j = job(M1, 1, "\"sequence_id\":\"e\",\"sequence_end\":true,\"sequence_position\":3");
    submit(j);
    ck_assert_int_eq(j->status, 400);
    ck_assert_ptr_nonnull(strstr(j->msg, "unknown sequence 'e' (never started"));
    job_free(j);
    /* idle: 'g' goes in the sweep that forgets 'd' and 'f' (40 ms after) */
    go(M1, 1, "\"sequence_id\":\"g\",\"sequence_start\":true");
    g_now += 40 * MS;
    sweep();
    ck_assert_int_eq(info("g", NULL), 0);
    snprintf(want, sizeof want, "parameters.sequence_id: unknown sequence 'g' "
             "(dropped 0.0 s ago at 1 token: idle past sequence-idle-ms)%s",
             unknown_tail);
    refused(M1, 1, "\"sequence_id\":\"g\"", 400, want);
    for (int k = 0; k < 2; k++) {
        j = job(M1, 1, k ? "\"sequence_id\":\"f\"" : "\"sequence_id\":\"d\"");
        submit(j);
        ck_assert_ptr_nonnull(strstr(j->msg, "(never started"));
        job_free(j);
    }
    /* a restart makes it live again; ending it remembers the new end */
    go(M1, 2, "\"sequence_id\":\"g\",\"sequence_start\":true");
    go(M1, 1, "\"sequence_id\":\"g\"");
    ck_assert_int_eq(length("g"), 3);
    go(M1, 1, "\"sequence_id\":\"g\",\"sequence_end\":true");
    j = job(M1, 1, "\"sequence_id\":\"g\",\"sequence_position\":2");
    submit(j);
    ck_assert_int_eq(j->status, 409);
    ck_assert_ptr_nonnull(strstr(j->msg, "ended 0.0 s ago at 4 tokens"));
    job_free(j);
    ck_assert_uint_eq(used(0), 0);
    ck_assert_int_eq(M1->seq_stats.live, 0);
}
END_TEST

/* Unload / reload (srv_seq_drop_model) drops the model's sequences, the
 * other model's stay; one whose step is running goes when it ends; one
 * whose step finished on the old instance after a reload goes too. */
START_TEST(unload_and_reload)
{
    srv_job *a, *b;
    go(M1, 1, "\"sequence_id\":\"u1\",\"sequence_start\":true");
    go(M1, 1, "\"sequence_id\":\"u2\",\"sequence_start\":true");
    go(M2, 1, "\"sequence_id\":\"v\",\"sequence_start\":true");
    a = job(M1, 1, "\"sequence_id\":\"u2\"");
    submit(a);
    ck_assert_int_eq(launch(a), 0);
    M1->inst = &g_inst[2]; /* reloaded */
    srv_seq_drop_model(M1);
    ck_assert_int_eq(M1->seq_stats.dropped[SRV_DROP_UNLOADED], 1);
    ck_assert_int_eq(info("u1", NULL), 0);
    ck_assert_int_eq(info("u2", NULL), 0); /* going */
    ck_assert_int_eq(length("v"), 1);
    ck_assert_int_eq(g_inst[0].refs, 2);   /* u2 still holds it */
    end(a, 1);
    ck_assert_int_eq(M1->seq_stats.dropped[SRV_DROP_UNLOADED], 2);
    ck_assert_int_eq(M1->seq_stats.live, 0);
    ck_assert_int_eq(g_inst[0].refs, 1);
    ck_assert_uint_eq(used(0), 0);
    ck_assert_int_eq(M2->seq_stats.live, 1);

    /* a start running on the old instance when the model is reloaded
     * (without a drop): it ends as the sequence's first step, and goes */
    M1->inst = &g_inst[0];
    b = job(M1, 2, "\"sequence_id\":\"late\",\"sequence_start\":true");
    submit(b);
    ck_assert_int_eq(launch(b), 0);
    M1->inst = &g_inst[2];
    end(b, 1);
    ck_assert_int_eq(info("late", NULL), 0);
    ck_assert_int_eq(M1->seq_stats.started, 3);
    ck_assert_int_eq(M1->seq_stats.dropped[SRV_DROP_UNLOADED], 3);
    ck_assert_int_eq(g_inst[0].refs, 1);
    ck_assert_uint_eq(used(0), 0);
    /* the reloaded model takes new sequences */
    go(M1, 2, "\"sequence_id\":\"late\",\"sequence_start\":true");
    ck_assert_int_eq(g_inst[2].refs, 2);
    ck_assert_uint_eq(used(2), PAGE);
    job_free(a), job_free(b);
}
END_TEST

/* Idle: a sequence with no step for sequence-idle-ms (40) is dropped by the
 * sweep, not a moment before; never while a step of it is queued. */
START_TEST(idle_drop)
{
    srv_job *a;
    srv_seq_info i;
    go(M1, 3, "\"sequence_id\":\"i\",\"sequence_start\":true");
    g_now += 39 * MS;
    sweep();
    ck_assert_int_eq(info("i", &i), 1);
    ck_assert_uint_eq(i.idle_ms, 39);
    g_now += 1 * MS;
    sweep();
    ck_assert_int_eq(info("i", NULL), 0);
    ck_assert_int_eq(M1->seq_stats.dropped[SRV_DROP_IDLE], 1);
    ck_assert_int_eq(M1->seq_stats.live, 0);
    ck_assert_uint_eq(used(0), 0);
    ck_assert_int_eq(g_inst[0].refs, 1);
    ck_assert_str_eq(g_log, "sequence 'i' of model 'm1' dropped (idle, 3 "
                     "tokens)");

    /* a step restarts the clock; a queued step holds the sequence */
    go(M1, 3, "\"sequence_id\":\"i\",\"sequence_start\":true");
    g_now += 30 * MS;
    go(M1, 1, "\"sequence_id\":\"i\"");
    g_now += 30 * MS;
    sweep();
    ck_assert_int_eq(length("i"), 4);
    a = job(M1, 1, "\"sequence_id\":\"i\"");
    submit(a);
    g_now += 1000 * MS;
    sweep();
    ck_assert_int_eq(length("i"), 4);
    ck_assert_int_eq(launch(a), 0);
    sweep();
    end(a, 1); /* its end is the last step */
    g_now += 39 * MS;
    sweep();
    ck_assert_int_eq(length("i"), 5);
    g_now += 1 * MS;
    sweep();
    ck_assert_int_eq(info("i", NULL), 0);
    ck_assert_int_eq(M1->seq_stats.dropped[SRV_DROP_IDLE], 2);
    job_free(a);
}
END_TEST

/* Drain timeout (srv_seq_expire): held and waiting steps answer 503; the
 * active one is left to its batch. */
START_TEST(expire_fails_held_and_waiting)
{
    srv_job *x = job(M1, 1, "\"sequence_id\":\"plain\"");
    srv_job *a = job(M1, 2, "\"sequence_id\":\"e\",\"sequence_start\":true");
    srv_job *b = job(M1, 1, "\"sequence_id\":\"e\"");
    srv_job *h = job(M1, 1, "\"sequence_id\":\"f\",\"sequence_start\":true");
    submit(a);
    submit(b);
    srv_seq_arrive(&g_s, &x->st);
    submit(h);
    ck_assert_int_eq(b->st.where, SRV_STEP_WAITING);
    ck_assert_int_eq(h->st.where, SRV_STEP_HELD);
    srv_seq_expire(&g_s);
    ck_assert_int_eq(b->status, 503);
    ck_assert_str_eq(b->msg, "server: shut down before this request ran");
    ck_assert_int_eq(h->status, 503);
    ck_assert_str_eq(h->msg, "server: shut down before this request ran");
    ck_assert_int_eq(a->status, 0);
    ck_assert_int_eq(run(a, 1), 0);
    ck_assert_int_eq(length("e"), 2);
    srv_seq_decoded(&g_s, &x->st, 0);
    ck_assert_int_eq(h->queued, 0);
    job_free(x), job_free(a), job_free(b), job_free(h);
}
END_TEST

/* The batcher's hint (--sequence-wait-us, batch.c): a sequence answered
 * 200 and going on is expected to send its next step soon; it counts in
 * its model's seq_expected until that step arrives, it ends or goes. A
 * step answered while the next one already waits, or a failed one, expects
 * nothing. batch.c forgets every flag at once with a new generation; an
 * old flag then counts no more, and a new one does. */
START_TEST(expected_next_steps)
{
    char owner[SRV_NAME_MAX];
    srv_job *a, *b;
    go(M1, 2, "\"sequence_id\":\"p\",\"sequence_start\":true");
    ck_assert_int_eq(M1->seq_expected, 1);
    go(M1, 2, "\"sequence_id\":\"q\",\"sequence_start\":true");
    ck_assert_int_eq(M1->seq_expected, 2);
    a = job(M1, 1, "\"sequence_id\":\"p\"");
    b = job(M1, 1, "\"sequence_id\":\"p\"");
    submit(a);
    ck_assert_int_eq(M1->seq_expected, 1); /* p's step came */
    submit(b);
    ck_assert_int_eq(run(a, 1), 0);
    ck_assert_int_eq(M1->seq_expected, 1); /* its next one is there */
    ck_assert_int_eq(run(b, 0), 0);
    ck_assert_int_eq(M1->seq_expected, 1); /* failed: nothing expected */
    go(M1, 1, "\"sequence_id\":\"p\",\"sequence_end\":true");
    ck_assert_int_eq(M1->seq_expected, 1); /* ended */
    ck_assert_int_eq(srv_seq_delete(&g_s, "q", owner), 0);
    ck_assert_int_eq(M1->seq_expected, 0); /* gone */

    go(M1, 1, "\"sequence_id\":\"r\",\"sequence_start\":true");
    ck_assert_int_eq(M1->seq_expected, 1);
    M1->expect_gen++, M1->seq_expected = 0; /* batch.c gives up on them */
    go(M1, 1, "\"sequence_id\":\"s\",\"sequence_start\":true");
    ck_assert_int_eq(M1->seq_expected, 1); /* s, of the new generation */
    go(M1, 1, "\"sequence_id\":\"r\""); /* r's old flag is not s's */
    ck_assert_int_eq(M1->seq_expected, 2);
    /* a restart on m2: expected there, no longer on m1 */
    go(M2, 1, "\"sequence_id\":\"r\",\"sequence_start\":true");
    ck_assert_int_eq(M1->seq_expected, 1);
    ck_assert_int_eq(M2->seq_expected, 1);
    /* idle drops forget it too */
    g_now += 40 * MS;
    sweep();
    ck_assert_int_eq(M1->seq_expected, 0);
    ck_assert_int_eq(M2->seq_expected, 0);
    job_free(a), job_free(b);
}
END_TEST

/* says: a plain step to id is refused (400) with a message holding what. */
static void says(const char *id, const char *what)
{
    char params[128];
    srv_job *j;
    snprintf(params, sizeof params, "\"sequence_id\":\"%s\"", id);
    j = job(M1, 1, params);
    submit(j);
    ck_assert_int_eq(j->queued, 0);
    ck_assert_int_eq(j->status, 400);
    ck_assert_msg(strstr(j->msg, what), "%s: %s", id, j->msg);
    job_free(j);
}

/* The tombstones' bounds: max-sequences (2) of them are all kept, the
 * oldest goes with one more; a sweep before sequence-idle-ms (40) keeps
 * them, one at 40 ms forgets them even with no live sequence left; a
 * sequence started again is no longer one (it takes no place among them). */
START_TEST(tombstones_kept_up_to_the_cap_and_the_idle_time)
{
    g_s.cfg.max_sequences = 2;
    go(M1, 1, "\"sequence_id\":\"x\",\"sequence_start\":true,\"sequence_end\":true");
    go(M1, 2, "\"sequence_id\":\"a\",\"sequence_start\":true,\"sequence_end\":true");
    /* two gone, two kept */
    says("x", "(ended 0.0 s ago at 1 token");
    says("a", "(ended 0.0 s ago at 2 tokens");
    /* a started again and ended again: still two, x kept */
    go(M1, 3, "\"sequence_id\":\"a\",\"sequence_start\":true");
    go(M1, 1, "\"sequence_id\":\"b\",\"sequence_start\":true,\"sequence_end\":true");
    says("x", "(ended 0.0 s ago at 1 token");
    says("b", "(ended 0.0 s ago at 1 token");
    go(M1, 1, "\"sequence_id\":\"a\",\"sequence_end\":true");
    says("x", "(never started"); /* the oldest of three */
    says("b", "(ended 0.0 s ago at 1 token");
    says("a", "(ended 0.0 s ago at 4 tokens");
    /* no live sequence: the sweep still forgets them, not before 40 ms */
    ck_assert_uint_eq(srv_seq_list(&g_s, NULL, 0), 0);
    g_now += 39 * MS;
    sweep();
    says("a", "(ended 0.0 s ago at 4 tokens"); /* 0.039 s */
    says("b", "(ended 0.0 s ago at 1 token");
    g_now += 1 * MS;
    sweep();
    says("a", "(never started");
    says("b", "(never started");
}
END_TEST

/* An unload dropping more sequences than there is room for tombstones
 * (max-sequences 3: an ended one and three live) keeps the newest 3 once
 * it is over (not only at the next sequence to go). */
START_TEST(unload_keeps_at_most_max_sequences_tombstones)
{
    g_s.cfg.max_sequences = 3;
    go(M1, 1, "\"sequence_id\":\"x\",\"sequence_start\":true,\"sequence_end\":true");
    go(M1, 1, "\"sequence_id\":\"u1\",\"sequence_start\":true");
    go(M1, 1, "\"sequence_id\":\"u2\",\"sequence_start\":true");
    go(M1, 1, "\"sequence_id\":\"u3\",\"sequence_start\":true");
    says("x", "(ended 0.0 s ago at 1 token");
    srv_seq_drop_model(M1);
    ck_assert_int_eq(M1->seq_stats.dropped[SRV_DROP_UNLOADED], 3);
    says("x", "(never started");
    says("u1", "(dropped 0.0 s ago at 1 token: its model reloaded or unloaded)");
    says("u2", "(dropped 0.0 s ago at 1 token: its model reloaded or unloaded)");
    says("u3", "(dropped 0.0 s ago at 1 token: its model reloaded or unloaded)");
}
END_TEST

/* A sequence unloaded behind its running step is being dropped for that:
 * GET says why; a DELETE that came first keeps its reason even when the
 * model is reloaded (its instance changes) before the step ends. */
START_TEST(being_dropped_says_why)
{
    char owner[SRV_NAME_MAX], msg[512];
    srv_seq_info i;
    srv_job *a, *b;
    go(M1, 1, "\"sequence_id\":\"u\",\"sequence_start\":true");
    a = job(M1, 1, "\"sequence_id\":\"u\"");
    submit(a);
    ck_assert_int_eq(launch(a), 0);
    srv_seq_drop_model(M1);
    ck_assert_int_eq(srv_seq_get(&g_s, "u", &i, msg, sizeof msg), -1);
    ck_assert_str_eq(msg, "sequence 'u' is being dropped (its model reloaded "
                     "or unloaded): its cache goes when its running step ends");
    end(a, 1);
    ck_assert_int_eq(M1->seq_stats.dropped[SRV_DROP_UNLOADED], 1);

    go(M1, 1, "\"sequence_id\":\"d\",\"sequence_start\":true");
    b = job(M1, 1, "\"sequence_id\":\"d\"");
    submit(b);
    ck_assert_int_eq(launch(b), 0);
    ck_assert_int_eq(srv_seq_delete(&g_s, "d", owner), 0);
    M1->inst = &g_inst[2]; /* reloaded while the step runs */
    end(b, 1);
    ck_assert_int_eq(M1->seq_stats.dropped[SRV_DROP_DELETED], 1);
    ck_assert_int_eq(M1->seq_stats.dropped[SRV_DROP_UNLOADED], 1);
    ck_assert_int_eq(srv_seq_get(&g_s, "d", &i, msg, sizeof msg), -1);
    ck_assert_str_eq(msg, "sequence 'd' dropped 0.0 s ago at 2 tokens: deleted");
    ck_assert_int_eq(g_inst[0].refs, 1);
    job_free(a), job_free(b);
}
END_TEST

/* A step at a position below the length rewinds the cache while it runs:
 * the listing shows the length the sequence still has until the step is
 * answered. */
START_TEST(list_during_a_rewinding_step)
{
    srv_job *a;
    go(M1, 3, "\"sequence_id\":\"r\",\"sequence_start\":true");
    a = job(M1, 1, "\"sequence_id\":\"r\",\"sequence_position\":1");
    submit(a);
    ck_assert_int_eq(launch(a), 0);
    ck_assert_int_eq(length("r"), 3);
    end(a, 1);
    ck_assert_int_eq(length("r"), 2);
    job_free(a);
}
END_TEST

/* A start refused at once (max-sequences, or sequences off) leaves no
 * block behind: a client sending starts with new ids to a full server
 * does not grow it. */
START_TEST(refused_starts_leave_no_memory)
{
    srv_job *j;
    long before;
    g_s.cfg.max_sequences = 1;
    go(M1, 1, "\"sequence_id\":\"a\",\"sequence_start\":true");
    for (int k = 0; k < 2; k++) {
        j = job(M1, 1, "\"sequence_id\":\"b\",\"sequence_start\":true");
        if (k)
            g_s.cfg.max_sequences = 0;
        before = held;
        submit(j);
        ck_assert_int_eq(j->status, k ? 400 : 503);
        if (FAILING)
            ck_assert_int_eq(held, before);
        job_free(j);
    }
}
END_TEST

/* srv_seq_free frees the tombstones too: with two sequences remembered as
 * gone (ended, deleted) and none live, it frees exactly their two records
 * and the table. */
START_TEST(free_forgets_tombstones)
{
    char owner[SRV_NAME_MAX];
    long before;
    go(M1, 1, "\"sequence_id\":\"x\",\"sequence_start\":true,\"sequence_end\":true");
    go(M1, 1, "\"sequence_id\":\"y\",\"sequence_start\":true");
    ck_assert_int_eq(srv_seq_delete(&g_s, "y", owner), 0);
    says("x", "(ended");
    says("y", "(dropped");
    srv_seq_stop(&g_s);
    uv_run(&g_loop, UV_RUN_DEFAULT);
    before = held;
    srv_seq_free(&g_s);
    if (FAILING)
        ck_assert_int_eq(before - held, 3);
}
END_TEST

/* srv_seq_list counts every live sequence and fills at most cap. */
START_TEST(list_counts_past_cap)
{
    srv_seq_info i[2];
    go(M1, 1, "\"sequence_id\":1,\"sequence_start\":true");
    go(M1, 1, "\"sequence_id\":2,\"sequence_start\":true");
    go(M2, 1, "\"sequence_id\":3,\"sequence_start\":true");
    memset(i, 0, sizeof i);
    ck_assert_uint_eq(srv_seq_list(&g_s, i, 2), 3);
    ck_assert_int_eq(i[0].length, 1);
    ck_assert_int_eq(i[1].length, 1);
    ck_assert_uint_eq(srv_seq_list(&g_s, NULL, 0), 3);
}
END_TEST

/* The server stops with live sequences, an active (unbound) and a waiting
 * step: srv_seq_free gives every page and reference back (teardown checks)
 * and never touches the steps (freed here first: ASan would see it). */
START_TEST(free_with_everything_live)
{
    srv_job *a = job(M1, 2, "\"sequence_id\":\"z\",\"sequence_start\":true");
    srv_job *b = job(M1, 1, "\"sequence_id\":\"z\"");
    go(M2, 9, "\"sequence_id\":\"y\",\"sequence_start\":true");
    go(M1, 2, "\"sequence_id\":\"z\",\"sequence_start\":true");
    submit(a);
    submit(b);
    ck_assert_int_eq(a->queued, 1);
    ck_assert_int_eq(b->st.where, SRV_STEP_WAITING);
    job_free(a), job_free(b);
}
END_TEST

static Suite *seq_drops_suite(void)
{
    Suite *s = suite_create("seq_drops");
    TCase *tc = tcase_create("seq_drops");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, delete_now_or_after_the_running_step);
    tcase_add_test(tc, delete_during_a_restart);
    tcase_add_test(tc, gone_sequences_are_remembered);
    tcase_add_test(tc, unload_and_reload);
    tcase_add_test(tc, idle_drop);
    tcase_add_test(tc, expire_fails_held_and_waiting);
    tcase_add_test(tc, expected_next_steps);
    tcase_add_test(tc, tombstones_kept_up_to_the_cap_and_the_idle_time);
    tcase_add_test(tc, unload_keeps_at_most_max_sequences_tombstones);
    tcase_add_test(tc, being_dropped_says_why);
    tcase_add_test(tc, list_during_a_rewinding_step);
    tcase_add_test(tc, refused_starts_leave_no_memory);
    tcase_add_test(tc, free_forgets_tombstones);
    tcase_add_test(tc, list_counts_past_cap);
    tcase_add_test(tc, free_with_everything_live);
    suite_add_tcase(s, tc);
    return s;
}

TU_MAIN(seq_drops_suite)
