/*
 * fuzz_st.c - libFuzzer harness: the safetensors header and layout checks
 * (core/st.c st_parse) on arbitrary bytes (make fuzz-long).
 * Beyond "no crash, no leak, no UB": a failed parse gives a message and no
 * file; a parsed file's tensors lie inside it and convert to F32.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/st.h"
#include "core/json_mem.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static int json_ready;
    if (!json_ready) { /* jansson through core/json_mem.c, as attnd runs it */
        json_ready = 1;
        attn_json_init();
    }
    st_file *f = NULL;
    char err[512] = "";
    int rc = st_parse(&f, data, size, "fuzz.safetensors", err);
    if (rc < 0) {
        if (f || !err[0])
            abort();
        return 0;
    }
    for (size_t i = 0; i < st_count(f); i++) {
        const st_tensor *t = st_tensor_at(f, i);
        char shape[256];
        st_shape_str(t, shape, sizeof shape);
        if (st_find(f, t->name) != t || t->end < t->begin ||
            t->data + (t->end - t->begin) > data + size || t->data < data)
            abort();
        if (t->count <= (1u << 14)) {
            float *dst = malloc((size_t)t->count * sizeof(float) + 4);
            if (dst) {
                st_to_f32(t, dst);
                free(dst);
            }
        }
    }
    for (size_t i = 0; i < st_meta_count(f); i++) {
        const char *k, *v;
        if (st_meta_at(f, i, &k, &v) == 0 && st_meta(f, k) == NULL)
            abort();
    }
    st_close(f);
    return 0;
}
