/*
 * grpc_meta.c - the gRPC methods that read the server and its models:
 * health, metadata and Triton's model configuration. As grpc_rpc.c's,
 * each runs the REST handler of the same operation and reads its JSON
 * answer back into the response message. Loop thread.
 */
#include "server/grpc_rpc_int.h"

#include <stdio.h>
#include <stdlib.h>

/* text: o's string key, or "" (protobuf-c packs no NULL string). */
static char *text(json_t *o, const char *key)
{
    const char *v = json_string_value(json_object_get(o, key));
    return (char *)(v ? v : "");
}

/* start_named: a request of {name = 1, version = 2} (ModelReady,
 * ModelMetadata, ModelConfig) as r's model argument. */
static int start_named(const ProtobufCMessageDescriptor *d, srv_req *r,
                       char *msg, size_t len, int *code, char *err)
{
    ProtobufCMessage *m = srv_grpc__unpack(d, r, msg, len, code, err);
    const ProtobufCFieldDescriptor *name, *version;
    int rc;
    if (!m)
        return -1;
    name = protobuf_c_message_descriptor_get_field(d, 1);
    version = protobuf_c_message_descriptor_get_field(d, 2);
    rc = srv_grpc__model_arg(r, *(char **)((char *)m + name->offset),
                             *(char **)((char *)m + version->offset), code, err);
    protobuf_c_message_free_unpacked(m, &srv_grpc__unpack_al);
    return rc;
}

static int start_model_ready(srv_req *r, char *msg, size_t len, int *code,
                             char *err)
{
    return start_named(&inference__model_ready_request__descriptor, r, msg,
                       len, code, err);
}

static int start_model_meta(srv_req *r, char *msg, size_t len, int *code,
                            char *err)
{
    return start_named(&inference__model_metadata_request__descriptor, r, msg,
                       len, code, err);
}

static int start_model_config(srv_req *r, char *msg, size_t len, int *code,
                              char *err)
{
    return start_named(&inference__model_config_request__descriptor, r, msg,
                       len, code, err);
}

/* ---- health and metadata ------------------------------------------------------ */

static int reply_server_live(srv_req *r, char **out, size_t *len, char *err)
{
    Inference__ServerLiveResponse m = INFERENCE__SERVER_LIVE_RESPONSE__INIT;
    m.live = r->status == 200;
    return srv_grpc__pack(&m.base, out, len, err);
}

/* not ready is an answer (ready false), not an error, as in Triton */
static int reply_server_ready(srv_req *r, char **out, size_t *len, char *err)
{
    Inference__ServerReadyResponse m = INFERENCE__SERVER_READY_RESPONSE__INIT;
    m.ready = r->status == 200;
    return srv_grpc__pack(&m.base, out, len, err);
}

/* ready false for a known model that is loading or unloaded; NOT_FOUND
 * for a name the server does not know */
static int reply_model_ready(srv_req *r, char **out, size_t *len, char *err)
{
    Inference__ModelReadyResponse m = INFERENCE__MODEL_READY_RESPONSE__INIT;
    if (r->status == 404 && !srv_registry_find(r->s, r->arg[0]))
        return srv_grpc__fail(r, err);
    m.ready = r->status == 200;
    return srv_grpc__pack(&m.base, out, len, err);
}

static int reply_server_meta(srv_req *r, char **out, size_t *len, char *err)
{
    Inference__ServerMetadataResponse m = INFERENCE__SERVER_METADATA_RESPONSE__INIT;
    json_t *o, *ext;
    char *names[16];
    size_t i;
    int rc;
    if (!(o = srv_grpc__answer_json(r, &rc, err)))
        return rc;
    m.name = text(o, "name");
    m.version = text(o, "version");
    ext = json_object_get(o, "extensions");
    for (i = 0; i < json_array_size(ext) && i < 16; i++)
        names[i] = (char *)json_string_value(json_array_get(ext, i));
    m.n_extensions = i;
    m.extensions = names;
    rc = srv_grpc__pack(&m.base, out, len, err);
    json_decref(o);
    return rc;
}

/* tensors: REST's list of tensors as messages of d (name 1, datatype 2,
 * dims at dims_field: ModelMetadata's TensorMetadata, ModelConfig's
 * ModelInput and ModelOutput), the datatype under key type_key (a string,
 * or an enum by its name), the dims under dims_key; all in one block *blk
 * (freed by the caller; NULL: out of memory). */
static size_t tensors(json_t *a, const ProtobufCMessageDescriptor *d,
                      const char *type_key, const char *dims_key,
                      unsigned dims_field, void *out, void **blk)
{
    const ProtobufCFieldDescriptor *fn = protobuf_c_message_descriptor_get_field(d, 1);
    const ProtobufCFieldDescriptor *ft = protobuf_c_message_descriptor_get_field(d, 2);
    const ProtobufCFieldDescriptor *fd = protobuf_c_message_descriptor_get_field(d, dims_field);
    size_t n = json_array_size(a), i, j, dims = 0;
    ProtobufCMessage **p;
    int64_t *sh;
    char *t;
    for (i = 0; i < n; i++)
        dims += json_array_size(json_object_get(json_array_get(a, i), dims_key));
    *blk = calloc(1, n * (d->sizeof_message + sizeof *p) + dims * sizeof *sh + 1);
    if (!*blk)
        return 0;
    t = *blk;
    p = (ProtobufCMessage **)(t + n * d->sizeof_message);
    sh = (int64_t *)(p + n);
    for (i = 0; i < n; i++) {
        json_t *e = json_array_get(a, i), *s = json_object_get(e, dims_key);
        char *dt = text(e, type_key), *m = t + i * d->sizeof_message;
        protobuf_c_message_init(d, m);
        *(char **)(m + fn->offset) = text(e, "name");
        if (ft->type == PROTOBUF_C_TYPE_STRING) {
            *(char **)(m + ft->offset) = dt;
        } else { /* an unknown name: 0, TYPE_INVALID */
            const ProtobufCEnumValue *v =
                protobuf_c_enum_descriptor_get_value_by_name(ft->descriptor, dt);
            *(int *)(m + ft->offset) = v ? v->value : 0;
        }
        *(size_t *)(m + fd->quantifier_offset) = json_array_size(s);
        *(int64_t **)(m + fd->offset) = sh;
        for (j = 0; j < json_array_size(s); j++)
            *sh++ = json_integer_value(json_array_get(s, j));
        p[i] = (ProtobufCMessage *)m;
    }
    *(ProtobufCMessage ***)out = p;
    return n;
}

/* pack_blocks: m packed (srv_grpc__pack), or UNAVAILABLE when one of its
 * n blocks could not be allocated; the blocks and o are freed. */
static int pack_blocks(const ProtobufCMessage *m, void **blk, int n, json_t *o,
                       char **out, size_t *len, char *err)
{
    int i, rc = GRPC_OK;
    for (i = 0; i < n; i++)
        if (!blk[i])
            rc = GRPC_UNAVAILABLE;
    if (rc != GRPC_OK)
        snprintf(err, GRPC_ERRMAX, GRPC_OOM_MSG);
    else
        rc = srv_grpc__pack(m, out, len, err);
    for (i = 0; i < n; i++)
        free(blk[i]);
    json_decref(o);
    return rc;
}

static int reply_model_meta(srv_req *r, char **out, size_t *len, char *err)
{
    const ProtobufCMessageDescriptor *d =
        &inference__model_metadata_response__tensor_metadata__descriptor;
    Inference__ModelMetadataResponse m = INFERENCE__MODEL_METADATA_RESPONSE__INIT;
    json_t *o;
    void *blk[2] = {NULL, NULL};
    char *versions[1] = {"1"};
    int rc;
    if (!(o = srv_grpc__answer_json(r, &rc, err)))
        return rc;
    m.name = text(o, "name");
    m.platform = text(o, "platform");
    m.n_versions = 1;
    m.versions = versions;
    m.n_inputs = tensors(json_object_get(o, "inputs"), d, "datatype", "shape",
                         3, &m.inputs, &blk[0]);
    m.n_outputs = tensors(json_object_get(o, "outputs"), d, "datatype", "shape",
                          3, &m.outputs, &blk[1]);
    return pack_blocks(&m.base, blk, 2, o, out, len, err);
}

/* ---- the model configuration ------------------------------------------------------ */

typedef Inference__ModelConfig__ParametersEntry ParamEntry;

/* config_params: REST's {"key": {"string_value": "..."}} as the map's
 * entries, in one block *blk (NULL: out of memory). */
static size_t config_params(json_t *o, ParamEntry ***out, void **blk)
{
    size_t n = json_object_size(o), i = 0;
    ParamEntry *e, **p;
    Inference__ModelParameter *v;
    const char *k;
    json_t *x;
    *blk = calloc(1, n * (sizeof *e + sizeof *p + sizeof *v) + 1);
    if (!*blk)
        return 0;
    e = *blk;
    p = (ParamEntry **)(e + n);
    v = (Inference__ModelParameter *)(p + n);
    json_object_foreach(o, k, x) {
        ParamEntry ie = INFERENCE__MODEL_CONFIG__PARAMETERS_ENTRY__INIT;
        Inference__ModelParameter iv = INFERENCE__MODEL_PARAMETER__INIT;
        iv.string_value = text(x, "string_value");
        v[i] = iv;
        ie.key = (char *)k;
        ie.value = &v[i];
        e[i] = ie;
        p[i] = &e[i];
        i++;
    }
    *out = p;
    return n;
}

/* REST's configuration (h_model_config, routes.c) as a ModelConfig */
static int reply_model_config(srv_req *r, char **out, size_t *len, char *err)
{
    Inference__ModelConfigResponse m = INFERENCE__MODEL_CONFIG_RESPONSE__INIT;
    Inference__ModelConfig cfg = INFERENCE__MODEL_CONFIG__INIT;
    Inference__ModelVersionPolicy vp = INFERENCE__MODEL_VERSION_POLICY__INIT;
    Inference__ModelVersionPolicy__Latest latest =
        INFERENCE__MODEL_VERSION_POLICY__LATEST__INIT;
    json_t *o;
    void *blk[3] = {NULL, NULL, NULL};
    int rc;
    if (!(o = srv_grpc__answer_json(r, &rc, err)))
        return rc;
    cfg.name = text(o, "name");
    cfg.platform = text(o, "platform");
    cfg.backend = text(o, "backend");
    cfg.max_batch_size = (int32_t)json_integer_value(json_object_get(o, "max_batch_size"));
    latest.num_versions = (uint32_t)json_integer_value(
        json_object_get(json_object_get(json_object_get(o, "version_policy"), "latest"),
                        "num_versions"));
    vp.policy_choice_case = INFERENCE__MODEL_VERSION_POLICY__POLICY_CHOICE_LATEST;
    vp.latest = &latest;
    cfg.version_policy = &vp;
    cfg.n_input = tensors(json_object_get(o, "input"),
                          &inference__model_input__descriptor, "data_type",
                          "dims", 4, &cfg.input, &blk[0]);
    cfg.n_output = tensors(json_object_get(o, "output"),
                           &inference__model_output__descriptor, "data_type",
                           "dims", 3, &cfg.output, &blk[1]);
    cfg.n_parameters = config_params(json_object_get(o, "parameters"),
                                     &cfg.parameters, &blk[2]);
    m.config = &cfg;
    return pack_blocks(&m.base, blk, 3, o, out, len, err);
}

/* name, auth, stream, the REST route that serves it, start, reply */
const grpc_method srv_grpc__meta_methods[] = {
    {"ServerLive", 0, 0, SRV_GET, "/v2/health/live", NULL, reply_server_live},
    {"ServerReady", 0, 0, SRV_GET, "/v2/health/ready", NULL,
     reply_server_ready},
    {"ModelReady", 0, 0, SRV_GET, "/v2/models/{}/ready", start_model_ready,
     reply_model_ready},
    {"ServerMetadata", 0, 0, SRV_GET, "/v2", NULL, reply_server_meta},
    {"ModelMetadata", 0, 0, SRV_GET, "/v2/models/{}", start_model_meta,
     reply_model_meta},
    {"ModelConfig", 0, 0, SRV_GET, "/v2/models/{}/config", start_model_config,
     reply_model_config},
};
const size_t srv_grpc__n_meta_methods =
    sizeof srv_grpc__meta_methods / sizeof srv_grpc__meta_methods[0];
