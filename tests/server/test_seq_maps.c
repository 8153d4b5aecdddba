/*
 * test_seq_maps.c - the server's sequence table (server/seq.c) on its
 * own: a retained sequence's map, as srv_seq_encode starts and grows it
 * (its parameters, its scores), and the map that ends when it can no
 * longer grow. The rest is test_seq.c and test_seq_drops.c; all share
 * seq_fixture.h (the stand-ins, the models, the helpers).
 */
#include "tests/server/seq_fixture.h"

#include "server/maps_int.h"

/* ---- the retained map ---------------------------------------------------- */

/* g_extra: the answer parameters srv_seq_encode gave keep_extra, its
 * encoder (the outputs themselves are not encoded here). */
static char g_extra[256];
static int g_n_outs; /* and how many outputs it was given */

static int keep_extra(const char *name, const char *id, const oip_output *o,
                      int n, const char *extra, char **body, size_t *len,
                      size_t *header_len, char *err)
{
    (void)name, (void)id, (void)o, (void)err;
    snprintf(g_extra, sizeof g_extra, "%s", extra ? extra : "");
    g_n_outs = n;
    *body = NULL;
    *len = *header_len = 0;
    return 0;
}

/* no_map: the parameters of an answer at len tokens without a map: its
 * length and its K/V bytes (the fixture's pools: 4-token pages). */
static const char *no_map(int len)
{
    static char want[128];
    snprintf(want, sizeof want, "{\"sequence_length\":%d,\"sequence_bytes\":%zu}",
             len, (size_t)(len + 3) / 4 * attn_kv_page_bytes(g_inst[0].kv_pool));
    return want;
}

/* encode: j, launched, computed (its outputs zeros) and encoded as the
 * pool does: its map started or grown; g_extra holds its parameters. */
static void encode(srv_job *j)
{
    char err[OIP_ERRMAX], *body;
    size_t len, hl;
    int s = j->st.t0 + j->st.t;
    memset(j->prep.out[SRV_O_Y], 0, (size_t)j->st.t * 8 * sizeof(float));
    if (j->prep.out[SRV_O_ATT])
        memset(j->prep.out[SRV_O_ATT], 0, 2 * (size_t)j->st.t * (size_t)s * sizeof(float));
    if (j->prep.out[SRV_O_SCORES])
        memset(j->prep.out[SRV_O_SCORES], 0, 2 * (size_t)j->st.t * (size_t)s * sizeof(float));
    ck_assert_int_eq(srv_seq_encode(&j->st, "m1", g_s.maps, keep_extra, &body,
                                    &len, &hl, err), 0);
}

/* A retained sequence's map that can no longer grow ends. With maps-bytes
 * room for a map of 4 tokens but not 5 (2 heads: 8 T^2 bytes of weights,
 * 4 T of row ends, the entry and its 2 lengths: 152 + entry at 4 tokens,
 * 228 + entry at 5), the step to 5 answers without map_id; if it fails the
 * map stays as it was (4 rows, listed); answered, the map leaves the store
 * (its readers and waiters get 404) and the listing no longer names it.
 * The sequence goes on without one. */
START_TEST(map_that_cannot_grow_ends)
{
    srv_job *a, *b, *c, *d, *e;
    srv_seq_info i;
    maps_info mi;
    char id[MAPS_ID_MAX];
    maps_store_destroy(g_s.maps);
    ck_assert_int_eq(maps_store_create(&g_s.maps, 200 + sizeof(maps__entry)), 0);
    a = job(M1, 3, "\"sequence_id\":\"g\",\"sequence_start\":true,\"retain\":true");
    submit(a);
    ck_assert_int_eq(launch(a), 0);
    encode(a);
    ck_assert_ptr_nonnull(strstr(g_extra, "\"map_id\":\"m1-"));
    snprintf(id, sizeof id, "%s", a->st.map_id);
    end(a, 1);
    b = job(M1, 1, "\"sequence_id\":\"g\"");
    submit(b);
    ck_assert_int_eq(launch(b), 0);
    encode(b);
    ck_assert_ptr_nonnull(strstr(g_extra, id));
    end(b, 1);
    ck_assert_int_eq(maps_info_get(g_s.maps, id, &mi), 0);
    ck_assert_int_eq(mi.t, 4);
    /* 5 tokens do not fit: no map_id; the step fails, the map stays */
    c = job(M1, 1, "\"sequence_id\":\"g\"");
    submit(c);
    ck_assert_int_eq(launch(c), 0);
    encode(c);
    ck_assert_str_eq(g_extra, no_map(5));
    end(c, 0);
    ck_assert_int_eq(maps_info_get(g_s.maps, id, &mi), 0);
    ck_assert_int_eq(mi.t, 4);
    ck_assert_int_eq(info("g", &i), 1);
    ck_assert_str_eq(i.map_id, id);
    /* sent again and answered: the map ends */
    d = job(M1, 1, "\"sequence_id\":\"g\"");
    submit(d);
    ck_assert_int_eq(launch(d), 0);
    encode(d);
    ck_assert_str_eq(g_extra, no_map(5));
    end(d, 1);
    ck_assert_int_eq(maps_info_get(g_s.maps, id, &mi), ATTN_ENOTFOUND);
    ck_assert_int_eq(info("g", &i), 1);
    ck_assert_str_eq(i.map_id, "");
    ck_assert_int_eq(i.length, 5);
    ck_assert_uint_eq(i.bytes, 2 * attn_kv_page_bytes(g_inst[0].kv_pool));
    /* and goes on without one (no attention: nobody asked for it) */
    e = job(M1, 1, "\"sequence_id\":\"g\"");
    submit(e);
    ck_assert_str_eq(e->st.map_id, "");
    ck_assert_int_eq(launch(e), 0);
    ck_assert_ptr_null(e->prep.out[SRV_O_ATT]);
    encode(e);
    ck_assert_str_eq(g_extra, no_map(6));
    end(e, 1);
    ck_assert_int_eq(length("g"), 6);
    job_free(a), job_free(b), job_free(c), job_free(d), job_free(e);
}
END_TEST

/* A start that retains and asks for scores keeps them in its map, and its
 * later steps compute them for the map (allocated at bind, counted in
 * the map's bytes) even when they ask only for y, which is all they
 * answer. A start that retains without scores keeps none: its steps
 * compute none for the map. */
START_TEST(map_keeps_scores)
{
    srv_job *a, *b, *c, *d;
    maps_info mi;
    char id[MAPS_ID_MAX];
    a = jobo(M1, 2, "[{\"name\":\"y\"},{\"name\":\"scores\"}]",
             "\"sequence_id\":\"sc\",\"sequence_start\":true,\"retain\":true");
    submit(a);
    ck_assert_int_eq(launch(a), 0);
    encode(a);
    ck_assert_int_eq(g_n_outs, 2);
    snprintf(id, sizeof id, "%s", a->st.map_id);
    end(a, 1);
    ck_assert_int_eq(maps_info_get(g_s.maps, id, &mi), 0);
    ck_assert_int_eq(mi.has_scores, 1);
    b = job(M1, 1, "\"sequence_id\":\"sc\"");
    submit(b);
    ck_assert_int_eq(launch(b), 0);
    ck_assert_ptr_nonnull(b->prep.out[SRV_O_SCORES]);
    /* weights and scores of 2 heads x 3 x 3, and 3 row ends */
    ck_assert_uint_eq(srv_seq_map_bytes(&b->st), 2 * 2 * 9 * sizeof(float) +
                                                     3 * sizeof(int32_t));
    encode(b);
    ck_assert_int_eq(g_n_outs, 1); /* y */
    ck_assert_ptr_nonnull(strstr(g_extra, id));
    end(b, 1);
    ck_assert_int_eq(maps_info_get(g_s.maps, id, &mi), 0);
    ck_assert_int_eq(mi.t, 3);
    ck_assert_int_eq(mi.has_scores, 1);

    c = job(M1, 2, "\"sequence_id\":\"nsc\",\"sequence_start\":true,"
                   "\"retain\":true");
    submit(c);
    ck_assert_int_eq(launch(c), 0);
    ck_assert_ptr_null(c->prep.out[SRV_O_SCORES]);
    encode(c);
    snprintf(id, sizeof id, "%s", c->st.map_id);
    end(c, 1);
    d = job(M1, 1, "\"sequence_id\":\"nsc\"");
    submit(d);
    ck_assert_int_eq(launch(d), 0);
    ck_assert_ptr_null(d->prep.out[SRV_O_SCORES]);
    encode(d);
    end(d, 1);
    ck_assert_int_eq(maps_info_get(g_s.maps, id, &mi), 0);
    ck_assert_int_eq(mi.t, 3);
    ck_assert_int_eq(mi.has_scores, 0);
    job_free(a), job_free(b), job_free(c), job_free(d);
}
END_TEST

static Suite *seq_maps_suite(void)
{
    Suite *s = suite_create("seq_maps");
    TCase *tc = tcase_create("seq_maps");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, map_that_cannot_grow_ends);
    tcase_add_test(tc, map_keeps_scores);
    suite_add_tcase(s, tc);
    return s;
}

TU_MAIN(seq_maps_suite)
