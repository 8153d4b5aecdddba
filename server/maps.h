/*
 * maps.h - the hook between the infer path and the retained-maps store
 * (the `attention_maps` extension; implemented in server/maps.c by the web
 * part, together with its GET /v2/maps... routes in routes.c).
 *
 * The infer path calls maps_put() after computing a request that set
 * parameters.retain = true, on a pool thread, concurrently with other
 * requests: the store must lock. Until maps.c exists the symbol is weak
 * (see infer.c) and a retain request answers 400; once maps.c is linked
 * (its route handlers pull it out of libattnd.a) the hook is live.
 */
#ifndef ATTND_MAPS_H
#define ATTND_MAPS_H

#include <stddef.h>

#define MAPS_ID_MAX 64

/*
 * maps_put: keep a copy of attention (b, h, t, s) row-major FP32 softmax
 * weights of model, with tokens (n_tokens labels, or NULL/0) for the page.
 * The store copies what it keeps; the caller's buffers stay the caller's.
 * Writes the new map's id (NUL-terminated, < MAPS_ID_MAX bytes) into id.
 * Returns 0, or a negative code with a message in err (512 bytes), e.g.
 * when the map alone is larger than the store. Any thread.
 */
int maps_put(const char *model, const float *attention, int b, int h, int t,
             int s, const char *const *tokens, int n_tokens, char *id,
             char *err);

#endif
