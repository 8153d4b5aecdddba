/* test_half.c - proto/half.c against numpy/PyTorch bit patterns
 * (tests/proto/half_vectors.h, made by gen_half_vectors.py). */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "proto/oip.h"
#include "half_vectors.h"
#include "bits.h"
#include "tests/check_main.h"

static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 0x100000001b3ULL;
    return h;
}
#define FNV_OFF 0xcbf29ce484222325ULL

START_TEST(fp16_spot_values)
{
    for (size_t i = 0; i < sizeof hv_spot_h / sizeof hv_spot_h[0]; i++)
        ck_assert_msg(fbits(oip_fp16_to_float((uint16_t)hv_spot_h[i][0])) ==
                          hv_spot_h[i][1],
                      "half 0x%04x -> 0x%08x, want 0x%08x", hv_spot_h[i][0],
                      fbits(oip_fp16_to_float((uint16_t)hv_spot_h[i][0])),
                      hv_spot_h[i][1]);
    /* constants known by hand */
    ck_assert(oip_fp16_to_float(0x3c00) == 1.0f);
    ck_assert(oip_fp16_to_float(0xc000) == -2.0f);
    ck_assert(oip_fp16_to_float(0x7bff) == 65504.0f);
    ck_assert(oip_fp16_to_float(0x0001) == ldexpf(1.0f, -24));
    ck_assert(oip_fp16_to_float(0x03ff) == ldexpf(1023.0f, -24));
}
END_TEST

START_TEST(fp16_all_patterns_match_numpy)
{
    uint64_t h = FNV_OFF;
    for (uint32_t i = 0; i < 65536; i++) {
        float f = oip_fp16_to_float((uint16_t)i);
        int is_nan_half = (i & 0x7c00) == 0x7c00 && (i & 0x3ff);
        ck_assert_int_eq(isnan(f) != 0, is_nan_half);
        if (is_nan_half) {
            ck_assert_int_eq(signbit(f) != 0, (i & 0x8000) != 0);
            continue;
        }
        uint32_t u = fbits(f);
        h = fnv(h, &u, 4);
    }
    ck_assert_msg(h == HV_FP16_TO_F32_HASH, "hash %016llx",
                  (unsigned long long)h);
}
END_TEST

START_TEST(bf16_widening)
{
    ck_assert(oip_bf16_to_float(0x3f80) == 1.0f);
    ck_assert(oip_bf16_to_float(0xc049) == bitsf(0xc0490000u));
    ck_assert(oip_bf16_to_float(0x0001) == bitsf(0x00010000u)); /* subnormal */
    ck_assert(isinf(oip_bf16_to_float(0xff80)));
    ck_assert(isnan(oip_bf16_to_float(0x7fc1)));
    ck_assert(signbit(oip_bf16_to_float(0x8000)));
}
END_TEST

START_TEST(narrowing_spot_values)
{
    for (size_t i = 0; i < sizeof hv_spot_f / sizeof hv_spot_f[0]; i++) {
        float f = bitsf(hv_spot_f[i][0]);
        ck_assert_msg(oip_float_to_fp16(f) == hv_spot_f[i][1],
                      "0x%08x -> fp16 0x%04x, want 0x%04x", hv_spot_f[i][0],
                      oip_float_to_fp16(f), hv_spot_f[i][1]);
        ck_assert_msg(oip_float_to_bf16(f) == hv_spot_f[i][2],
                      "0x%08x -> bf16 0x%04x, want 0x%04x", hv_spot_f[i][0],
                      oip_float_to_bf16(f), hv_spot_f[i][2]);
    }
    /* NaN stays NaN */
    ck_assert((oip_float_to_fp16(NAN) & 0x7c00) == 0x7c00 &&
              (oip_float_to_fp16(NAN) & 0x3ff));
    ck_assert((oip_float_to_bf16(NAN) & 0x7f80) == 0x7f80 &&
              (oip_float_to_bf16(NAN) & 0x7f));
}
END_TEST

START_TEST(narrowing_samples_match_numpy_and_torch)
{
    uint64_t h16 = FNV_OFF, hb = FNV_OFF;
    for (uint64_t i = 0; i < HV_SAMPLES; i++) {
        float f = bitsf((uint32_t)(i * 2654435761u));
        if (isnan(f))
            continue;
        uint16_t a = oip_float_to_fp16(f), b = oip_float_to_bf16(f);
        h16 = fnv(h16, &a, 2);
        hb = fnv(hb, &b, 2);
    }
    ck_assert_msg(h16 == HV_F32_TO_FP16_HASH, "fp16 hash %016llx",
                  (unsigned long long)h16);
    ck_assert_msg(hb == HV_F32_TO_BF16_HASH, "bf16 hash %016llx",
                  (unsigned long long)hb);
}
END_TEST

START_TEST(fp16_round_trip_every_finite_half)
{
    for (uint32_t i = 0; i < 65536; i++) {
        if ((i & 0x7c00) == 0x7c00 && (i & 0x3ff))
            continue;
        ck_assert_uint_eq(oip_float_to_fp16(oip_fp16_to_float((uint16_t)i)),
                          i);
    }
}
END_TEST

static Suite *half_suite(void)
{
    Suite *s = suite_create("half");
    TCase *tc = tcase_create("conversions");
    tcase_add_test(tc, fp16_spot_values);
    tcase_add_test(tc, fp16_all_patterns_match_numpy);
    tcase_add_test(tc, bf16_widening);
    tcase_add_test(tc, narrowing_spot_values);
    tcase_add_test(tc, narrowing_samples_match_numpy_and_torch);
    tcase_add_test(tc, fp16_round_trip_every_finite_half);
    suite_add_tcase(s, tc);
    return s;
}

TU_MAIN(half_suite)
