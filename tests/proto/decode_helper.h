/* decode_helper.h - what tests/proto/test_decode*.c share: JSON written
 * with ' for ", and a suite that runs its cases twice, the second time
 * with every skeleton through jansson (jtree.c's slow way): the one pass
 * must read what jansson reads. */
#ifndef ATTND_TESTS_DECODE_HELPER_H
#define ATTND_TESTS_DECODE_HELPER_H

#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "proto/oip.h"
#include "proto/oip_internal.h"

/* Test JSON is written with ' for " to stay readable. */
static inline char *q(const char *s)
{
    char *t = strdup(s);
    for (char *p = t; *p; p++)
        if (*p == '\'')
            *p = '"';
    return t;
}

static inline int dec_lim(oip_request *r, const char *s, const oip_limits *lim,
                   char *err)
{
    char *t = q(s);
    int rc = oip_decode(r, t, strlen(t), 0, lim, err);
    free(t);
    return rc;
}

#define X2 "{'name':'x','datatype':'FP32','shape':[2],'data':[1,2]}"
#define X2B "{'name':'y','datatype':'FP32','shape':[2],'data':[3,4]}"

static inline void decode_slow_on(void) { oip__jtree_slow = 1; }
static inline void decode_slow_off(void) { oip__jtree_slow = 0; }

/* decode_suite_twice: suite name whose cases (add) run as they are, then
 * through jansson. */
static inline Suite *decode_suite_twice(const char *name, void (*add)(TCase *))
{
    Suite *s = suite_create(name);
    TCase *tc = tcase_create(name);
    TCase *slow = tcase_create("through jansson");
    add(tc);
    tcase_add_checked_fixture(slow, decode_slow_on, decode_slow_off);
    add(slow);
    suite_add_tcase(s, tc);
    suite_add_tcase(s, slow);
    return s;
}

#endif
