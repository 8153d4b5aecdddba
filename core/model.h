/*
 * model.h - a weight set loaded from a model folder of the repository:
 *   <repo>/<name>/model.safetensors  (+ optional <repo>/<name>/config.json)
 *
 * Tensor names are detected (canonical W_q..., PyTorch nn.MultiheadAttention
 * state dict, q_proj/k_proj/v_proj/o_proj under a prefix), converted once to
 * F32 in the seeds' orientation into one slab the model owns. config.json (or
 * the safetensors __metadata__) gives n_heads and the optional keys; what the
 * shapes determine is inferred and cross-checked.
 *
 * A loaded model is read-only and may be shared by any number of threads.
 */
#ifndef ATTN_MODEL_H
#define ATTN_MODEL_H

#include <stdio.h>

#include "attn.h"

typedef struct model model; /* opaque */

/* model_load: load the folder dir (e.g. "models/demo"). 0, or a negative
 * ATTN_E* code with a message in err (ATTN_ERRMAX bytes) naming the file, the
 * tensor or key, and the rule broken. Nothing is allocated on failure. */
int model_load(model **out, const char *dir, char *err);
void model_destroy(model *m);

const attn_config *model_config(const model *m);
const attn_weights *model_weights(const model *m);
int model_causal(const model *m);             /* default for requests */
const char *model_description(const model *m); /* "" when none */
size_t model_bytes(const model *m);           /* F32 weight bytes held */

/* model_name_valid: 1 when name is a safe folder name: 1..128 chars of
 * [A-Za-z0-9._-], not "." and no "..". */
int model_name_valid(const char *name);

/* model_check_repo: validate every model folder under repo, print one line
 * per model to out ("<name>: ok (...)" or "<name>: <reason>"). Returns the
 * number of broken models, or a negative code if repo cannot be read. */
int model_check_repo(const char *repo, FILE *out);

#endif
