/*
 * rowops.c - the element-wise row operations of the softmax (max, exp and
 * sum), with an AVX2+FMA version chosen at run time when the CPU has it
 * and a portable one otherwise. The build targets baseline x86-64 (or any
 * other CPU); only these two functions are compiled for AVX2.
 */
#include "kernel.h"

#include <math.h>

#if defined(__x86_64__) && defined(__GNUC__)
#define HAVE_AVX2_PATH 1
#include <immintrin.h>
#endif

static float max_portable(const float *x, int n)
{
    float m = -INFINITY;
    for (int j = 0; j < n; j++)
        m = x[j] > m ? x[j] : m;
    return m;
}

static float expsum_portable(float *x, int n, float m)
{
    float s = 0.0f;
    for (int j = 0; j < n; j++) {
        float e = expf(x[j] - m); /* -inf -> exactly 0 */
        x[j] = e;
        s += e;
    }
    return s;
}

#ifdef HAVE_AVX2_PATH
__attribute__((target("avx2,fma"))) static float max_avx2(const float *x, int n)
{
    __m256 m = _mm256_set1_ps(-INFINITY);
    int j = 0;
    for (; j + 8 <= n; j += 8)
        m = _mm256_max_ps(m, _mm256_loadu_ps(x + j));
    __m128 h =
        _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    h = _mm_max_ps(h, _mm_movehl_ps(h, h));
    h = _mm_max_ss(h, _mm_shuffle_ps(h, h, 1));
    float r = _mm_cvtss_f32(h);
    for (; j < n; j++)
        r = x[j] > r ? x[j] : r;
    return r;
}

/* exp on 8 lanes: 2^k * p(r), k = round(x log2 e), r = x - k ln 2 (in two
 * parts), p the degree-6 Cephes expf polynomial (about 2 ulp). Lanes below
 * -87.3 (and -inf) give exactly 0; x <= 0 here, so no overflow. */
__attribute__((target("avx2,fma"), always_inline)) static inline __m256
exp8(__m256 x)
{
    const __m256 lo = _mm256_set1_ps(-87.33654f);
    __m256 zero_mask = _mm256_cmp_ps(x, lo, _CMP_LT_OQ);
    x = _mm256_max_ps(x, lo);
    __m256 k =
        _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(k, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(k, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.9875691500e-4f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
    p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r),
                        _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    __m256i e = _mm256_slli_epi32(
        _mm256_add_epi32(_mm256_cvtps_epi32(k), _mm256_set1_epi32(127)), 23);
    __m256 y = _mm256_mul_ps(p, _mm256_castsi256_ps(e));
    return _mm256_andnot_ps(zero_mask, y);
}

__attribute__((target("avx2,fma"))) static float expsum_avx2(float *x, int n,
                                                             float m)
{
    __m256 vm = _mm256_set1_ps(m), s = _mm256_setzero_ps();
    int j = 0;
    for (; j + 8 <= n; j += 8) {
        __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(x + j), vm));
        _mm256_storeu_ps(x + j, e);
        s = _mm256_add_ps(s, e);
    }
    if (j < n) { /* tail through the same exp, so all lanes agree */
        float buf[8];
        int k = n - j;
        for (int i = 0; i < 8; i++)
            buf[i] = i < k ? x[j + i] - m : -INFINITY;
        __m256 e = exp8(_mm256_loadu_ps(buf));
        _mm256_storeu_ps(buf, e);
        for (int i = 0; i < k; i++)
            x[j + i] = buf[i];
        s = _mm256_add_ps(s, e);
    }
    __m128 h =
        _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
    h = _mm_add_ps(h, _mm_movehl_ps(h, h));
    h = _mm_add_ss(h, _mm_shuffle_ps(h, h, 1));
    return _mm_cvtss_f32(h);
}

static int g_off; /* tests: attn__avx2_off() */

int attn__have_avx2_fma(void)
{
    static int v = -1; /* every thread computes the same value */
    if (__atomic_load_n(&g_off, __ATOMIC_RELAXED))
        return 0;
    int r = __atomic_load_n(&v, __ATOMIC_RELAXED);
    if (r < 0) {
        __builtin_cpu_init();
        r = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
        __atomic_store_n(&v, r, __ATOMIC_RELAXED);
    }
    return r;
}
#else
int attn__have_avx2_fma(void)
{
    return 0;
}
#endif

void attn__avx2_off(int on)
{
#ifdef HAVE_AVX2_PATH
    __atomic_store_n(&g_off, on, __ATOMIC_RELAXED);
#else
    (void)on;
#endif
}

float attn__row_max(const float *x, int n)
{
#ifdef HAVE_AVX2_PATH
    if (attn__have_avx2_fma())
        return max_avx2(x, n);
#endif
    return max_portable(x, n);
}

float attn__row_expsum(float *x, int n, float m)
{
#ifdef HAVE_AVX2_PATH
    if (attn__have_avx2_fma())
        return expsum_avx2(x, n, m);
#endif
    return expsum_portable(x, n, m);
}
