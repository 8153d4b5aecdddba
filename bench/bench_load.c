/*
 * bench_load.c - how fast model_load turns a safetensors file into F32
 * weights, against its peer: read() of the same file into memory (the floor
 * for getting the bytes at all; page cache warm for both).
 *
 *   build/default/bench/bench_load [--mb N] [--reps R] [--dir DIR]
 *
 * Writes four model folders of about N MB of F32 weights (default 100:
 * d_model 2560, 20 heads of 128) under DIR (default $TMPDIR or /tmp),
 * times the best of R loads of each (after one warm-up) and removes them:
 *   canonical F32   no transposition: a copy
 *   mha F32         in_proj_weight (3D, D) split and transposed
 *   q_proj F16      transposed and converted from half precision
 *   q_proj BF16     transposed and converted from bfloat16
 * Prints load ms, MB/s of file bytes, the ratio to read(), and peak RSS.
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/attn.h"
#include "core/model.h"

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* f32 -> f16 bits (round to nearest even; values here are small normals) */
static unsigned short to_f16(float f)
{
    unsigned int b;
    memcpy(&b, &f, 4);
    unsigned int s = (b >> 16) & 0x8000u;
    int e = (int)((b >> 23) & 0xff) - 127 + 15;
    unsigned int m = b & 0x7fffffu;
    if (e <= 0)
        return (unsigned short)s;
    unsigned int h = s | ((unsigned)e << 10) | (m >> 13);
    unsigned int rest = m & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (h & 1)))
        h++;
    return (unsigned short)h;
}

static unsigned short to_bf16(float f)
{
    unsigned int b;
    memcpy(&b, &f, 4);
    return (unsigned short)((b + 0x7fffu + ((b >> 16) & 1)) >> 16);
}

typedef struct tdesc {
    const char *name;
    long rows, cols;
} tdesc;

/* write_model: dir/model.safetensors with the tensors in td (values from a
 * fixed pattern) in dtype ("F32", "F16", "BF16"), and dir/config.json. */
static int write_model(const char *dir, const tdesc *td, int n,
                       const char *dtype, int heads)
{
    char p[4400], hdr[4096];
    size_t es = strcmp(dtype, "F32") == 0 ? 4 : 2, at = 0;
    int h = snprintf(hdr, sizeof hdr, "{");
    for (int i = 0; i < n; i++) {
        size_t bytes = (size_t)td[i].rows * (size_t)td[i].cols * es;
        h += snprintf(hdr + h, sizeof hdr - (size_t)h,
                      "%s\"%s\":{\"dtype\":\"%s\",\"shape\":[%ld,%ld],"
                      "\"data_offsets\":[%zu,%zu]}",
                      i ? "," : "", td[i].name, dtype, td[i].rows,
                      td[i].cols, at, at + bytes);
        at += bytes;
    }
    h += snprintf(hdr + h, sizeof hdr - (size_t)h, "}");
    while (h % 8)
        hdr[h++] = ' ';
    mkdir(dir, 0755);
    snprintf(p, sizeof p, "%s/config.json", dir);
    FILE *fp = fopen(p, "w");
    if (!fp)
        return -1;
    fprintf(fp, "{\"n_heads\": %d}\n", heads);
    fclose(fp);
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    if (!(fp = fopen(p, "wb")))
        return -1;
    unsigned long long len = (unsigned long long)h;
    unsigned char l8[8];
    for (int i = 0; i < 8; i++)
        l8[i] = (unsigned char)(len >> (8 * i));
    fwrite(l8, 1, 8, fp);
    fwrite(hdr, 1, (size_t)h, fp);
    enum { CHUNK = 1 << 16 };
    static float fbuf[CHUNK];
    static unsigned short hbuf[CHUNK];
    for (int i = 0; i < n; i++) {
        size_t cnt = (size_t)td[i].rows * (size_t)td[i].cols;
        for (size_t done = 0; done < cnt; done += CHUNK) {
            size_t k = cnt - done < CHUNK ? cnt - done : CHUNK;
            for (size_t j = 0; j < k; j++)
                fbuf[j] = (float)((done + j) % 2003) / 2003.0f - 0.5f;
            if (es == 4) {
                fwrite(fbuf, 4, k, fp);
            } else {
                for (size_t j = 0; j < k; j++)
                    hbuf[j] = dtype[0] == 'F' ? to_f16(fbuf[j])
                                              : to_bf16(fbuf[j]);
                fwrite(hbuf, 2, k, fp);
            }
        }
    }
    return fclose(fp) == 0 ? 0 : -1;
}

/* read_all: the peer; the file into a malloc'd buffer with read(). */
static double read_all(const char *path, size_t *bytes)
{
    double t0 = now_ms();
    int fd = open(path, O_RDONLY);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) < 0)
        return -1;
    char *b = malloc((size_t)st.st_size);
    size_t got = 0;
    while (b && got < (size_t)st.st_size) {
        ssize_t r = read(fd, b + got, (size_t)st.st_size - got);
        if (r <= 0)
            break;
        got += (size_t)r;
    }
    close(fd);
    double t = now_ms() - t0;
    volatile char sink = b ? b[got / 2] : 0;
    (void)sink;
    free(b);
    *bytes = got;
    return t;
}

static void rm_model(const char *dir)
{
    char p[4400];
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    unlink(p);
    snprintf(p, sizeof p, "%s/config.json", dir);
    unlink(p);
    rmdir(dir);
}

int main(int argc, char **argv)
{
    long mb = 100;
    int reps = 3;
    const char *base = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--mb") == 0 && i + 1 < argc)
            mb = atol(argv[++i]);
        else if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc)
            reps = atoi(argv[++i]);
        else if (strcmp(argv[i], "--dir") == 0 && i + 1 < argc)
            base = argv[++i];
        else {
            fprintf(stderr,
                    "usage: %s [--mb N (1-2000)] [--reps R (1-20)] "
                    "[--dir DIR]\n",
                    argv[0]);
            return 2;
        }
    }
    if (mb < 1 || mb > 2000 || reps < 1 || reps > 20) {
        fprintf(stderr, "bench_load: --mb must be 1-2000, --reps 1-20\n");
        return 2;
    }
    /* 4 D^2 floats = mb MB, D a multiple of 128 */
    long D = (long)(sqrt((double)mb * 1e6 / 16.0) / 128.0 + 0.5) * 128;
    if (D < 128)
        D = 128;
    int H = (int)(D / 128);
    const tdesc canon[] = {{"W_q", D, D}, {"W_k", D, D}, {"W_v", D, D},
                           {"W_o", D, D}};
    const tdesc mha[] = {{"in_proj_weight", 3 * D, D},
                         {"out_proj.weight", D, D}};
    const tdesc qp[] = {{"q_proj.weight", D, D}, {"k_proj.weight", D, D},
                        {"v_proj.weight", D, D}, {"o_proj.weight", D, D}};
    const struct {
        const char *label, *dtype;
        const tdesc *td;
        int n;
    } v[] = {
        {"canonical F32", "F32", canon, 4},
        {"mha F32 (transposed)", "F32", mha, 2},
        {"q_proj F16 (transposed)", "F16", qp, 4},
        {"q_proj BF16 (transposed)", "BF16", qp, 4},
    };
    printf("bench_load: d_model %ld, %d heads, %.1f MB of F32 weights, best "
           "of %d after a warm-up\n",
           D, H, 16.0 * (double)D * (double)D / 1e6, reps);
    for (size_t k = 0; k < sizeof v / sizeof v[0]; k++) {
        char dir[4096], path[4200], err[ATTN_ERRMAX];
        snprintf(dir, sizeof dir, "%s/attnd-bench-load-%d-%zu", base,
                 (int)getpid(), k);
        if (write_model(dir, v[k].td, v[k].n, v[k].dtype, H) < 0) {
            fprintf(stderr, "bench_load: cannot write %s: %s\n", dir,
                    strerror(errno));
            rm_model(dir);
            return 1;
        }
        snprintf(path, sizeof path, "%s/model.safetensors", dir);
        double best = 1e30, peer = 1e30;
        size_t bytes = 0;
        for (int r = 0; r <= reps; r++) {
            double t = read_all(path, &bytes);
            if (r && t < peer)
                peer = t;
            model *m;
            double t0 = now_ms();
            if (model_load(&m, dir, err) < 0) {
                fprintf(stderr, "bench_load: %s\n", err);
                rm_model(dir);
                return 1;
            }
            t = now_ms() - t0;
            model_destroy(m);
            if (r && t < best)
                best = t;
        }
        rm_model(dir);
        double fmb = (double)bytes / 1e6;
        printf("load %-26s %7.1f MB file: %8.1f ms %7.0f MB/s | peer read() "
               "%7.1f ms %7.0f MB/s | ratio %.2fx\n",
               v[k].label, fmb, best, fmb / (best / 1e3), peer,
               fmb / (peer / 1e3), best / peer);
    }
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    printf("peak RSS %.1f MB\n", (double)ru.ru_maxrss / 1024.0);
    return 0;
}
