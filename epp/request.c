/* A ProcessingRequest read with protobuf-c into what a stream uses: its
 * phase, body bytes and end_of_stream, the few headers routing reads, the
 * gateway's subset hint and served endpoint, and the announced body modes.
 * Everything else the data plane sends is left unread. */
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "envoy/service/ext_proc/v3/external_processor.pb-c.h"
#include "internal.h"

typedef Envoy__Service__ExtProc__V3__ProcessingRequest request;
typedef Envoy__Config__Core__V3__HeaderMap header_map;
typedef Google__Protobuf__Struct pb_struct;
typedef Google__Protobuf__Value pb_value;

#define SUBSET_FILTER "envoy.lb.subset_hint"
#define LB_FILTER "envoy.lb"

/* The header's value: raw_value, as Envoy sends it, else value. */
static cr_epp_text value_of(const Envoy__Config__Core__V3__HeaderValue *h)
{
    if (h->raw_value.len || !h->value)
        return (cr_epp_text){(const char *)h->raw_value.data, h->raw_value.len};
    return (cr_epp_text){h->value, strlen(h->value)};
}

/* Keeps name's value in *slot when h is name; over the bound, names it. */
static void keep(const Envoy__Config__Core__V3__HeaderValue *h, const char *name,
                 cr_epp_text *slot, cr_epp_in *in)
{
    if (!h->key || !*name || strcasecmp(h->key, name) != 0)
        return;
    *slot = value_of(h);
    if (!slot->p)
        *slot = (cr_epp_text){"", 0};
    if (slot->n > CR_EPP_MAX_HEADER_BYTES)
        in->too_large = name;
}

static void read_headers(const header_map *m, const char *owner_header, cr_epp_in *in)
{
    if (!m)
        return;
    for (size_t i = 0; i < m->n_headers; i++) {
        const Envoy__Config__Core__V3__HeaderValue *h = m->headers[i];
        keep(h, ":method", &in->method, in);
        keep(h, ":path", &in->path, in);
        keep(h, "content-type", &in->content_type, in);
        keep(h, ":status", &in->status, in);
        keep(h, owner_header, &in->owner, in);
        keep(h, CR_EPP_OBJECTIVE_HEADER, &in->objective, in);
        keep(h, CR_EPP_FAIRNESS_HEADER, &in->fairness, in);
        keep(h, CR_EPP_SLO_HEADER, &in->slo, in);
    }
    size_t total = in->method.n + in->path.n + in->content_type.n + in->owner.n +
                   in->objective.n + in->fairness.n + in->slo.n;
    if (total > CR_EPP_MAX_HEADER_BYTES && !in->too_large)
        in->too_large = "the kept headers";
}

static const pb_value *field(const pb_struct *s, const char *key)
{
    for (size_t i = 0; s && i < s->n_fields; i++)
        if (s->fields[i]->key && strcmp(s->fields[i]->key, key) == 0)
            return s->fields[i]->value;
    return NULL;
}

/* filter_metadata[filter][key], or NULL. */
static const pb_value *metadata(const Envoy__Config__Core__V3__Metadata *m, const char *filter,
                                const char *key)
{
    for (size_t i = 0; m && i < m->n_filter_metadata; i++) {
        const Envoy__Config__Core__V3__Metadata__FilterMetadataEntry *f = m->filter_metadata[i];
        if (f->key && strcmp(f->key, filter) == 0)
            return field(f->value, key);
    }
    return NULL;
}

/* Appends s to the joined hint, comma first when not the first; what
 * passes CR_EPP_MAX_HEADER_BYTES is left out (the hint names pods, a few
 * dozen bytes each). */
static void join(char *to, size_t *len, const char *s)
{
    size_t n = strlen(s);
    if (!n || *len + n + 1 > CR_EPP_MAX_HEADER_BYTES)
        return;
    if (*len)
        to[(*len)++] = ',';
    memcpy(to + *len, s, n);
    *len += n;
    to[*len] = '\0';
}

/* The subset hint: a list of strings, or one string "a,b" (the stream
 * splits it). A value of another kind is a hint that names nothing. */
static cr_status read_subset(const pb_value *v, cr_epp_in *in)
{
    if (!v)
        return CR_OK;
    in->has_subset = 1;
    size_t need = 1; /* the joined hint's bytes, commas and NUL */
    if (v->kind_case == GOOGLE__PROTOBUF__VALUE__KIND_STRING_VALUE && v->string_value)
        need += strlen(v->string_value);
    else if (v->kind_case == GOOGLE__PROTOBUF__VALUE__KIND_LIST_VALUE && v->list_value)
        for (size_t i = 0; i < v->list_value->n_values; i++) {
            const pb_value *e = v->list_value->values[i];
            if (e->kind_case == GOOGLE__PROTOBUF__VALUE__KIND_STRING_VALUE && e->string_value)
                need += strlen(e->string_value) + 1;
        }
    if (need > CR_EPP_MAX_HEADER_BYTES + 1)
        need = CR_EPP_MAX_HEADER_BYTES + 1;
    if (!(in->subset = malloc(need)))
        return CR_ENOMEM;
    size_t len = 0;
    in->subset[0] = '\0';
    if (v->kind_case == GOOGLE__PROTOBUF__VALUE__KIND_STRING_VALUE && v->string_value)
        join(in->subset, &len, v->string_value);
    else if (v->kind_case == GOOGLE__PROTOBUF__VALUE__KIND_LIST_VALUE && v->list_value)
        for (size_t i = 0; i < v->list_value->n_values; i++) {
            const pb_value *e = v->list_value->values[i];
            if (e->kind_case == GOOGLE__PROTOBUF__VALUE__KIND_STRING_VALUE && e->string_value)
                join(in->subset, &len, e->string_value);
        }
    return CR_OK;
}

cr_status cr_epp_in_read(const uint8_t *msg, size_t len, const char *owner_header, cr_epp_in *in,
                         cr_error *err)
{
    memset(in, 0, sizeof *in);
    request *r = envoy__service__ext_proc__v3__processing_request__unpack(NULL, len, msg);
    if (!r)
        return cr_fail(err, CR_EINVAL, "malformed ProcessingRequest (%zu bytes)", len);
    in->unpacked = r;
    in->kind = (int)r->request_case;
    switch (r->request_case) {
    case ENVOY__SERVICE__EXT_PROC__V3__PROCESSING_REQUEST__REQUEST_REQUEST_HEADERS:
    case ENVOY__SERVICE__EXT_PROC__V3__PROCESSING_REQUEST__REQUEST_RESPONSE_HEADERS:
        in->end_of_stream = r->request_headers->end_of_stream;
        read_headers(r->request_headers->headers, owner_header, in);
        break;
    case ENVOY__SERVICE__EXT_PROC__V3__PROCESSING_REQUEST__REQUEST_REQUEST_BODY:
    case ENVOY__SERVICE__EXT_PROC__V3__PROCESSING_REQUEST__REQUEST_RESPONSE_BODY:
        in->end_of_stream = r->request_body->end_of_stream;
        in->body = r->request_body->body.data;
        in->body_len = r->request_body->body.len;
        break;
    case ENVOY__SERVICE__EXT_PROC__V3__PROCESSING_REQUEST__REQUEST_REQUEST_TRAILERS:
    case ENVOY__SERVICE__EXT_PROC__V3__PROCESSING_REQUEST__REQUEST_RESPONSE_TRAILERS:
        break;
    default:
        cr_epp_in_free(in);
        return cr_fail(err, CR_EINVAL, "ProcessingRequest sets no phase");
    }
    if (read_subset(metadata(r->metadata_context, SUBSET_FILTER, CR_EPP_SUBSET_KEY), in) != CR_OK) {
        cr_epp_in_free(in);
        return cr_fail(err, CR_ENOMEM, "out of memory");
    }
    const pb_value *served = metadata(r->metadata_context, LB_FILTER, CR_EPP_SERVED_KEY);
    if (served && served->kind_case == GOOGLE__PROTOBUF__VALUE__KIND_STRING_VALUE &&
        served->string_value)
        in->served = (cr_epp_text){served->string_value, strlen(served->string_value)};
    if (r->protocol_config) {
        in->has_modes = 1;
        in->request_mode = (int)r->protocol_config->request_body_mode;
        in->response_mode = (int)r->protocol_config->response_body_mode;
    }
    return CR_OK;
}

void cr_epp_in_free(cr_epp_in *in)
{
    if (in->unpacked)
        envoy__service__ext_proc__v3__processing_request__free_unpacked(in->unpacked, NULL);
    free(in->subset);
    memset(in, 0, sizeof *in);
}
