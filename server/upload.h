/*
 * upload.h - a model uploaded in a load request, written to the repository
 * atomically. Pool-thread functions: no libuv, no shared state.
 */
#ifndef ATTND_UPLOAD_H
#define ATTND_UPLOAD_H

#include <stddef.h>

#include "core/model.h"

/* srv_upload_is_plain: 1 when body is a load request without files or
 * config ({} or parameters without "config"/"file:..."), i.e. "load the
 * folder". 0 otherwise (including bodies that are not JSON or hold a key
 * twice: those fail in srv_upload_install with a message). */
int srv_upload_is_plain(const char *body, size_t len);

/* An upload's files, decoded from a load request body. */
typedef struct srv_upload {
    char *config;      /* config.json text (malloc'd, NUL-ended), or NULL */
    size_t config_len;
    unsigned char *st; /* model.safetensors bytes (malloc'd) */
    size_t st_len;
} srv_upload;

/* srv_upload_parse: parameters.config (a JSON string holding a JSON
 * object, optional) and parameters["file:model.safetensors"] (base64,
 * required) of a load request body into u. Returns 0, or 400 (503 when
 * out of memory) with err naming the parameter, or a key given twice (u
 * is then empty). Free with srv_upload_free. */
int srv_upload_parse(srv_upload *u, const char *body, size_t len, char *err,
                     size_t errlen);
void srv_upload_free(srv_upload *u);

/* The staging area inside the repository, "<repo>/.attnd-staging": a name
 * starting with '.' is never a model. Stage folders are <name>~<pid>~<n>. */
#define SRV_STAGING_DIR ".attnd-staging"
#define SRV_UPLOAD_NAME_MAX 128

/*
 * srv_upload_install: decode a load request carrying parameters.config (a
 * JSON string, optional) and parameters["file:model.safetensors"] (base64),
 * write the files into a folder of the staging area (each fsync'd), load
 * and validate it there, then publish it as repo/name in one rename (an
 * atomic exchange when repo/name exists) and fsync the repository: the
 * name shows the old or the new model, complete, whatever crashes or
 * concurrent uploads happen. On success *out is the loaded model.
 * Returns 0, or the HTTP status with err naming why: 400 (the request, the
 * parameter named), 503 (the host: memory, descriptors, the repository's
 * disk, a file or the folder that cannot be synced; *lasting when it is
 * the disk's state, full or read-only, which a retry does not change until
 * someone acts). On success err is "", or a note for the log when the
 * repository could not be synced after the publish (the model is in; a
 * crash of the host may lose it).
 */
int srv_upload_install(const char *repo, const char *name, const char *body,
                       size_t len, model **out, int *lasting, char *err,
                       size_t errlen);

/*
 * srv_upload_sweep: at start-up, remove what interrupted uploads left: the
 * staging area's folders whose process is gone (and attnd 0.1.0's
 * "<repo>/.upload-*" folders); a folder set aside by a two-rename publish
 * goes back to its name if that is empty. Returns how many it found, with
 * a line for the log in note ("" when none) that says how many it could
 * not remove (a read-only repository) and why.
 */
int srv_upload_sweep(const char *repo, char *note, size_t notelen);

#endif
