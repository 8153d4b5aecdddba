/*
 * test_seq_limits.c - the server's sequence table (server/seq.c) on its
 * own: the limits (max-sequences, kv-bytes) and their messages, steps on
 * another model or instance, retain following the start. The rest is
 * test_seq.c, test_seq_maps.c and test_seq_drops.c; all share
 * seq_fixture.h.
 */
#include "tests/server/seq_fixture.h"

/* ---- limits ------------------------------------------------------------ */

/* max-sequences 2 counts live sequences and starts on their way; a restart
 * of a live one is not a new one; a start refused leaves nothing behind. */
START_TEST(max_sequences)
{
    srv_job *b, *c, *d, *r;
    const char *full = "sequences: 2 live or starting (max-sequences 2); end "
                       "some or retry later";
    g_s.cfg.max_sequences = 2;
    go(M1, 1, "\"sequence_id\":\"a\",\"sequence_start\":true");
    b = job(M2, 1, "\"sequence_id\":\"b\",\"sequence_start\":true");
    submit(b);
    ck_assert_int_eq(b->queued, 1); /* starting: counts */
    refused(M1, 1, "\"sequence_id\":\"c\",\"sequence_start\":true", 503, full);
    ck_assert_int_eq(info("c", NULL), 0);
    r = job(M1, 1, "\"sequence_id\":\"a\",\"sequence_start\":true");
    submit(r);
    ck_assert_int_eq(r->queued, 1); /* a restart takes no new place */
    ck_assert_int_eq(run(r, 1), 0);
    ck_assert_int_eq(run(b, 0), 0); /* b fails: its place is free again */
    d = job(M1, 1, "\"sequence_id\":\"d\",\"sequence_start\":true");
    submit(d);
    ck_assert_int_eq(d->queued, 1);
    ck_assert_int_eq(run(d, 1), 0);
    /* a and d are live */
    refused(M1, 1, "\"sequence_id\":\"c\",\"sequence_start\":true", 503, full);
    go(M1, 1, "\"sequence_id\":\"d\",\"sequence_end\":true");
    c = job(M1, 1, "\"sequence_id\":\"c\",\"sequence_start\":true");
    submit(c);
    ck_assert_int_eq(c->queued, 1);
    ck_assert_int_eq(run(c, 1), 0);
    ck_assert_uint_eq(srv_seq_list(&g_s, NULL, 0), 2);

    /* max-sequences 0: sequences are off, and no retry would help: 400 */
    g_s.cfg.max_sequences = 0;
    refused(M2, 1, "\"sequence_id\":\"e\",\"sequence_start\":true", 400,
            "sequences: off (max-sequences 0)");
    job_free(b), job_free(c), job_free(d), job_free(r);
}
END_TEST

/* kv-bytes: a model without a cache refuses starts; a full cache refuses a
 * start that does not fit and keeps the others. */
START_TEST(kv_bytes)
{
    srv_job *b;
    srv_seq_info i;
    M2->inst = &g_inst[3]; /* kv-bytes 0 */
    refused(M2, 1, "\"sequence_id\":1,\"sequence_start\":true", 400,
            "sequences: model 'm2' keeps no K/V cache (kv-bytes 0)");
    ck_assert_int_eq(info("1", NULL), 0);
    M2->inst = &g_inst[1];

    go(M1, 20, "\"sequence_id\":\"big\",\"sequence_start\":true"); /* 5 pages */
    b = job(M1, 13, "\"sequence_id\":\"more\",\"sequence_start\":true");
    submit(b);
    ck_assert_int_eq(launch(b), 503); /* 4 pages: 9 > 8 */
    ck_assert_str_eq(b->msg, "sequences: the K/V cache of model 'm1' is full "
                     "(640 of 1024 bytes, kv-bytes) and cannot take sequence "
                     "'more' from 0 to 13 tokens; end sequences or retry later");
    ck_assert_int_eq(info("more", NULL), 0);
    ck_assert_uint_eq(used(0), 5 * PAGE);
    ck_assert_int_eq(info("big", &i), 1);
    ck_assert_int_eq(i.length, 20);
    /* each model's budget is its own: m2 takes 3 pages, m1 fills up */
    go(M2, 12, "\"sequence_id\":\"more\",\"sequence_start\":true");
    go(M1, 12, "\"sequence_id\":\"big2\",\"sequence_start\":true");
    ck_assert_uint_eq(used(0), BUDGET);
    ck_assert_uint_eq(used(1), 3 * PAGE);
    job_free(b);
}
END_TEST

/* A step past the whole cache says what helps, to its advice's end, with
 * a sequence id of 128 bytes and a model name of 128 (each printed to its
 * first 60 bytes): whole, the two made the message longer than an error's
 * OIP_ERRMAX bytes, and its end was cut off mid-advice. */
START_TEST(whole_cache_advice_fits_long_names)
{
    char id[OIP_MAX_SEQ_ID], p[200], want[OIP_ERRMAX];
    srv_job *b;
    memset(id, 'i', OIP_MAX_SEQ_ID - 1);
    id[OIP_MAX_SEQ_ID - 1] = 0;
    memset(M1->name, 'n', SRV_NAME_MAX - 1);
    M1->name[SRV_NAME_MAX - 1] = 0;
    snprintf(p, sizeof p, "\"sequence_id\":\"%s\",\"sequence_start\":true", id);
    go(M1, 32, p); /* the whole cache: 8 pages */
    snprintf(p, sizeof p, "\"sequence_id\":\"%s\"", id);
    b = job(M1, 1, p);
    submit(b);
    ck_assert_int_eq(launch(b), 400);
    snprintf(want, sizeof want, "sequences: sequence '%.60s' from 32 to 33 "
             "tokens would need 1152 bytes of K/V, more than the whole K/V "
             "cache of model '%.60s' (1024 bytes, kv-bytes: 32 tokens), which "
             "its 32 tokens fill: no retry can take a token more; end it, or "
             "send a step at a sequence_position below 32 to replace tokens "
             "(or raise --kv-bytes)", id, M1->name);
    ck_assert_str_eq(b->msg, want);
    ck_assert_int_eq(length(id), 32);
    job_free(b);
    /* its restart of 33 tokens: its old ones fill the cache, so none fit
     * beside them with sequence_start (it was told "send at most 32") */
    snprintf(p, sizeof p, "\"sequence_id\":\"%s\",\"sequence_start\":true", id);
    b = job(M1, 33, p);
    submit(b);
    ck_assert_int_eq(launch(b), 400);
    snprintf(want, sizeof want, "sequences: the restart of sequence '%.60s' "
             "with 33 tokens exceeds the whole K/V cache of model '%.60s' "
             "(1024 bytes, kv-bytes: 32 tokens): no retry can take it; its "
             "old tokens fill the cache until it is answered: send at most 32 "
             "after DELETE /v2/sequences/{id}, or without sequence_start at "
             "sequence_position 0", id, M1->name);
    ck_assert_str_eq(b->msg, want);
    ck_assert_int_eq(length(id), 32);
    job_free(b);
}
END_TEST

/* ---- wrong model, retain ------------------------------------------------ */

START_TEST(step_on_another_model_or_instance)
{
    srv_job *b, *c;
    go(M1, 2, "\"sequence_id\":\"w\",\"sequence_start\":true");
    refused(M2, 1, "\"sequence_id\":\"w\"", 400, "parameters.sequence_id: "
            "sequence 'w' belongs to model 'm1'; send sequence_start: true to "
            "begin it on 'm2'");
    /* a step holding another instance of m1 than the sequence's */
    b = job(M1, 1, "\"sequence_id\":\"w\"");
    b->st.inst = &g_inst[2];
    submit(b);
    ck_assert_int_eq(b->status, 400);
    ck_assert_str_eq(b->msg, "parameters.sequence_id: sequence 'w' belongs to "
                     "model 'm1' as it was before a reload; send "
                     "sequence_start: true to begin it on 'm1'");
    ck_assert_int_eq(length("w"), 2);
    /* a start on m2 moves it there */
    c = job(M2, 3, "\"sequence_id\":\"w\",\"sequence_start\":true");
    submit(c);
    ck_assert_int_eq(run(c, 1), 0);
    ck_assert_int_eq(g_inst[0].refs, 1);
    ck_assert_int_eq(g_inst[1].refs, 2);
    ck_assert_uint_eq(used(0), 0);
    ck_assert_uint_eq(used(1), PAGE);
    ck_assert_int_eq(M1->seq_stats.live, 0);
    ck_assert_int_eq(M1->seq_stats.dropped[SRV_DROP_RESTARTED], 1);
    ck_assert_int_eq(M2->seq_stats.live, 1);
    ck_assert_int_eq(M2->seq_stats.started, 1);
    ck_assert_int_eq(info("w", NULL), 1);
    job_free(b), job_free(c);
}
END_TEST

/* retain is decided by the start: a retained sequence's steps grow its map
 * (attention allocated even when not asked for); a step asking to retain
 * on a sequence that keeps no map is refused; the listing names the map
 * only while the store holds it (not once other maps evicted it); the map
 * is forgotten with the sequence. */
START_TEST(retain_follows_the_start)
{
    srv_job *a, *b, *c;
    srv_seq_info i;
    float w[2 * 2 * 2] = {0};
    maps_put_args m = {.model = "m1", .b = 1, .h = 2, .t = 2, .s = 2,
                       .attention = w};
    char id[MAPS_ID_MAX];
    go(M1, 2, "\"sequence_id\":\"plain\",\"sequence_start\":true");
    refused(M1, 1, "\"sequence_id\":\"plain\",\"retain\":true", 400,
            "parameters.retain: sequence 'plain' keeps no map (retain is "
            "decided by its sequence_start step)");
    b = job(M1, 1, "\"sequence_id\":\"plain\"");
    submit(b);
    ck_assert_int_eq(launch(b), 0);
    ck_assert_ptr_null(b->prep.out[SRV_O_ATT]); /* nobody wants it */
    end(b, 1);

    a = job(M1, 2, "\"sequence_id\":\"kept\",\"sequence_start\":true,"
                   "\"retain\":true");
    submit(a);
    ck_assert_int_eq(launch(a), 0);
    ck_assert_ptr_nonnull(a->prep.out[SRV_O_ATT]);
    ck_assert_int_eq(maps_put(g_s.maps, &m, id, NULL), 0); /* srv_seq_encode */
    snprintf(a->st.map_id, sizeof a->st.map_id, "%s", id);
    end(a, 1);
    c = job(M1, 1, "\"sequence_id\":\"kept\",\"retain\":true");
    submit(c);
    ck_assert_str_eq(c->st.map_id, id);
    ck_assert_int_eq(launch(c), 0);
    ck_assert_ptr_nonnull(c->prep.out[SRV_O_ATT]);
    end(c, 1);
    ck_assert_int_eq(info("kept", &i), 1);
    ck_assert_str_eq(i.map_id, id);
    maps_drop(g_s.maps, id); /* evicted by other maps */
    ck_assert_int_eq(info("kept", &i), 1);
    ck_assert_str_eq(i.map_id, "");
    go(M1, 1, "\"sequence_id\":\"kept\",\"sequence_end\":true");
    ck_assert_int_eq(info("kept", NULL), 0);
    job_free(a), job_free(b), job_free(c);
}
END_TEST

static Suite *seq_limits_suite(void)
{
    Suite *s = suite_create("seq_limits");
    TCase *tc = tcase_create("seq_limits");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, max_sequences);
    tcase_add_test(tc, kv_bytes);
    tcase_add_test(tc, whole_cache_advice_fits_long_names);
    tcase_add_test(tc, step_on_another_model_or_instance);
    tcase_add_test(tc, retain_follows_the_start);
    suite_add_tcase(s, tc);
    return s;
}

TU_MAIN(seq_limits_suite)
