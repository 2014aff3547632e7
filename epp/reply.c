/* The ProcessingResponse messages a stream sends, packed: the headers and
 * body answers that carry the destination (protobuf-c), the immediate
 * responses, and the body echo, which is the hot path (a 220 KB prompt
 * goes back in four chunks) and so is written by hand straight from the
 * body's bytes; tests/test_epp_stream.c checks it against protobuf-c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "envoy/service/ext_proc/v3/external_processor.pb-c.h"
#include "internal.h"

#define OUT_CAP (sizeof ((cr_epp_out *)0)->msg / sizeof ((cr_epp_out *)0)->msg[0])

typedef Envoy__Service__ExtProc__V3__ProcessingResponse response;
typedef Envoy__Config__Core__V3__HeaderValueOption option;
typedef Envoy__Config__Core__V3__HeaderValue header;
#define OVERWRITE \
    ENVOY__CONFIG__CORE__V3__HEADER_VALUE_OPTION__HEADER_APPEND_ACTION__OVERWRITE_IF_EXISTS_OR_ADD

static cr_status push(cr_epp_out *out, uint8_t *data, size_t len)
{
    if (!data || out->n == OUT_CAP) {
        free(data);
        return CR_ENOMEM;
    }
    out->msg[out->n].data = data;
    out->msg[out->n].len = len;
    out->n++;
    return CR_OK;
}

static cr_status push_packed(cr_epp_out *out, const response *r)
{
    size_t len = envoy__service__ext_proc__v3__processing_response__get_packed_size(r);
    uint8_t *data = malloc(len ? len : 1);
    if (data)
        envoy__service__ext_proc__v3__processing_response__pack(r, data);
    return push(out, data, len);
}

void cr_epp_out_clear(cr_epp_out *out)
{
    for (size_t i = 0; i < out->n; i++)
        free(out->msg[i].data);
    out->n = 0;
}

/* One header to set, overwriting what the request has. */
static void set_header(option *o, header *h, const char *key, const char *value)
{
    envoy__config__core__v3__header_value_option__init(o);
    envoy__config__core__v3__header_value__init(h);
    h->key = (char *)key;
    h->raw_value.data = (uint8_t *)value;
    h->raw_value.len = strlen(value);
    o->header = h;
    o->append_action = OVERWRITE;
}

/* Sets r's oneof to phase's message m. */
static void set_phase(response *r, int phase, void *m)
{
    r->response_case = (Envoy__Service__ExtProc__V3__ProcessingResponse__ResponseCase)phase;
    switch (phase) {
    case CR_EPP_OUT_REQUEST_HEADERS: r->request_headers = m; break;
    case CR_EPP_OUT_RESPONSE_HEADERS: r->response_headers = m; break;
    case CR_EPP_OUT_REQUEST_BODY: r->request_body = m; break;
    case CR_EPP_OUT_RESPONSE_BODY: r->response_body = m; break;
    case CR_EPP_OUT_REQUEST_TRAILERS: r->request_trailers = m; break;
    default: r->response_trailers = m; break;
    }
}

cr_status cr_epp_reply_common(cr_epp_out *out, int phase, const char *destination)
{
    Envoy__Service__ExtProc__V3__CommonResponse common;
    Envoy__Service__ExtProc__V3__HeaderMutation mutation;
    option o, *os[1] = {&o};
    header h;
    Google__Protobuf__Struct meta, lb;
    Google__Protobuf__Struct__FieldsEntry meta_e, lb_e, *meta_es[1] = {&meta_e},
                                                        *lb_es[1] = {&lb_e};
    Google__Protobuf__Value meta_v, lb_v;
    /* Headers and body answers are one shape apart from the type name:
     * HeadersResponse and BodyResponse both hold a CommonResponse at 1. */
    Envoy__Service__ExtProc__V3__HeadersResponse headers;
    Envoy__Service__ExtProc__V3__BodyResponse body;
    response r;
    envoy__service__ext_proc__v3__processing_response__init(&r);
    envoy__service__ext_proc__v3__common_response__init(&common);
    if (phase == CR_EPP_OUT_REQUEST_HEADERS || phase == CR_EPP_OUT_RESPONSE_HEADERS) {
        envoy__service__ext_proc__v3__headers_response__init(&headers);
        headers.response = &common;
        set_phase(&r, phase, &headers);
    } else {
        envoy__service__ext_proc__v3__body_response__init(&body);
        body.response = &common;
        set_phase(&r, phase, &body);
    }
    if (destination) {
        envoy__service__ext_proc__v3__header_mutation__init(&mutation);
        set_header(&o, &h, CR_EPP_DESTINATION_HEADER, destination);
        mutation.n_set_headers = 1;
        mutation.set_headers = os;
        common.header_mutation = &mutation;
        common.clear_route_cache = 1;
        /* dynamic_metadata {"envoy.lb": {"x-gateway-destination-endpoint": destination}} */
        google__protobuf__struct__init(&meta);
        google__protobuf__struct__init(&lb);
        google__protobuf__struct__fields_entry__init(&meta_e);
        google__protobuf__struct__fields_entry__init(&lb_e);
        google__protobuf__value__init(&meta_v);
        google__protobuf__value__init(&lb_v);
        lb_v.kind_case = GOOGLE__PROTOBUF__VALUE__KIND_STRING_VALUE;
        lb_v.string_value = (char *)destination;
        lb_e.key = (char *)CR_EPP_DESTINATION_HEADER;
        lb_e.value = &lb_v;
        lb.n_fields = 1;
        lb.fields = lb_es;
        meta_v.kind_case = GOOGLE__PROTOBUF__VALUE__KIND_STRUCT_VALUE;
        meta_v.struct_value = &lb;
        meta_e.key = (char *)"envoy.lb";
        meta_e.value = &meta_v;
        meta.n_fields = 1;
        meta.fields = meta_es;
        r.dynamic_metadata = &meta;
    }
    return push_packed(out, &r);
}

cr_status cr_epp_reply_trailers(cr_epp_out *out, int phase)
{
    Envoy__Service__ExtProc__V3__TrailersResponse t;
    response r;
    envoy__service__ext_proc__v3__processing_response__init(&r);
    envoy__service__ext_proc__v3__trailers_response__init(&t);
    set_phase(&r, phase, &t);
    return push_packed(out, &r);
}

cr_status cr_epp_reply_timeout(cr_epp_out *out, double seconds)
{
    Google__Protobuf__Duration d;
    response r;
    envoy__service__ext_proc__v3__processing_response__init(&r);
    google__protobuf__duration__init(&d);
    d.seconds = (int64_t)seconds;
    d.nanos = (int32_t)((seconds - (double)d.seconds) * 1e9);
    r.override_message_timeout = &d;
    return push_packed(out, &r);
}

/* ---- the body echo, by hand ----------------------------------------------- */

static size_t varint_len(uint64_t v)
{
    size_t n = 1;
    while (v >= 0x80) {
        v >>= 7;
        n++;
    }
    return n;
}

static uint8_t *varint(uint8_t *p, uint64_t v)
{
    while (v >= 0x80) {
        *p++ = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    *p++ = (uint8_t)v;
    return p;
}

/* A length-delimited field's tag (field, wire type 2) and length. */
static uint8_t *open_field(uint8_t *p, unsigned field, size_t len)
{
    *p++ = (uint8_t)(field << 3 | 2);
    return varint(p, len);
}

cr_status cr_epp_reply_chunk(cr_epp_out *out, int phase, const uint8_t *body, size_t len,
                             int end_of_stream)
{
    /* ProcessingResponse{phase: BodyResponse{1 response: CommonResponse{
     * 3 body_mutation: BodyMutation{3 streamed_response:
     * StreamedBodyResponse{1 body, 2 end_of_stream}}}}}, proto3 defaults
     * left out as protobuf-c leaves them. Sizes from the inside out. */
    size_t streamed = (len ? 1 + varint_len(len) + len : 0) + (end_of_stream ? 2 : 0);
    size_t mutation = 1 + varint_len(streamed) + streamed;
    size_t common = 1 + varint_len(mutation) + mutation;
    size_t reply = 1 + varint_len(common) + common;
    size_t total = 1 + varint_len(reply) + reply;
    uint8_t *data = malloc(total), *p = data;
    if (data) {
        p = open_field(p, (unsigned)phase, reply);
        p = open_field(p, 1, common);
        p = open_field(p, 3, mutation);
        p = open_field(p, 3, streamed);
        if (len) {
            p = open_field(p, 1, len);
            memcpy(p, body, len);
            p += len;
        }
        if (end_of_stream) {
            *p++ = 2 << 3 | 0;
            *p++ = 1;
        }
    }
    return push(out, data, total);
}

cr_status cr_epp_reply_chunks(cr_epp_out *out, int phase, const uint8_t *body, size_t len,
                              int end_of_stream)
{
    size_t at = 0;
    do {
        size_t n = len - at < CR_EPP_CHUNK_BYTES ? len - at : CR_EPP_CHUNK_BYTES;
        const uint8_t *from = n ? body + at : body; /* an empty body may be NULL */
        if (cr_epp_reply_chunk(out, phase, from, n, end_of_stream && at + n == len) != CR_OK)
            return CR_ENOMEM;
        at += n;
    } while (at < len);
    return CR_OK;
}

/* ---- immediate responses -------------------------------------------------- */

cr_status cr_epp_reply_immediate(cr_epp_out *out, int status, cr_epp_error reason,
                                 const char *why, const char *shed)
{
    /* Header values and proto3 strings: printable ASCII only, so no
     * message (a parser's, quoting the body) can break either. */
    char text[CR_ERRLEN], body[CR_ERRLEN + 1], details[64];
    size_t n = 0;
    for (; why[n] && n < sizeof text - 1; n++)
        text[n] = why[n] >= 0x20 && why[n] < 0x7f ? why[n] : '?';
    text[n] = '\0';
    snprintf(body, sizeof body, "%s\n", text);
    snprintf(details, sizeof details, "cacheroute_epp_%s", cr_epp_error_name(reason));
    Envoy__Service__ExtProc__V3__ImmediateResponse im;
    Envoy__Type__V3__HttpStatus st;
    Envoy__Service__ExtProc__V3__HeaderMutation headers;
    option o[3], *os[3] = {&o[0], &o[1], &o[2]};
    header h[3];
    response r;
    envoy__service__ext_proc__v3__processing_response__init(&r);
    envoy__service__ext_proc__v3__immediate_response__init(&im);
    envoy__type__v3__http_status__init(&st);
    envoy__service__ext_proc__v3__header_mutation__init(&headers);
    st.code = (Envoy__Type__V3__StatusCode)status;
    set_header(&o[0], &h[0], CR_EPP_ERROR_HEADER, text);
    set_header(&o[1], &h[1], "content-type", "text/plain");
    size_t k = 2;
    if (shed) {
        set_header(&o[k], &h[k], CR_EPP_SHED_HEADER, shed);
        k++;
    }
    headers.n_set_headers = k;
    headers.set_headers = os;
    im.status = &st;
    im.headers = &headers;
    im.body = body;
    im.details = details;
    r.response_case =
        ENVOY__SERVICE__EXT_PROC__V3__PROCESSING_RESPONSE__RESPONSE_IMMEDIATE_RESPONSE;
    r.immediate_response = &im;
    return push_packed(out, &r);
}
