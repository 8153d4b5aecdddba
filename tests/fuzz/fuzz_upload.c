/*
 * fuzz_upload.c - libFuzzer harness: a model upload's load request body
 * (server/upload.c srv_upload_parse: JSON, parameters.config, base64
 * weights), then the model it carries validated in memory as the upload
 * path does on disk (model_load_mem). make fuzz-long.
 * Beyond "no crash, no leak, no UB": a failure leaves nothing and names a
 * parameter; a parsed upload has weights.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/model.h"
#include "server/upload.h"
#include "core/json_mem.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static int json_ready;
    if (!json_ready) { /* jansson through core/json_mem.c, as attnd runs it */
        json_ready = 1;
        attn_json_init();
    }
    srv_upload u;
    char err[512] = "";
    model *m = NULL;
    int rc = srv_upload_parse(&u, (const char *)data, size, err, sizeof err);
    if (rc) {
        if (rc != 400 || u.st || u.config || !err[0])
            abort();
        (void)srv_upload_is_plain((const char *)data, size);
        return 0;
    }
    if (!u.st)
        abort();
    if (model_load_mem(&m, "upload", u.config, u.config_len, u.st, u.st_len,
                       err) == 0)
        model_destroy(m);
    else if (m || !err[0])
        abort();
    srv_upload_free(&u);
    return 0;
}
