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

#include <dirent.h>
#include <stdio.h>

#include "attn.h"

typedef struct model model; /* opaque */

/* model_load: load the folder dir (e.g. "models/demo"). 0, or a negative
 * ATTN_E* code with a message in err (ATTN_ERRMAX bytes) naming the file, the
 * tensor or key, and the rule broken. Nothing is allocated on failure.
 * Any thread; it reads files (about 0.1 s for 100 MB of weights), so the
 * daemon calls it off its event-loop thread. */
int model_load(model **out, const char *dir, char *err);
void model_destroy(model *m);

const attn_config *model_config(const model *m);
const attn_weights *model_weights(const model *m);
int model_causal(const model *m);             /* default for requests */
const char *model_description(const model *m); /* "" when none */
size_t model_bytes(const model *m);           /* F32 weight bytes held */

/* model_load_mem: the same from memory (a model sent in a load request):
 * config is config_len bytes of config.json text or NULL, st the
 * model.safetensors bytes; both are only read during the call. label names
 * the model in messages ("<label>/config.json: ..."). */
int model_load_mem(model **out, const char *label, const char *config,
                   size_t config_len, const void *st, size_t st_len,
                   char *err);

/* model_load_repo: load <repo>/<name> after checking name with
 * model_name_valid (ATTN_EINVAL otherwise), so no name reaches outside the
 * repository. A repository that is missing, not a folder, or that attnd
 * may not search is named as such, with what to do ("<repo>: cannot read
 * the model repository: Permission denied; give attnd's user ..."), not
 * as a model folder that is not there or cannot be read: ATTN_ENOTFOUND
 * when missing or not a folder (nothing in it to load), else as
 * attn_errno_code (ATTN_EIO for EACCES). */
int model_load_repo(model **out, const char *repo, const char *name,
                    char *err);

/* Which naming layout the file used: "canonical", "nn.MultiheadAttention"
 * or "q_proj". */
const char *model_layout(const model *m);

/* model_summary: one line for humans, e.g. "d_model 64, 4 heads x 16,
 * 4 kv heads, v_head_dim 16, canonical, 64.0 KiB". */
void model_summary(const model *m, char *buf, size_t cap);

/* model_repo_list: the sub-folders of repo (names not starting with '.'),
 * sorted; valid or not (check each with model_name_valid). *names is a
 * malloc'd array of malloc'd strings; free with model_repo_list_free.
 * Returns the count, or a negative code with a message in err saying what
 * to do, codes as model_load_repo's for the repository (a repository
 * attnd may read but not search, mode 0600, is an error, not an empty
 * one; so is a folder whose reading fails part way, not a shorter list).
 * No cap on the count: as many as the folder holds. */
int model_repo_list(const char *repo, char ***names, char *err);
void model_repo_list_free(char **names, int n);

/* model_opendir: opendir(path) by open(2) and fdopendir(3), for threads
 * other than the loop: ThreadSanitizer sees open(2) make a descriptor but
 * not opendir's, nor libuv's syscall(SYS_close) of a socket, so a
 * directory a pool thread opened under a socket's freed number looked to
 * it like one object used by two threads ("data race ... closedir" in
 * `make SANITIZER=thread soak`). NULL with errno set on failure. */
DIR *model_opendir(const char *path);

/* model_name_valid: 1 when name is a safe folder name: 1..128 chars of
 * [A-Za-z0-9._-], not starting with '.' (hidden folders, the upload
 * staging area) and no "..". */
int model_name_valid(const char *name);

/* model_check_repo: validate every model folder under repo (as listed by
 * model_repo_list), print one line per model to out ("<name>: ok (<summary>)"
 * or "<name>: <reason>"). builtin (NULL: none) is the name of a model built
 * into the caller, which a folder cannot take: its folder is not served,
 * and is reported and counted as broken. Returns the number of broken
 * models, or a negative code if repo cannot be read (with a line saying
 * why). */
int model_check_repo(const char *repo, FILE *out, const char *builtin);

#endif
