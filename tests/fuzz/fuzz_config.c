/*
 * fuzz_config.c - libFuzzer harness: config.json (core/model_cfg.c) as
 * model_load_mem reads it, beside a fixed valid weight file (the tiny test
 * fixture, read once at start; FUZZ_ST overrides its path). make fuzz-long.
 * Beyond "no crash, no leak, no UB": a failure leaves no model and gives a
 * message; a loaded model has a consistent configuration.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/model.h"
#include "core/json_mem.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static unsigned char *st;
static size_t st_len;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    const char *p = getenv("FUZZ_ST");
    FILE *f;
    long n;
    (void)argc;
    (void)argv;
    if (!p)
        p = "tests/server/fixtures/models/tiny/model.safetensors";
    f = fopen(p, "rb");
    if (!f) {
        fprintf(stderr, "fuzz_config: %s: cannot open (run from the repository "
                        "root, or set FUZZ_ST)\n", p);
        exit(2);
    }
    fseek(f, 0, SEEK_END);
    n = ftell(f);
    rewind(f);
    st = malloc((size_t)n);
    st_len = fread(st, 1, (size_t)n, f);
    fclose(f);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static int json_ready;
    if (!json_ready) { /* jansson through core/json_mem.c, as attnd runs it */
        json_ready = 1;
        attn_json_init();
    }
    model *m = NULL;
    char err[ATTN_ERRMAX] = "";
    int rc = model_load_mem(&m, "fuzz", (const char *)data, size, st, st_len, err);
    if (rc < 0) {
        if (m || !err[0])
            abort();
        return 0;
    }
    {
        const attn_config *c = model_config(m);
        char line[256];
        if (c->n_heads < 1 || c->n_kv_heads < 1 || c->n_heads % c->n_kv_heads ||
            c->head_dim < 1 || c->d_model < 1)
            abort();
        model_summary(m, line, sizeof line);
    }
    model_destroy(m);
    return 0;
}
