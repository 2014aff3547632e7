/* The endpoint picker's stream (epp.h) against a real core on a virtual
 * clock with an endpoint set of ip:port addresses, driven the way Envoy's
 * ext_proc filter drives it: ProcessingRequest sequences built with
 * protobuf-c, every ProcessingResponse decoded with protobuf-c. Checks the
 * destination (header, dynamic metadata, fallbacks), every echoed byte,
 * both body modes, the immediate responses, protocol errors, and that
 * every way a stream ends releases its route's work with one outcome. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core_config.h"
#include "cunit_main.h"
#include "envoy/service/ext_proc/v3/external_processor.pb-c.h"
#include "epp.h"

typedef Envoy__Service__ExtProc__V3__ProcessingRequest preq;
/* protoc-c's long enum names, shortened */
#define REQ(x) ENVOY__SERVICE__EXT_PROC__V3__PROCESSING_REQUEST__REQUEST_##x
#define RESP(x) ENVOY__SERVICE__EXT_PROC__V3__PROCESSING_RESPONSE__RESPONSE_##x
#define STREAMED ENVOY__SERVICE__EXT_PROC__V3__BODY_MUTATION__MUTATION_STREAMED_RESPONSE
#define OVERWRITE \
    ENVOY__CONFIG__CORE__V3__HEADER_VALUE_OPTION__HEADER_APPEND_ACTION__OVERWRITE_IF_EXISTS_OR_ADD
typedef Envoy__Service__ExtProc__V3__ProcessingResponse presp;

#define N_ENDPOINTS 4
static const char *const addresses[N_ENDPOINTS] = {"10.0.0.1:8000", "10.0.0.2:8000",
                                                   "10.0.0.3:8000", "[fd00::4]:8000"};

/* ---- the fixture: a core, its endpoints, a picker ------------------------- */

typedef struct fixture {
    double t;
    cr_core *core;
    cr_epp *epp;
    cr_epp_config cfg;
    int decisions;
    uint32_t last_cached; /* the latest route receipt's predicted hit */
    int receipts;         /* route receipts made */
    char last_id[CR_LOOP_REQUEST_ID_MAX + 1]; /* the latest route receipt's request id */
} fixture;

/* The endpoint set's addresses; tests of engine mode point it at a
 * loopback port nothing listens on. */
static const char *const *set_addresses = addresses;
static cr_epp_tokens tokens_mode = CR_EPP_TOKENS_ESTIMATE;

static void on_receipt(void *ctx, const cr_receipt *r)
{
    if (r->outcomes == 0 && strncmp(r->request_id, "epp-", 4) == 0) {
        ((fixture *)ctx)->last_cached = r->cached_tokens;
        ((fixture *)ctx)->receipts++;
        snprintf(((fixture *)ctx)->last_id, sizeof ((fixture *)ctx)->last_id, "%s",
                 r->request_id);
    }
}

static double now_of(void *ctx) { return ((fixture *)ctx)->t; }
static void on_decided(void *ctx, double s)
{
    CU_ASSERT_TRUE(s >= 0);
    ((fixture *)ctx)->decisions++;
}

/* with_set 0: no endpoint set at all. */
static void open_fixture(fixture *f, int with_set, cr_epp_body_mode mode, size_t max_body)
{
    memset(f, 0, sizeof *f);
    cr_core_config cc;
    cr_test_core_config(&cc, N_ENDPOINTS);
    cc.route.by = CR_ROUTE_TTFT;
    cc.route.block_tokens = 16;
    cc.route.index_blocks = 1 << 14;
    cr_clock_source clock = {now_of, f};
    cr_error err;
    cr_core_hooks hooks = {.receipted = on_receipt, .ctx = f};
    f->core = cr_core_new(&cc, &hooks, &clock, &err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(f->core);
    if (with_set) {
        cr_endpoint_spec v[N_ENDPOINTS];
        char ids[N_ENDPOINTS][8];
        for (int i = 0; i < N_ENDPOINTS; i++) {
            snprintf(ids[i], sizeof ids[i], "e%d", i);
            v[i] = (cr_endpoint_spec){.id = ids[i], .address = set_addresses[i], .weight = 1};
        }
        CU_ASSERT_EQUAL_FATAL(cr_core_set_endpoints(f->core, v, N_ENDPOINTS, NULL, &err), CR_OK);
    }
    f->cfg = (cr_epp_config){.fallbacks = 2, .owner_header = "x-session-id",
                             .max_body_bytes = max_body, .tokens = tokens_mode,
                             .tokenize_timeout_s = 0.05, .body_mode = mode,
                             .block_tokens = 16, .max_hashes = cc.route.max_hashes,
                             .max_requests = 8, .max_buffered_bytes = 64 * (uint64_t)max_body,
                             .decided = on_decided, .ctx = f};
    f->epp = cr_epp_new(&f->cfg, f->core, &err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(f->epp);
}

static void close_fixture(fixture *f)
{
    cr_epp_free(f->epp);
    cr_core_free(f->core);
}

static uint64_t outstanding(fixture *f)
{
    cr_route_stats rs;
    cr_core_route_stats_read(f->core, &rs, NULL, 0);
    return rs.outstanding;
}

static cr_epp_stats stats(fixture *f)
{
    cr_epp_stats s;
    cr_epp_stats_read(f->epp, &s);
    return s;
}

/* ---- ProcessingRequest builders ------------------------------------------- */

typedef struct bytes {
    uint8_t *p;
    size_t n;
} bytes;

static bytes pack(const preq *r)
{
    bytes b = {NULL, envoy__service__ext_proc__v3__processing_request__get_packed_size(r)};
    b.p = malloc(b.n ? b.n : 1);
    envoy__service__ext_proc__v3__processing_request__pack(r, b.p);
    return b;
}

typedef struct hdr {
    const char *key, *value;
} hdr;

/* Headers (request or response); raw 1 sends values as raw_value. */
static bytes headers_msg(int response, const hdr *h, size_t n, int eos, int raw)
{
    Envoy__Config__Core__V3__HeaderValue hv[8], *hp[8];
    Envoy__Config__Core__V3__HeaderMap map;
    Envoy__Service__ExtProc__V3__HttpHeaders hh;
    preq r;
    envoy__service__ext_proc__v3__processing_request__init(&r);
    envoy__config__core__v3__header_map__init(&map);
    envoy__service__ext_proc__v3__http_headers__init(&hh);
    for (size_t i = 0; i < n; i++) {
        envoy__config__core__v3__header_value__init(&hv[i]);
        hv[i].key = (char *)h[i].key;
        if (raw) {
            hv[i].raw_value.data = (uint8_t *)h[i].value;
            hv[i].raw_value.len = strlen(h[i].value);
        } else {
            hv[i].value = (char *)h[i].value;
        }
        hp[i] = &hv[i];
    }
    map.n_headers = n;
    map.headers = hp;
    hh.headers = &map;
    hh.end_of_stream = eos;
    if (response) {
        r.request_case = REQ(RESPONSE_HEADERS);
        r.response_headers = &hh;
    } else {
        r.request_case = REQ(REQUEST_HEADERS);
        r.request_headers = &hh;
    }
    return pack(&r);
}

static bytes post_headers(const char *owner)
{
    hdr h[] = {{":method", "POST"}, {":path", "/v1/chat/completions"},
               {"content-type", "application/json"}, {"x-session-id", owner}};
    return headers_msg(0, h, owner ? 4 : 3, 0, 1);
}

static bytes body_msg(int response, const void *data, size_t len, int eos)
{
    Envoy__Service__ExtProc__V3__HttpBody b;
    preq r;
    envoy__service__ext_proc__v3__processing_request__init(&r);
    envoy__service__ext_proc__v3__http_body__init(&b);
    b.body.data = (uint8_t *)data;
    b.body.len = len;
    b.end_of_stream = eos;
    if (response) {
        r.request_case = REQ(RESPONSE_BODY);
        r.response_body = &b;
    } else {
        r.request_case = REQ(REQUEST_BODY);
        r.request_body = &b;
    }
    return pack(&r);
}

static bytes trailers_msg(int response)
{
    Envoy__Service__ExtProc__V3__HttpTrailers t;
    preq r;
    envoy__service__ext_proc__v3__processing_request__init(&r);
    envoy__service__ext_proc__v3__http_trailers__init(&t);
    r.request_case = response
                         ? REQ(RESPONSE_TRAILERS)
                         : REQ(REQUEST_TRAILERS);
    r.request_trailers = &t;
    return pack(&r);
}

/* m (packed) with metadata_context[filter][key] = a string (list 0) or a
 * list of n strings (list 1), and/or the request body mode announced. */
static bytes with_metadata(bytes m, const char *filter, const char *key, const char *const *v,
                           size_t n, int list, int request_mode)
{
    preq *r = envoy__service__ext_proc__v3__processing_request__unpack(NULL, m.n, m.p);
    free(m.p);
    Google__Protobuf__Value vals[8], *vp[8], top;
    Google__Protobuf__ListValue lv;
    Google__Protobuf__Struct st;
    Google__Protobuf__Struct__FieldsEntry fe, *fep[1] = {&fe};
    Envoy__Config__Core__V3__Metadata md;
    Envoy__Config__Core__V3__Metadata__FilterMetadataEntry me, *mep[1] = {&me};
    Envoy__Service__ExtProc__V3__ProtocolConfiguration pc;
    google__protobuf__value__init(&top);
    if (list) {
        google__protobuf__list_value__init(&lv);
        for (size_t i = 0; i < n; i++) {
            google__protobuf__value__init(&vals[i]);
            vals[i].kind_case = GOOGLE__PROTOBUF__VALUE__KIND_STRING_VALUE;
            vals[i].string_value = (char *)v[i];
            vp[i] = &vals[i];
        }
        lv.n_values = n;
        lv.values = vp;
        top.kind_case = GOOGLE__PROTOBUF__VALUE__KIND_LIST_VALUE;
        top.list_value = &lv;
    } else if (v) {
        top.kind_case = GOOGLE__PROTOBUF__VALUE__KIND_STRING_VALUE;
        top.string_value = (char *)v[0];
    }
    google__protobuf__struct__init(&st);
    google__protobuf__struct__fields_entry__init(&fe);
    fe.key = (char *)key;
    fe.value = &top;
    st.n_fields = 1;
    st.fields = fep;
    envoy__config__core__v3__metadata__init(&md);
    envoy__config__core__v3__metadata__filter_metadata_entry__init(&me);
    me.key = (char *)filter;
    me.value = &st;
    md.n_filter_metadata = 1;
    md.filter_metadata = mep;
    Envoy__Config__Core__V3__Metadata *old_md = r->metadata_context;
    Envoy__Service__ExtProc__V3__ProtocolConfiguration *old_pc = r->protocol_config;
    if (filter)
        r->metadata_context = &md;
    if (request_mode >= 0) {
        envoy__service__ext_proc__v3__protocol_configuration__init(&pc);
        pc.request_body_mode = request_mode;
        pc.response_body_mode = request_mode;
        r->protocol_config = &pc;
    }
    bytes b = pack(r);
    r->metadata_context = old_md;
    r->protocol_config = old_pc;
    envoy__service__ext_proc__v3__processing_request__free_unpacked(r, NULL);
    return b;
}

/* ---- driving and reading -------------------------------------------------- */

#define MAX_RESP 512
typedef struct got {
    size_t n;
    presp *r[MAX_RESP];
} got;

static void got_free(got *g)
{
    for (size_t i = 0; i < g->n; i++)
        envoy__service__ext_proc__v3__processing_response__free_unpacked(g->r[i], NULL);
    g->n = 0;
}

static cr_epp_out out; /* large: static */

/* One step of m (freed), its responses decoded into g (appended). */
static cr_epp_next step(fixture *f, cr_epp_stream *s, bytes m, got *g)
{
    cr_error err;
    cr_epp_next next = cr_epp_stream_step(s, m.p, m.n, f->t, &out, &err);
    free(m.p);
    for (size_t i = 0; i < out.n; i++) {
        presp *r = envoy__service__ext_proc__v3__processing_response__unpack(NULL, out.msg[i].len,
                                                                             out.msg[i].data);
        CU_ASSERT_PTR_NOT_NULL_FATAL(r);
        if (g->n < MAX_RESP)
            g->r[g->n++] = r;
        else
            envoy__service__ext_proc__v3__processing_response__free_unpacked(r, NULL);
    }
    cr_epp_out_clear(&out);
    return next;
}

static Envoy__Service__ExtProc__V3__CommonResponse *common_of(const presp *r)
{
    switch (r->response_case) {
    case RESP(REQUEST_HEADERS):
    case RESP(RESPONSE_HEADERS):
        return r->request_headers->response;
    case RESP(REQUEST_BODY):
    case RESP(RESPONSE_BODY):
        return r->request_body->response;
    default:
        return NULL;
    }
}

/* The value of header key set by mutation m, into buf; NULL when unset. */
static const char *set_value(const Envoy__Service__ExtProc__V3__HeaderMutation *m,
                             const char *key, char *buf, size_t len)
{
    for (size_t i = 0; m && i < m->n_set_headers; i++) {
        const Envoy__Config__Core__V3__HeaderValueOption *o = m->set_headers[i];
        if (strcmp(o->header->key, key) != 0)
            continue;
        CU_ASSERT_EQUAL(o->append_action,
                        OVERWRITE);
        size_t n = o->header->raw_value.len < len - 1 ? o->header->raw_value.len : len - 1;
        memcpy(buf, o->header->raw_value.data, n);
        buf[n] = '\0';
        return buf;
    }
    return NULL;
}

/* r's destination: the header, checked equal to the dynamic metadata's,
 * with clear_route_cache; into buf. NULL when r sets none. */
static const char *destination(const presp *r, char *buf, size_t len)
{
    const Envoy__Service__ExtProc__V3__CommonResponse *c = common_of(r);
    if (!c || !set_value(c->header_mutation, CR_EPP_DESTINATION_HEADER, buf, len))
        return NULL;
    CU_ASSERT_TRUE(c->clear_route_cache);
    const Google__Protobuf__Struct *md = r->dynamic_metadata;
    CU_ASSERT_PTR_NOT_NULL_FATAL(md);
    CU_ASSERT_EQUAL_FATAL(md->n_fields, 1);
    CU_ASSERT_STRING_EQUAL(md->fields[0]->key, "envoy.lb");
    const Google__Protobuf__Struct *lb = md->fields[0]->value->struct_value;
    CU_ASSERT_EQUAL_FATAL(lb->n_fields, 1);
    CU_ASSERT_STRING_EQUAL(lb->fields[0]->key, CR_EPP_DESTINATION_HEADER);
    CU_ASSERT_STRING_EQUAL(lb->fields[0]->value->string_value, buf);
    return buf;
}

/* The immediate response's status, its x-cacheroute-error checked set;
 * 0 when r is none. */
static int immediate_status(const presp *r, char *why, size_t len)
{
    if (r->response_case != RESP(IMMEDIATE_RESPONSE))
        return 0;
    const Envoy__Service__ExtProc__V3__HeaderMutation *h = r->immediate_response->headers;
    CU_ASSERT_PTR_NOT_NULL(set_value(h, CR_EPP_ERROR_HEADER, why, len));
    return r->immediate_response->status->code;
}

/* Appends the streamed bodies of phase's answers g->r[from..] to buf; 1
 * when the last one had end_of_stream and each chunk was in bounds. */
static int streamed(const got *g, size_t from, int response, uint8_t *buf, size_t *len)
{
    int eos = 0;
    for (size_t i = from; i < g->n; i++) {
        const presp *r = g->r[i];
        int want = response ? RESP(RESPONSE_BODY)
                            : RESP(REQUEST_BODY);
        if ((int)r->response_case != want)
            continue;
        const Envoy__Service__ExtProc__V3__BodyMutation *m =
            r->request_body->response->body_mutation;
        CU_ASSERT_PTR_NOT_NULL_FATAL(m);
        CU_ASSERT_EQUAL_FATAL(m->mutation_case,
                              STREAMED);
        CU_ASSERT_FALSE(eos); /* nothing after the end */
        CU_ASSERT_TRUE(m->streamed_response->body.len <= CR_EPP_CHUNK_BYTES);
        if (m->streamed_response->body.len)
            memcpy(buf + *len, m->streamed_response->body.data, m->streamed_response->body.len);
        *len += m->streamed_response->body.len;
        eos = m->streamed_response->end_of_stream;
    }
    return eos;
}

/* A chat body of about size bytes whose prompt is prompt-number p's. */
static char *chat_body(int p, size_t size, const char *model, size_t *len)
{
    char *b = malloc(size + 256);
    int n = snprintf(b, 256, "{\"model\":\"%s\",\"messages\":[{\"role\":\"user\",\"content\":\"",
                     model);
    size_t at = (size_t)n;
    while (at < size)
        at += (size_t)sprintf(b + at, "p%d w%zu ", p, at % 9973);
    at += (size_t)sprintf(b + at, "\"}],\"stream\":true}");
    *len = at;
    return b;
}

/* Sends body in the given uneven chunk sizes (the last takes the rest). */
static cr_epp_next send_body(fixture *f, cr_epp_stream *s, const char *body, size_t len,
                             const size_t *sizes, size_t n_sizes, got *g)
{
    size_t at = 0;
    cr_epp_next next = CR_EPP_MORE;
    for (size_t i = 0; next == CR_EPP_MORE && at < len; i++) {
        size_t n = i < n_sizes && sizes[i] < len - at ? sizes[i] : len - at;
        next = step(f, s, body_msg(0, body + at, n, at + n == len), g);
        at += n;
    }
    return next;
}

static const char *sse_tail = "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":900,"
                              "\"completion_tokens\":5,\"prompt_tokens_details\":"
                              "{\"cached_tokens\":640}}}\n\ndata: [DONE]\n\n";

/* The response phase: :status, SSE chunks, trailers, each echoed. */
static void respond(fixture *f, cr_epp_stream *s, const char *status, const char *served)
{
    got g = {0};
    hdr h[] = {{":status", status}};
    bytes m = headers_msg(1, h, 1, 0, 1);
    if (served)
        m = with_metadata(m, "envoy.lb", CR_EPP_SERVED_KEY, &served, 1, 0, -1);
    CU_ASSERT_EQUAL(step(f, s, m, &g), CR_EPP_MORE);
    CU_ASSERT_EQUAL_FATAL(g.n, 1);
    CU_ASSERT_EQUAL(g.r[0]->response_case,
                    RESP(RESPONSE_HEADERS));
    got_free(&g);
    f->t += 0.25; /* the first token */
    const char *first = "data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\n";
    CU_ASSERT_EQUAL(step(f, s, body_msg(1, first, strlen(first), 0), &g), CR_EPP_MORE);
    CU_ASSERT_EQUAL(step(f, s, body_msg(1, sse_tail, strlen(sse_tail), 0), &g), CR_EPP_MORE);
    CU_ASSERT_EQUAL(step(f, s, body_msg(1, "", 0, 1), &g), CR_EPP_MORE);
    uint8_t echo[1024];
    size_t len = 0;
    CU_ASSERT_TRUE(streamed(&g, 0, 1, echo, &len));
    CU_ASSERT_EQUAL(len, strlen(first) + strlen(sse_tail));
    CU_ASSERT_EQUAL(memcmp(echo, first, strlen(first)), 0);
    got_free(&g);
    CU_ASSERT_EQUAL(step(f, s, trailers_msg(1), &g), CR_EPP_MORE);
    CU_ASSERT_EQUAL_FATAL(g.n, 1);
    CU_ASSERT_EQUAL(g.r[0]->response_case,
                    RESP(RESPONSE_TRAILERS));
    got_free(&g);
}

/* Splits "a,b,c" into parts (at most max); how many. */
static size_t split(char *s, char **parts, size_t max)
{
    size_t n = 0;
    for (char *tok = strtok(s, ","); tok && n < max; tok = strtok(NULL, ","))
        parts[n++] = tok;
    return n;
}

static int known(const char *a)
{
    for (int i = 0; i < N_ENDPOINTS; i++)
        if (strcmp(a, addresses[i]) == 0)
            return i;
    return -1;
}

/* ---- tests ---------------------------------------------------------------- */

/* A 220 KB chat body in uneven chunks, >62,000-byte ones included: held
 * headers answered with best + 2 fallbacks, every byte echoed in order,
 * then the response closes the loop. */
static void test_full_duplex(void)
{
    fixture f;
    open_fixture(&f, 1, CR_EPP_FULL_DUPLEX, 1u << 20);
    size_t len;
    char *body = chat_body(1, 220000, "llama", &len);
    cr_epp_stream *s = cr_epp_stream_open(f.epp, 0, f.t);
    got g = {0};
    CU_ASSERT_EQUAL(step(&f, s, post_headers("sess-1"), &g), CR_EPP_MORE);
    CU_ASSERT_EQUAL(g.n, 0); /* held */
    size_t sizes[] = {1, 70001, 3, 62000, 62001, 17};
    CU_ASSERT_EQUAL(send_body(&f, s, body, len, sizes, 6, &g), CR_EPP_MORE);
    CU_ASSERT_EQUAL_FATAL(g.n >= 5, 1);
    CU_ASSERT_EQUAL(g.r[0]->response_case,
                    RESP(REQUEST_HEADERS));
    char dest[512], *parts[8];
    CU_ASSERT_PTR_NOT_NULL_FATAL(destination(g.r[0], dest, sizeof dest));
    size_t n = split(dest, parts, 8);
    CU_ASSERT_EQUAL(n, 3);
    for (size_t i = 0; i < n; i++) {
        CU_ASSERT_TRUE(known(parts[i]) >= 0);
        for (size_t j = 0; j < i; j++)
            CU_ASSERT_STRING_NOT_EQUAL(parts[i], parts[j]);
    }
    uint8_t *echo = malloc(len);
    size_t got_len = 0;
    CU_ASSERT_TRUE(streamed(&g, 1, 0, (uint8_t *)echo, &got_len));
    CU_ASSERT_EQUAL_FATAL(got_len, len);
    CU_ASSERT_EQUAL(memcmp(echo, body, len), 0);
    CU_ASSERT_EQUAL(g.n, 1 + (len + CR_EPP_CHUNK_BYTES - 1) / CR_EPP_CHUNK_BYTES);
    got_free(&g);
    CU_ASSERT_EQUAL(f.decisions, 1);
    CU_ASSERT_EQUAL(outstanding(&f), 1);
    respond(&f, s, "200", NULL);
    CU_ASSERT_EQUAL(outstanding(&f), 0);
    CU_ASSERT_EQUAL(stats(&f).outcomes, 1);
    /* the route's receipt has its outcome: TTFT from the stream's open to
     * the first body chunk (respond's 250 ms) */
    cr_receipt r;
    CU_ASSERT_EQUAL_FATAL(f.receipts, 1);
    CU_ASSERT_EQUAL_FATAL(cr_core_decision(f.core, f.last_id, &r), 1);
    CU_ASSERT_EQUAL(r.outcomes, 1);
    CU_ASSERT_TRUE(r.error_has & (1u << CR_TERM_TOTAL));
    CU_ASSERT_DOUBLE_EQUAL(r.measured_ms[CR_TERM_TOTAL], 250, 1e-6);
    cr_epp_stream_close(s, CR_EPP_END_CLOSED, f.t);
    cr_epp_stats st = stats(&f);
    CU_ASSERT_EQUAL(st.outcomes, 1); /* once */
    CU_ASSERT_EQUAL(st.routed, 1);
    CU_ASSERT_EQUAL(st.streams_open, 0);
    CU_ASSERT_EQUAL(st.bytes_out, st.bytes_in);
    free(echo);
    free(body);
    close_fixture(&f);
}

/* One full-duplex request of prompt p; its destination's first address
 * into first. */
static void one_request(fixture *f, int p, const char *model, char *first, size_t len)
{
    size_t blen;
    char *body = chat_body(p, 4000, model, &blen);
    cr_epp_stream *s = cr_epp_stream_open(f->epp, 7, f->t);
    got g = {0};
    step(f, s, post_headers(NULL), &g);
    size_t sizes[] = {1000};
    CU_ASSERT_EQUAL(send_body(f, s, body, blen, sizes, 1, &g), CR_EPP_MORE);
    char dest[512];
    CU_ASSERT_PTR_NOT_NULL_FATAL(destination(g.r[0], dest, sizeof dest));
    snprintf(first, len, "%.*s", (int)strcspn(dest, ","), dest);
    got_free(&g);
    respond(f, s, "200", NULL);
    cr_epp_stream_close(s, CR_EPP_END_CLOSED, f->t);
    free(body);
    f->t += 1;
}

/* The same prompt twice goes to the same endpoint, by its cached prefix;
 * another model's equal prompt is no hit. */
static void test_prefix_hit(void)
{
    fixture f;
    open_fixture(&f, 1, CR_EPP_FULL_DUPLEX, 1u << 20);
    char a[64], b[64], c[64];
    one_request(&f, 5, "llama", a, sizeof a);
    cr_route_stats before, after;
    cr_core_route_stats_read(f.core, &before, NULL, 0);
    one_request(&f, 5, "llama", b, sizeof b);
    cr_core_route_stats_read(f.core, &after, NULL, 0);
    CU_ASSERT_STRING_EQUAL(a, b);
    CU_ASSERT_EQUAL(after.placed[CR_ROUTE_WHY_PREFIX], before.placed[CR_ROUTE_WHY_PREFIX] + 1);
    /* "prefix": the route's receipt predicts a hit */
    CU_ASSERT_TRUE(f.last_cached > 0);
    one_request(&f, 5, "mistral", c, sizeof c);
    CU_ASSERT_EQUAL(f.last_cached, 0);
    cr_core_route_stats_read(f.core, &before, NULL, 0);
    CU_ASSERT_EQUAL(before.placed[CR_ROUTE_WHY_PREFIX], after.placed[CR_ROUTE_WHY_PREFIX]);
    CU_ASSERT_EQUAL(outstanding(&f), 0);
    close_fixture(&f);
}

/* BUFFERED (announced in protocol_config): headers CONTINUE at once, the
 * whole body's answer carries the destination and no body mutation. */
static void test_buffered(void)
{
    fixture f;
    open_fixture(&f, 1, CR_EPP_FULL_DUPLEX, 1u << 20);
    size_t len;
    char *body = chat_body(2, 3000, "llama", &len);
    cr_epp_stream *s = cr_epp_stream_open(f.epp, 0, f.t);
    got g = {0};
    bytes h = with_metadata(post_headers("x"), NULL, NULL, NULL, 0, 0, 2 /* BUFFERED */);
    CU_ASSERT_EQUAL(step(&f, s, h, &g), CR_EPP_MORE);
    CU_ASSERT_EQUAL_FATAL(g.n, 1);
    char dest[512];
    CU_ASSERT_PTR_NULL(destination(g.r[0], dest, sizeof dest));
    CU_ASSERT_PTR_NULL(common_of(g.r[0])->header_mutation);
    got_free(&g);
    CU_ASSERT_EQUAL(step(&f, s, body_msg(0, body, len, 1), &g), CR_EPP_MORE);
    CU_ASSERT_EQUAL_FATAL(g.n, 1);
    CU_ASSERT_EQUAL(g.r[0]->response_case,
                    RESP(REQUEST_BODY));
    CU_ASSERT_PTR_NOT_NULL(destination(g.r[0], dest, sizeof dest));
    CU_ASSERT_PTR_NULL(common_of(g.r[0])->body_mutation);
    got_free(&g);
    /* a buffered response body: answered CONTINUE, no mutation */
    hdr st[] = {{":status", "200"}};
    step(&f, s, headers_msg(1, st, 1, 0, 0), &g);
    CU_ASSERT_EQUAL(step(&f, s, body_msg(1, sse_tail, strlen(sse_tail), 1), &g), CR_EPP_MORE);
    CU_ASSERT_EQUAL_FATAL(g.n, 2);
    CU_ASSERT_PTR_NULL(common_of(g.r[1])->body_mutation);
    got_free(&g);
    CU_ASSERT_EQUAL(outstanding(&f), 0);
    cr_epp_stream_close(s, CR_EPP_END_CLOSED, f.t);
    CU_ASSERT_EQUAL(stats(&f).outcomes, 1);
    free(body);
    close_fixture(&f);
}

/* A GET (and any other path) is routed at its headers by load alone. */
static void test_get_by_load(void)
{
    fixture f;
    open_fixture(&f, 1, CR_EPP_FULL_DUPLEX, 1u << 20);
    cr_epp_stream *s = cr_epp_stream_open(f.epp, 0, f.t);
    got g = {0};
    hdr h[] = {{":method", "GET"}, {":path", "/v1/models"}};
    CU_ASSERT_EQUAL(step(&f, s, headers_msg(0, h, 2, 1, 0), &g), CR_EPP_MORE);
    CU_ASSERT_EQUAL_FATAL(g.n, 1);
    char dest[512];
    CU_ASSERT_PTR_NOT_NULL(destination(g.r[0], dest, sizeof dest));
    got_free(&g);
    CU_ASSERT_EQUAL(outstanding(&f), 1);
    respond(&f, s, "200", NULL);
    cr_epp_stream_close(s, CR_EPP_END_CLOSED, f.t);
    /* a POST elsewhere: routed at the headers, its body passed through */
    s = cr_epp_stream_open(f.epp, 0, f.t);
    hdr p[] = {{":method", "POST"}, {":path", "/v1/embeddings"}};
    step(&f, s, headers_msg(0, p, 2, 0, 1), &g);
    CU_ASSERT_PTR_NOT_NULL(destination(g.r[0], dest, sizeof dest));
    step(&f, s, body_msg(0, "{\"input\":\"x\"}", 13, 1), &g);
    uint8_t echo[64];
    size_t len = 0;
    CU_ASSERT_TRUE(streamed(&g, 1, 0, echo, &len));
    CU_ASSERT_EQUAL(len, 13);
    got_free(&g);
    cr_epp_stream_close(s, CR_EPP_END_CLOSED, f.t);
    CU_ASSERT_EQUAL(outstanding(&f), 0);
    CU_ASSERT_EQUAL(stats(&f).outcomes, 2);
    close_fixture(&f);
}

/* The subset hint: only its endpoints (list or comma string; unknown
 * addresses ignored); none known: 503. */
static void test_subset(void)
{
    fixture f;
    open_fixture(&f, 1, CR_EPP_FULL_DUPLEX, 1u << 20);
    const char *hint[] = {"10.9.9.9:1", addresses[2]};
    const char *comma[] = {"10.9.9.9:1, 10.0.0.2:8000,10.0.0.3:8000"};
    for (int round = 0; round < 2; round++) {
        cr_epp_stream *s = cr_epp_stream_open(f.epp, 0, f.t);
        got g = {0};
        hdr h[] = {{":method", "GET"}, {":path", "/v1/models"}};
        bytes m = round == 0 ? with_metadata(headers_msg(0, h, 2, 1, 1), "envoy.lb.subset_hint",
                                             CR_EPP_SUBSET_KEY, hint, 2, 1, -1)
                             : with_metadata(headers_msg(0, h, 2, 1, 1), "envoy.lb.subset_hint",
                                             CR_EPP_SUBSET_KEY, comma, 1, 0, -1);
        CU_ASSERT_EQUAL(step(&f, s, m, &g), CR_EPP_MORE);
        char dest[512], *parts[8];
        CU_ASSERT_PTR_NOT_NULL_FATAL(destination(g.r[0], dest, sizeof dest));
        size_t n = split(dest, parts, 8);
        if (round == 0) {
            CU_ASSERT_EQUAL(n, 1);
            CU_ASSERT_STRING_EQUAL(parts[0], addresses[2]);
        } else {
            CU_ASSERT_EQUAL(n, 2);
            for (size_t i = 0; i < n; i++)
                CU_ASSERT_TRUE(known(parts[i]) == 1 || known(parts[i]) == 2);
        }
        got_free(&g);
        cr_epp_stream_close(s, CR_EPP_END_CLOSED, f.t);
    }
    const char *none[] = {"10.9.9.9:1", "10.9.9.8:1"};
    cr_epp_stream *s = cr_epp_stream_open(f.epp, 0, f.t);
    got g = {0};
    bytes m = with_metadata(post_headers(NULL), "envoy.lb.subset_hint", CR_EPP_SUBSET_KEY, none,
                            2, 1, -1);
    CU_ASSERT_EQUAL(step(&f, s, m, &g), CR_EPP_MORE);
    size_t len;
    char *body = chat_body(3, 500, "llama", &len);
    CU_ASSERT_EQUAL(step(&f, s, body_msg(0, body, len, 1), &g), CR_EPP_FINISHED);
    char why[256];
    CU_ASSERT_EQUAL(immediate_status(g.r[0], why, sizeof why), 503);
    CU_ASSERT_PTR_NOT_NULL(strstr(why, "subset"));
    got_free(&g);
    cr_epp_stream_close(s, CR_EPP_END_CLOSED, f.t);
    CU_ASSERT_EQUAL(outstanding(&f), 0);
    free(body);
    close_fixture(&f);
}

/* The served endpoint the data plane reports (after a fallback) is the
 * one the outcome is booked to. */
static void test_served(void)
{
    fixture f;
    open_fixture(&f, 1, CR_EPP_FULL_DUPLEX, 1u << 20);
    cr_epp_stream *s = cr_epp_stream_open(f.epp, 0, f.t);
    got g = {0};
    hdr h[] = {{":method", "GET"}, {":path", "/health"}};
    const char *pin[] = {addresses[0]};
    step(&f, s, with_metadata(headers_msg(0, h, 2, 1, 1), "envoy.lb.subset_hint",
                              CR_EPP_SUBSET_KEY, pin, 1, 1, -1), &g);
    got_free(&g);
    cr_loop_shard_stats sh[N_ENDPOINTS];
    cr_loop_stats ls;
    respond(&f, s, "200", addresses[3]);
    cr_core_loop_stats_read(f.core, &ls, sh, N_ENDPOINTS, NULL, 0);
    CU_ASSERT_EQUAL(sh[3].prompt_tokens, 900);
    CU_ASSERT_EQUAL(sh[3].cached_tokens, 640);
    CU_ASSERT_EQUAL(sh[0].prompt_tokens, 0);
    CU_ASSERT_EQUAL(outstanding(&f), 0);
    cr_epp_stream_close(s, CR_EPP_END_CLOSED, f.t);
    close_fixture(&f);
}

/* Every error answer: its status and x-cacheroute-error. */
static void expect_immediate(fixture *f, cr_epp_stream *s, bytes m, int status, const char *part)
{
    got g = {0};
    CU_ASSERT_EQUAL(step(f, s, m, &g), CR_EPP_FINISHED);
    CU_ASSERT_EQUAL_FATAL(g.n, 1);
    char why[256] = "";
    CU_ASSERT_EQUAL(immediate_status(g.r[0], why, sizeof why), status);
    if (!strstr(why, part))
        printf("\n  %d: \"%s\" lacks \"%s\"\n", status, why, part);
    CU_ASSERT_PTR_NOT_NULL(strstr(why, part));
    got_free(&g);
    cr_epp_stream_close(s, CR_EPP_END_CLOSED, f->t);
}

/* The bodies the issue names, each with its answer: exactly
 * --epp-max-body-bytes routed, one byte more 413, 10 MB 413 once the bound
 * is passed, bad JSON, non-UTF-8 and deep nesting 400. */
static void test_hostile_bodies(void)
{
    fixture f;
    open_fixture(&f, 1, CR_EPP_FULL_DUPLEX, 4096);
    size_t len;
    char *body = chat_body(6, 4000, "llama", &len);
    CU_ASSERT_FATAL(len <= 4096);
    /* pad the content to exactly 4096 bytes */
    char *exact = malloc(4097);
    size_t head = len - strlen("\"}],\"stream\":true}");
    memcpy(exact, body, head);
    memset(exact + head, 'x', 4096 - len);
    memcpy(exact + head + (4096 - len), body + head, len - head);
    for (int over = 0; over < 2; over++) {
        cr_epp_stream *s = cr_epp_stream_open(f.epp, 0, f.t);
        got g = {0};
        step(&f, s, post_headers(NULL), &g);
        size_t sizes[] = {4095};
        if (!over) {
            CU_ASSERT_EQUAL(send_body(&f, s, exact, 4096, sizes, 1, &g), CR_EPP_MORE);
            got_free(&g);
            cr_epp_stream_close(s, CR_EPP_END_CLOSED, f.t);
        } else {
            step(&f, s, body_msg(0, exact, 4096, 0), &g);
            expect_immediate(&f, s, body_msg(0, "}", 1, 1), 413, "over 4096 bytes");
        }
    }
    size_t big = 10u << 20;
    char *ten = malloc(big);
    memset(ten, ' ', big);
    cr_epp_stream *s = cr_epp_stream_open(f.epp, 0, f.t);
    got g = {0};
    step(&f, s, post_headers(NULL), &g);
    cr_epp_next next = CR_EPP_MORE;
    size_t at = 0;
    while (next == CR_EPP_MORE && at < big) {
        next = step(&f, s, body_msg(0, ten + at, 1000, 0), &g);
        at += 1000;
    }
    CU_ASSERT_EQUAL(next, CR_EPP_FINISHED);
    CU_ASSERT_EQUAL(at, 5000); /* answered at the first chunk past the bound */
    char why[256];
    CU_ASSERT_EQUAL(immediate_status(g.r[g.n - 1], why, sizeof why), 413);
    got_free(&g);
    cr_epp_stream_close(s, CR_EPP_END_CLOSED, f.t);
    const char *bad[] = {"{\"model\":\"m\",\"messages\":[", "{\"model\":\"m\xff\",\"messages\":[]}",
                         NULL};
    const char *says[] = {"JSON", "UTF-8", "deeper"};
    char deep[300];
    memset(deep, '[', sizeof deep - 1);
    deep[sizeof deep - 1] = '\0';
    bad[2] = deep;
    for (int i = 0; i < 3; i++) {
        s = cr_epp_stream_open(f.epp, 0, f.t);
        step(&f, s, post_headers(NULL), &g);
        expect_immediate(&f, s, body_msg(0, bad[i], strlen(bad[i]), 1), 400, says[i]);
    }
    CU_ASSERT_EQUAL(stats(&f).routed, 1);
    CU_ASSERT_EQUAL(outstanding(&f), 0);
    free(ten);
    free(exact);
    free(body);
    close_fixture(&f);
}

static void test_errors(void)
{
    fixture f;
    open_fixture(&f, 1, CR_EPP_FULL_DUPLEX, 1000);
    /* 400 naming the field */
    cr_epp_stream *s = cr_epp_stream_open(f.epp, 0, f.t);
    got g = {0};
    step(&f, s, post_headers(NULL), &g);
    const char *bad = "{\"model\":5,\"messages\":[]}";
    expect_immediate(&f, s, body_msg(0, bad, strlen(bad), 1), 400, "model");
    /* 413 as soon as the bound is passed */
    s = cr_epp_stream_open(f.epp, 0, f.t);
    step(&f, s, post_headers(NULL), &g);
    char chunk[600];
    memset(chunk, 'a', sizeof chunk);
    CU_ASSERT_EQUAL(step(&f, s, body_msg(0, chunk, 600, 0), &g), CR_EPP_MORE);
    expect_immediate(&f, s, body_msg(0, chunk, 600, 0), 413, "--epp-max-body-bytes");
    /* 429: over --epp-max-requests open at once */
    cr_epp_stream *held[8];
    for (int i = 0; i < 8; i++)
        held[i] = cr_epp_stream_open(f.epp, 0, f.t);
    s = cr_epp_stream_open(f.epp, 0, f.t);
    expect_immediate(&f, s, post_headers(NULL), 429, "--epp-max-requests");
    for (int i = 0; i < 8; i++)
        cr_epp_stream_close(held[i], CR_EPP_END_CLOSED, f.t);
    cr_epp_stats st = stats(&f);
    CU_ASSERT_EQUAL(st.errors[CR_EPP_ERR_BAD_BODY], 1);
    CU_ASSERT_EQUAL(st.errors[CR_EPP_ERR_TOO_LARGE], 1);
    CU_ASSERT_EQUAL(st.errors[CR_EPP_ERR_SHED], 1);
    CU_ASSERT_EQUAL(st.streams_open, 0);
    CU_ASSERT_EQUAL(outstanding(&f), 0);
    close_fixture(&f);
    /* 503 without an endpoint set */
    open_fixture(&f, 0, CR_EPP_FULL_DUPLEX, 1000);
    s = cr_epp_stream_open(f.epp, 0, f.t);
    expect_immediate(&f, s, post_headers(NULL), 503, "--endpoints-file or SetEndpoints");
    close_fixture(&f);
}

/* Request headers with the door's: objective, fairness id, TTFT SLO
 * (NULL: left out). */
static bytes objective_headers(const char *objective, const char *fairness, const char *slo)
{
    hdr h[6] = {{":method", "POST"}, {":path", "/v1/chat/completions"},
                {"content-type", "application/json"}};
    size_t n = 3;
    if (objective)
        h[n++] = (hdr){CR_EPP_OBJECTIVE_HEADER, objective};
    if (fairness)
        h[n++] = (hdr){CR_EPP_FAIRNESS_HEADER, fairness};
    if (slo)
        h[n++] = (hdr){CR_EPP_SLO_HEADER, slo};
    return headers_msg(0, h, n, 0, 1);
}

/* The objective headers: a value out of range is answered 400 naming the
 * header and the value, nothing routed; good ones route as before (the
 * door's word is the core's). Every 429 says by what in x-cacheroute-shed. */
static void test_objective_headers(void)
{
    fixture f;
    open_fixture(&f, 1, CR_EPP_FULL_DUPLEX, 1000);
    static const struct {
        const char *objective, *fairness, *slo, *says;
    } bad[] = {
        {"batch", "t1", "-1", "x-llm-d-slo-ttft-ms must be a number of ms in [0, 86400000], "
                              "got \"-1\""},
        {NULL, NULL, "2s", "x-llm-d-slo-ttft-ms must be a number of ms in [0, 86400000], got "
                           "\"2s\""},
        {NULL, NULL, "86400001", "got \"86400001\""},
        {NULL, NULL, "nan", "got \"nan\""},
        {"0123456789012345678901234567890123456789012345678901234567890123", NULL, NULL,
         "x-gateway-inference-objective must be at most 63 bytes, got 64"},
        {NULL, "0123456789012345678901234567890123456789012345678901234567890123", NULL,
         "x-gateway-inference-fairness-id must be at most 63 bytes, got 64"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        cr_epp_stream *s = cr_epp_stream_open(f.epp, 0, f.t);
        expect_immediate(&f, s, objective_headers(bad[i].objective, bad[i].fairness, bad[i].slo),
                         400, bad[i].says);
    }
    CU_ASSERT_EQUAL(stats(&f).routed, 0);
    cr_epp_stream *s = cr_epp_stream_open(f.epp, 0, f.t);
    got g = {0};
    CU_ASSERT_EQUAL(step(&f, s, objective_headers("interactive", "tenant-a", "2000"), &g),
                    CR_EPP_MORE);
    size_t len;
    char *body = chat_body(1, 200, "llama", &len);
    size_t sizes[] = {len};
    CU_ASSERT_EQUAL(send_body(&f, s, body, len, sizes, 1, &g), CR_EPP_MORE);
    char dest[256];
    CU_ASSERT_PTR_NOT_NULL(destination(g.r[0], dest, sizeof dest));
    got_free(&g);
    cr_epp_stream_close(s, CR_EPP_END_CLOSED, f.t);
    CU_ASSERT_EQUAL(stats(&f).routed, 1);
    free(body);
    /* over --epp-max-requests: x-cacheroute-shed "requests", no retry-after */
    cr_epp_stream *held[8];
    for (int i = 0; i < 8; i++)
        held[i] = cr_epp_stream_open(f.epp, 0, f.t);
    s = cr_epp_stream_open(f.epp, 0, f.t);
    CU_ASSERT_EQUAL(step(&f, s, post_headers(NULL), &g), CR_EPP_FINISHED);
    CU_ASSERT_EQUAL_FATAL(g.n, 1);
    const Envoy__Service__ExtProc__V3__HeaderMutation *h = g.r[0]->immediate_response->headers;
    char word[32];
    CU_ASSERT(set_value(h, CR_EPP_SHED_HEADER, word, sizeof word) && !strcmp(word, "requests"));
    CU_ASSERT_PTR_NULL(set_value(h, "retry-after", word, sizeof word));
    got_free(&g);
    cr_epp_stream_close(s, CR_EPP_END_CLOSED, f.t);
    for (int i = 0; i < 8; i++)
        cr_epp_stream_close(held[i], CR_EPP_END_CLOSED, f.t);
    CU_ASSERT_EQUAL(outstanding(&f), 0);
    close_fixture(&f);
}

/* A request with the objective headers, its body whole; what the step
 * gave into g. */
static cr_epp_next objective_request(fixture *f, cr_epp_stream *s, const char *objective,
                                     const char *fairness, const char *slo, int p, got *g)
{
    step(f, s, objective_headers(objective, fairness, slo), g);
    size_t len;
    char *body = chat_body(p, 200, "llama", &len);
    size_t sizes[] = {len};
    cr_epp_next next = send_body(f, s, body, len, sizes, 1, g);
    free(body);
    return next;
}

/* With a door that cannot queue: a sheddable objective whose SLO no
 * endpoint meets is answered 429, x-cacheroute-shed "slo", its route
 * never placed, its receipt kept; a critical one with the same SLO is
 * routed and its outcome counted against its SLO; one naming no
 * objective never meets the door. */
/* f's core given a door over "interactive:0:2000,batch:-1" that acts at
 * once (no pressure signal) by each request's SLO and budget_ms (0: none),
 * holding at most max_queued. */
static void set_door(fixture *f, uint32_t max_queued, double budget_ms)
{
    cr_admit_objective t[CR_ADMIT_MAX_OBJECTIVES];
    size_t n;
    cr_error err;
    CU_ASSERT_EQUAL_FATAL(cr_admit_objectives_parse("interactive:0:2000,batch:-1", t, &n, &err),
                          CR_OK);
    cr_admit_config ac;
    cr_admit_config_default(&ac);
    ac.max_queued = ac.max_per_id = max_queued;
    ac.pressure = 0;
    ac.budget_ms = budget_ms;
    CU_ASSERT_EQUAL_FATAL(cr_core_set_door(f->core, &ac, t, n, &err), CR_OK);
}

static void test_door_sheds(void)
{
    fixture f;
    open_fixture(&f, 1, CR_EPP_FULL_DUPLEX, 1000);
    size_t n;
    set_door(&f, 0, 0); /* no queue: what it would hold is shed */
    /* an SLO of 0.001 ms: no prefill is that fast */
    cr_epp_stream *s = cr_epp_stream_open(f.epp, 0, f.t);
    got g = {0};
    CU_ASSERT_EQUAL(objective_request(&f, s, "batch", "tenant-b", "0.001", 1, &g),
                    CR_EPP_FINISHED);
    CU_ASSERT_EQUAL_FATAL(g.n, 1);
    char why[256], word[32];
    CU_ASSERT_EQUAL(immediate_status(g.r[g.n - 1], why, sizeof why), 429);
    CU_ASSERT_PTR_NOT_NULL(strstr(why, "no endpoint meets its TTFT objective"));
    const Envoy__Service__ExtProc__V3__HeaderMutation *h =
        g.r[g.n - 1]->immediate_response->headers;
    CU_ASSERT(set_value(h, CR_EPP_SHED_HEADER, word, sizeof word) && !strcmp(word, "slo"));
    got_free(&g);
    cr_epp_stream_close(s, CR_EPP_END_CLOSED, f.t);
    CU_ASSERT_EQUAL(outstanding(&f), 0);
    CU_ASSERT_EQUAL(stats(&f).errors[CR_EPP_ERR_SHED], 1);
    /* critical, and no objective at all: routed */
    const char *objective[] = {"interactive", NULL};
    for (int i = 0; i < 2; i++) {
        s = cr_epp_stream_open(f.epp, 0, f.t);
        CU_ASSERT_EQUAL(objective_request(&f, s, objective[i], "tenant-a", i ? NULL : "0.001",
                                          2 + i, &g),
                        CR_EPP_MORE);
        char dest[256];
        CU_ASSERT_PTR_NOT_NULL(destination(g.r[0], dest, sizeof dest));
        got_free(&g);
        respond(&f, s, "200", NULL);
        cr_epp_stream_close(s, CR_EPP_END_CLOSED, f.t);
    }
    CU_ASSERT_EQUAL(stats(&f).routed, 2);
    cr_admit_stats st;
    cr_admit_stats_read(cr_core_door(f.core), f.t, &st, NULL, 0, &n);
    CU_ASSERT_EQUAL(st.objective[1].shed, 1);     /* batch */
    CU_ASSERT_EQUAL(st.objective[0].admitted, 1); /* interactive */
    /* its outcome (a 250 ms TTFT) missed its 0.001 ms SLO; the one without
     * an objective counts nowhere */
    CU_ASSERT(st.objective[0].outcomes == 1 && st.objective[0].met == 0);
    CU_ASSERT(st.objective[2].outcomes == 0);
    CU_ASSERT_EQUAL(f.receipts, 3); /* the shed one's too */
    CU_ASSERT_EQUAL(outstanding(&f), 0);
    close_fixture(&f);
}

/* ---- held at the door ------------------------------------------------------ */

static void expect_protocol(fixture *f, cr_epp_stream *s, bytes m);

static void on_wake(void *arg) { atomic_fetch_add((atomic_int *)arg, 1); }

/* A wake's step: what the stream answers a held request, into g. */
static cr_epp_next wake_step(fixture *f, cr_epp_stream *s, got *g)
{
    bytes none = {NULL, 0};
    return step(f, s, none, g);
}

/* Routes n critical requests (no SLO of their own, so never held),
 * answered and left open: every endpoint has work outstanding. */
static void load(fixture *f, cr_epp_stream **open, int n)
{
    for (int i = 0; i < n; i++) {
        got g = {0};
        open[i] = cr_epp_stream_open(f->epp, 0, f->t);
        CU_ASSERT_EQUAL(objective_request(f, open[i], "interactive", "a", NULL, 100 + i, &g),
                        CR_EPP_MORE);
        char dest[256];
        CU_ASSERT_PTR_NOT_NULL(destination(g.r[0], dest, sizeof dest));
        got_free(&g);
    }
}

/* A batch request the door holds: answered only by the timeout override
 * (no response set), the stream listed for a wake. */
static cr_epp_stream *held_request(fixture *f, atomic_int *woken, int p)
{
    cr_epp_stream *s = cr_epp_stream_open(f->epp, 0, f->t);
    cr_epp_stream_wake_by(s, on_wake, woken);
    got g = {0};
    CU_ASSERT_EQUAL(objective_request(f, s, "batch", "tenant-b", NULL, p, &g), CR_EPP_MORE);
    CU_ASSERT_EQUAL_FATAL(g.n, 1);
    CU_ASSERT_EQUAL(g.r[0]->response_case, RESP(_NOT_SET));
    CU_ASSERT_PTR_NOT_NULL_FATAL(g.r[0]->override_message_timeout);
    /* the door's 30 s wait, two dispatch periods and a second */
    CU_ASSERT_EQUAL(g.r[0]->override_message_timeout->seconds,
                    31 + (int64_t)(2 * f->cfg.dispatch_s));
    got_free(&g);
    return s;
}

static uint32_t door_held(fixture *f)
{
    cr_admit_stats st;
    size_t n;
    cr_admit_stats_read(cr_core_door(f->core), f->t, &st, NULL, 0, &n);
    return st.held;
}

/* With a door that has a queue, a sheddable request no endpoint meets is
 * held on its stream: nothing is answered but the timeout override,
 * until the door dispatches it (its destination, at the wake's step) or
 * drops it at its deadline (429 "slo"), its receipt then the route's; a
 * stream that closes while held takes its request out of the door; a
 * stream that cannot be woken is shed at once (429 "slo"). No route's
 * work is left behind. */
/* A fixture whose core has a door with a queue, acting by its budget
 * alone (any work outstanding is over it), and a picker made after it
 * (so it holds), with dispatch_s (0: dispatched by hand). */
static void open_holding(fixture *f, double dispatch_s)
{
    open_fixture(f, 1, CR_EPP_FULL_DUPLEX, 1000);
    set_door(f, 1024, 0.001);
    cr_error err;
    cr_epp_free(f->epp);
    f->cfg.max_requests = 64;
    f->cfg.dispatch_s = dispatch_s;
    f->epp = cr_epp_new(&f->cfg, f->core, &err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(f->epp);
}

static void test_door_holds(void)
{
    fixture f;
    open_holding(&f, 0);
    size_t n;
    cr_epp_stream *busy[2 * N_ENDPOINTS];
    load(&f, busy, 2 * N_ENDPOINTS);
    atomic_int woken = 0;
    cr_epp_stream *s = held_request(&f, &woken, 1);
    CU_ASSERT_EQUAL(door_held(&f), 1);
    CU_ASSERT_EQUAL(cr_epp_dispatch(f.epp), 0); /* still over the budget */
    got g = {0};
    CU_ASSERT_EQUAL(wake_step(&f, s, &g), CR_EPP_MORE); /* a wake for nothing: no answer */
    CU_ASSERT_EQUAL(g.n, 0);
    CU_ASSERT_EQUAL(woken, 0);
    /* the critical requests end: the work falls, the held one goes */
    for (int i = 0; i < 2 * N_ENDPOINTS; i++) {
        respond(&f, busy[i], "200", NULL);
        cr_epp_stream_close(busy[i], CR_EPP_END_CLOSED, f.t);
    }
    CU_ASSERT_EQUAL(cr_epp_dispatch(f.epp), 1);
    CU_ASSERT_EQUAL(woken, 1);
    CU_ASSERT_EQUAL(door_held(&f), 0);
    int receipts = f.receipts;
    CU_ASSERT_EQUAL(wake_step(&f, s, &g), CR_EPP_MORE);
    CU_ASSERT_EQUAL(f.receipts, receipts + 1); /* the dispatched route's, over the queued one */
    CU_ASSERT_EQUAL_FATAL(g.n >= 2, 1); /* the headers with the destination, the body echoed */
    char dest[256];
    CU_ASSERT_PTR_NOT_NULL(destination(g.r[0], dest, sizeof dest));
    got_free(&g);
    respond(&f, s, "200", NULL);
    cr_epp_stream_close(s, CR_EPP_END_CLOSED, f.t);
    CU_ASSERT_EQUAL(outstanding(&f), 0);
    CU_ASSERT_EQUAL(stats(&f).routed, 2 * N_ENDPOINTS + 1);

    /* dropped at its deadline: 429 "slo", after the wait */
    load(&f, busy, 2 * N_ENDPOINTS);
    s = held_request(&f, &woken, 2);
    f.t += 31; /* past the door's 30 s */
    CU_ASSERT_EQUAL(cr_epp_dispatch(f.epp), 1);
    CU_ASSERT_EQUAL(woken, 2);
    CU_ASSERT_EQUAL(wake_step(&f, s, &g), CR_EPP_FINISHED);
    CU_ASSERT_EQUAL_FATAL(g.n, 1);
    char why[256], word[32];
    CU_ASSERT_EQUAL(immediate_status(g.r[0], why, sizeof why), 429);
    CU_ASSERT_PTR_NOT_NULL(strstr(why, "held 31000 ms at the door"));
    CU_ASSERT(set_value(g.r[0]->immediate_response->headers, CR_EPP_SHED_HEADER, word,
                        sizeof word) &&
              !strcmp(word, "slo"));
    got_free(&g);
    cr_epp_stream_close(s, CR_EPP_END_CLOSED, f.t);
    for (int i = 0; i < 2 * N_ENDPOINTS; i++) { /* their work aged out meanwhile */
        respond(&f, busy[i], "200", NULL);
        cr_epp_stream_close(busy[i], CR_EPP_END_CLOSED, f.t);
    }
    load(&f, busy, 2 * N_ENDPOINTS);

    /* closed while held: taken out of the door, counted abandoned */
    uint64_t abandoned = stats(&f).errors[CR_EPP_ERR_ABANDONED];
    s = held_request(&f, &woken, 3);
    CU_ASSERT_EQUAL(door_held(&f), 1);
    cr_epp_stream_close(s, CR_EPP_END_BROKEN, f.t);
    CU_ASSERT_EQUAL(door_held(&f), 0);
    CU_ASSERT_EQUAL(stats(&f).errors[CR_EPP_ERR_ABANDONED], abandoned + 1);
    CU_ASSERT_EQUAL(cr_epp_dispatch(f.epp), 0);
    CU_ASSERT_EQUAL(woken, 2);

    /* a message while held breaks the protocol: Envoy sends nothing until
     * it is answered */
    s = held_request(&f, &woken, 4);
    expect_protocol(&f, s, body_msg(0, "x", 1, 1));
    CU_ASSERT_EQUAL(door_held(&f), 0);
    /* a stream the host cannot wake: shed at once (429 "slo") */
    s = cr_epp_stream_open(f.epp, 0, f.t);
    CU_ASSERT_EQUAL(objective_request(&f, s, "batch", "tenant-b", NULL, 5, &g), CR_EPP_FINISHED);
    CU_ASSERT_EQUAL_FATAL(g.n, 1);
    CU_ASSERT_EQUAL(immediate_status(g.r[0], why, sizeof why), 429);
    CU_ASSERT(set_value(g.r[0]->immediate_response->headers, CR_EPP_SHED_HEADER, word,
                        sizeof word) &&
              !strcmp(word, "slo"));
    got_free(&g);
    cr_epp_stream_close(s, CR_EPP_END_CLOSED, f.t);
    CU_ASSERT_EQUAL(door_held(&f), 0);
    for (int i = 0; i < 2 * N_ENDPOINTS; i++) {
        respond(&f, busy[i], "200", NULL);
        cr_epp_stream_close(busy[i], CR_EPP_END_CLOSED, f.t);
    }
    CU_ASSERT_EQUAL(outstanding(&f), 0);
    cr_admit_stats st;
    cr_admit_stats_read(cr_core_door(f.core), f.t, &st, NULL, 0, &n);
    CU_ASSERT_EQUAL(st.objective[1].queued, 4);
    CU_ASSERT_EQUAL(st.objective[1].dropped, 3); /* the deadline, two closes */
    CU_ASSERT_EQUAL(st.objective[1].shed, 1);
    close_fixture(&f);
}

/* The picker's own ticker dispatches (on its thread, every 5 ms): the
 * wake comes without a hand's cr_epp_dispatch. (The clock stands still
 * while the ticker may read it: the work falls by the streams' resets.) */
static void test_ticker_dispatches(void)
{
    fixture f;
    open_holding(&f, 0.005);
    cr_epp_stream *busy[2 * N_ENDPOINTS];
    load(&f, busy, 2 * N_ENDPOINTS);
    atomic_int woken = 0;
    cr_epp_stream *s = held_request(&f, &woken, 1);
    for (int i = 0; i < 2 * N_ENDPOINTS; i++)
        cr_epp_stream_close(busy[i], CR_EPP_END_BROKEN, f.t);
    for (int i = 0; i < 400 && !atomic_load(&woken); i++)
        nanosleep(&(struct timespec){0, 5000000}, NULL);
    CU_ASSERT_EQUAL_FATAL(atomic_load(&woken), 1);
    got g = {0};
    CU_ASSERT_EQUAL(wake_step(&f, s, &g), CR_EPP_MORE);
    char dest[256];
    CU_ASSERT_FATAL(g.n >= 1);
    CU_ASSERT_PTR_NOT_NULL(destination(g.r[0], dest, sizeof dest));
    got_free(&g);
    respond(&f, s, "200", NULL);
    cr_epp_stream_close(s, CR_EPP_END_CLOSED, f.t);
    CU_ASSERT_EQUAL(outstanding(&f), 0);
    close_fixture(&f);
}

static void expect_protocol(fixture *f, cr_epp_stream *s, bytes m)
{
    got g = {0};
    cr_error err;
    cr_epp_next next = cr_epp_stream_step(s, m.p, m.n, f->t, &out, &err);
    free(m.p);
    CU_ASSERT_EQUAL(next, CR_EPP_FAILED);
    CU_ASSERT_TRUE(err.msg[0] != '\0');
    cr_epp_out_clear(&out);
    got_free(&g);
    cr_epp_stream_close(s, CR_EPP_END_BROKEN, f->t);
}

static void test_protocol_errors(void)
{
    fixture f;
    open_fixture(&f, 1, CR_EPP_FULL_DUPLEX, 1u << 20);
    got g = {0};
    uint8_t junk[] = {0xff, 0xff, 0xff, 0xff, 0x0f};
    bytes m = {malloc(sizeof junk), sizeof junk};
    memcpy(m.p, junk, sizeof junk);
    expect_protocol(&f, cr_epp_stream_open(f.epp, 0, f.t), m);
    expect_protocol(&f, cr_epp_stream_open(f.epp, 0, f.t), body_msg(0, "x", 1, 1));
    cr_epp_stream *s = cr_epp_stream_open(f.epp, 0, f.t);
    step(&f, s, post_headers(NULL), &g);
    expect_protocol(&f, s, post_headers(NULL));
    s = cr_epp_stream_open(f.epp, 0, f.t);
    step(&f, s, post_headers(NULL), &g);
    hdr st[] = {{":status", "200"}};
    expect_protocol(&f, s, headers_msg(1, st, 1, 0, 1)); /* a response before the route */
    /* async_mode and observability_mode are read past */
    s = cr_epp_stream_open(f.epp, 0, f.t);
    hdr h[] = {{":method", "GET"}, {":path", "/"}};
    bytes hm = headers_msg(0, h, 2, 1, 1);
    preq *r = envoy__service__ext_proc__v3__processing_request__unpack(NULL, hm.n, hm.p);
    free(hm.p);
    r->async_mode = r->observability_mode = 1;
    CU_ASSERT_EQUAL(step(&f, s, pack(r), &g), CR_EPP_MORE);
    envoy__service__ext_proc__v3__processing_request__free_unpacked(r, NULL);
    got_free(&g);
    cr_epp_stream_close(s, CR_EPP_END_CLOSED, f.t);
    CU_ASSERT_EQUAL(stats(&f).errors[CR_EPP_ERR_PROTOCOL], 4);
    CU_ASSERT_EQUAL(outstanding(&f), 0);
    close_fixture(&f);
}

/* Every way a stream ends releases its route's work, with one outcome:
 * abandoned mid-body (no route), broken after the route, a 5xx, closed
 * after the route with no response. */
static void test_every_end(void)
{
    fixture f;
    open_fixture(&f, 1, CR_EPP_FULL_DUPLEX, 1u << 20);
    size_t len;
    char *body = chat_body(9, 2000, "llama", &len);
    got g = {0};
    /* abandoned mid-body */
    cr_epp_stream *s = cr_epp_stream_open(f.epp, 0, f.t);
    step(&f, s, post_headers(NULL), &g);
    step(&f, s, body_msg(0, body, 100, 0), &g);
    cr_epp_stream_close(s, CR_EPP_END_BROKEN, f.t);
    CU_ASSERT_EQUAL(stats(&f).errors[CR_EPP_ERR_ABANDONED], 1);
    CU_ASSERT_EQUAL(stats(&f).outcomes, 0);
    for (int way = 0; way < 3; way++) {
        s = cr_epp_stream_open(f.epp, 0, f.t);
        step(&f, s, post_headers(NULL), &g);
        step(&f, s, body_msg(0, body, len, 1), &g);
        got_free(&g);
        CU_ASSERT_EQUAL(outstanding(&f), 1);
        if (way == 1) {
            hdr st[] = {{":status", "503"}};
            step(&f, s, headers_msg(1, st, 1, 1, 1), &g);
            got_free(&g);
            CU_ASSERT_EQUAL(outstanding(&f), 0);
        }
        cr_epp_stream_close(s, way == 0 ? CR_EPP_END_BROKEN : CR_EPP_END_CLOSED, f.t);
        CU_ASSERT_EQUAL(outstanding(&f), 0);
        CU_ASSERT_EQUAL(stats(&f).outcomes, (uint64_t)way + 1);
    }
    cr_epp_stats st = stats(&f);
    CU_ASSERT_EQUAL(st.errors[CR_EPP_ERR_RESET], 1);
    CU_ASSERT_EQUAL(st.errors[CR_EPP_ERR_UPSTREAM_5XX], 1);
    CU_ASSERT_EQUAL(st.streams_open, 0);
    free(body);
    close_fixture(&f);
}

/* The hand-written echo is byte for byte what protobuf-c packs. */
static void test_chunk_wire(void)
{
    size_t sizes[] = {0, 1, 127, 128, 16383, 16384, 62000, 2097152};
    uint8_t *data = malloc(2097152);
    for (size_t i = 0; i < 2097152; i++)
        data[i] = (uint8_t)(i * 31);
    fixture f;
    open_fixture(&f, 1, CR_EPP_FULL_DUPLEX, 1u << 20);
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++)
        for (int eos = 0; eos < 2; eos++)
            for (int response = 0; response < 2; response++) {
                Envoy__Service__ExtProc__V3__StreamedBodyResponse sb;
                Envoy__Service__ExtProc__V3__BodyMutation bm;
                Envoy__Service__ExtProc__V3__CommonResponse cr;
                Envoy__Service__ExtProc__V3__BodyResponse br;
                presp r;
                envoy__service__ext_proc__v3__streamed_body_response__init(&sb);
                envoy__service__ext_proc__v3__body_mutation__init(&bm);
                envoy__service__ext_proc__v3__common_response__init(&cr);
                envoy__service__ext_proc__v3__body_response__init(&br);
                envoy__service__ext_proc__v3__processing_response__init(&r);
                sb.body.data = data;
                sb.body.len = sizes[k];
                sb.end_of_stream = eos;
                bm.mutation_case = STREAMED;
                bm.streamed_response = &sb;
                cr.body_mutation = &bm;
                br.response = &cr;
                r.response_case = response
                    ? RESP(RESPONSE_BODY)
                    : RESP(REQUEST_BODY);
                r.request_body = &br;
                size_t n = envoy__service__ext_proc__v3__processing_response__get_packed_size(&r);
                uint8_t *want = malloc(n);
                envoy__service__ext_proc__v3__processing_response__pack(&r, want);
                /* the stream's echo: a PASS request's body chunk of this size */
                cr_epp_stream *s = cr_epp_stream_open(f.epp, 0, f.t);
                got g = {0};
                hdr h[] = {{":method", "POST"}, {":path", "/other"}};
                step(&f, s, headers_msg(0, h, 2, 0, 1), &g);
                got_free(&g);
                cr_error err;
                cr_epp_stream_step(s, NULL, 0, f.t, &out, &err); /* an empty message: refused */
                cr_epp_out_clear(&out);
                cr_epp_stream_close(s, CR_EPP_END_CLOSED, f.t);
                s = cr_epp_stream_open(f.epp, 0, f.t);
                step(&f, s, headers_msg(0, h, 2, 0, 1), &g);
                got_free(&g);
                if (response) {
                    hdr st[] = {{":status", "200"}};
                    step(&f, s, headers_msg(1, st, 1, 0, 1), &g);
                    got_free(&g);
                }
                bytes m = body_msg(response, data, sizes[k], eos);
                cr_epp_stream_step(s, m.p, m.n, f.t, &out, &err);
                free(m.p);
                if (sizes[k] <= CR_EPP_CHUNK_BYTES) {
                    CU_ASSERT_EQUAL_FATAL(out.n, 1);
                    CU_ASSERT_EQUAL(out.msg[0].len, n);
                    CU_ASSERT_EQUAL(memcmp(out.msg[0].data, want, n), 0);
                } else {
                    size_t chunks = (sizes[k] + CR_EPP_CHUNK_BYTES - 1) / CR_EPP_CHUNK_BYTES;
                    CU_ASSERT_EQUAL(out.n, chunks);
                }
                cr_epp_out_clear(&out);
                cr_epp_stream_close(s, CR_EPP_END_CLOSED, f.t);
                free(want);
            }
    CU_ASSERT_EQUAL(outstanding(&f), 0);
    free(data);
    close_fixture(&f);
}

/* Config checks name the flag. */
static void test_config(void)
{
    fixture f;
    open_fixture(&f, 1, CR_EPP_FULL_DUPLEX, 1000);
    const char *flags[] = {"--epp-fallbacks", "--epp-max-body-bytes", "--epp-max-body-bytes",
                           "--epp-tokenize-timeout", "--epp-max-requests", "--epp-owner-header",
                           "--epp-max-buffered-bytes"};
    for (int i = 0; i < 7; i++) {
        cr_epp_config c = f.cfg;
        switch (i) {
        case 0: c.fallbacks = CR_EPP_MAX_FALLBACKS + 1; break;
        case 1: c.max_body_bytes = 0; break;
        case 2: c.max_body_bytes = CR_EPP_MAX_BODY_LIMIT + 1; break;
        case 3: c.tokenize_timeout_s = 0; break;
        case 4: c.max_requests = 0; break;
        case 5: c.owner_header = "X-Session"; break;
        default: c.max_buffered_bytes = c.max_body_bytes - 1; break;
        }
        cr_error err;
        CU_ASSERT_PTR_NULL(cr_epp_new(&c, f.core, &err));
        CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, flags[i]));
    }
    CU_ASSERT_STRING_EQUAL(cr_epp_error_name(CR_EPP_ERR_SHED), "shed");
    CU_ASSERT_STRING_EQUAL(cr_epp_error_name(CR_EPP_N_ERRORS), "unknown");
    CU_ASSERT_FALSE(cr_epp_may_block(f.epp));
    close_fixture(&f);
}

/* Engine mode whose /tokenize cannot be reached (a loopback port nothing
 * listens on): the request is routed by the estimate, the fallback
 * counted. */
static void test_engine_fallback(void)
{
    static const char *const refused[N_ENDPOINTS] = {"127.0.0.1:1", "127.0.0.1:2",
                                                     "127.0.0.1:3", "127.0.0.1:4"};
    set_addresses = refused;
    tokens_mode = CR_EPP_TOKENS_ENGINE;
    fixture f;
    open_fixture(&f, 1, CR_EPP_FULL_DUPLEX, 1u << 20);
    set_addresses = addresses;
    tokens_mode = CR_EPP_TOKENS_ESTIMATE;
    CU_ASSERT_TRUE(cr_epp_may_block(f.epp));
    size_t len;
    char *body = chat_body(4, 3000, "llama", &len);
    cr_epp_stream *s = cr_epp_stream_open(f.epp, 0, f.t);
    got g = {0};
    step(&f, s, post_headers(NULL), &g);
    CU_ASSERT_EQUAL(step(&f, s, body_msg(0, body, len, 1), &g), CR_EPP_MORE);
    char dest[512];
    CU_ASSERT_PTR_NOT_NULL(destination(g.r[0], dest, sizeof dest));
    got_free(&g);
    CU_ASSERT_EQUAL(stats(&f).errors[CR_EPP_ERR_TOKENIZE], 1);
    cr_epp_stream_close(s, CR_EPP_END_CLOSED, f.t);
    CU_ASSERT_EQUAL(outstanding(&f), 0);
    free(body);
    close_fixture(&f);
}

/* An endpoint whose address is no ip:port is left out of destinations. */
static void test_bad_address(void)
{
    static const char *const mixed[N_ENDPOINTS] = {"vllm-0.svc:8000", "http://10.0.0.2:8000",
                                                   "10.0.0.3", "10.0.0.4:8000"};
    set_addresses = mixed;
    fixture f;
    open_fixture(&f, 1, CR_EPP_FULL_DUPLEX, 1u << 20);
    set_addresses = addresses;
    for (int i = 0; i < 8; i++) {
        cr_epp_stream *s = cr_epp_stream_open(f.epp, 0, f.t);
        got g = {0};
        hdr h[] = {{":method", "GET"}, {":path", "/v1/models"}};
        step(&f, s, headers_msg(0, h, 2, 1, 1), &g);
        char dest[512];
        CU_ASSERT_PTR_NOT_NULL(destination(g.r[0], dest, sizeof dest));
        CU_ASSERT_STRING_EQUAL(dest, "10.0.0.4:8000");
        got_free(&g);
        cr_epp_stream_close(s, CR_EPP_END_CLOSED, f.t);
    }
    CU_ASSERT_TRUE(stats(&f).bad_addresses > 0);
    CU_ASSERT_EQUAL(outstanding(&f), 0);
    close_fixture(&f);
}

/* A body ended by request trailers (no end_of_stream): routed then, the
 * echo's last chunk without end_of_stream, the trailers answered after;
 * the owner comes from the header, else the body's user. */
static void test_trailers_and_owner(void)
{
    fixture f;
    open_fixture(&f, 1, CR_EPP_FULL_DUPLEX, 1u << 20);
    const char *body = "{\"model\":\"m\",\"user\":\"u-1\",\"messages\":"
                       "[{\"role\":\"user\",\"content\":\"hi\"}]}";
    for (int with_header = 0; with_header < 2; with_header++) {
        cr_epp_stream *s = cr_epp_stream_open(f.epp, 0, f.t);
        got g = {0};
        step(&f, s, post_headers(with_header ? "sess-9" : NULL), &g);
        CU_ASSERT_EQUAL(step(&f, s, body_msg(0, body, strlen(body), 0), &g), CR_EPP_MORE);
        CU_ASSERT_EQUAL(g.n, 0);
        CU_ASSERT_EQUAL(step(&f, s, trailers_msg(0), &g), CR_EPP_MORE);
        CU_ASSERT_EQUAL_FATAL(g.n, 3);
        char dest[512];
        CU_ASSERT_PTR_NOT_NULL(destination(g.r[0], dest, sizeof dest));
        uint8_t echo[256];
        size_t len = 0;
        CU_ASSERT_FALSE(streamed(&g, 1, 0, echo, &len));
        CU_ASSERT_EQUAL(len, strlen(body));
        CU_ASSERT_EQUAL(g.r[2]->response_case,
                        RESP(REQUEST_TRAILERS));
        got_free(&g);
        cr_epp_stream_close(s, CR_EPP_END_CLOSED, f.t);
        cr_core_stats cs;
        cr_core_stats_read(f.core, &cs);
        CU_ASSERT_EQUAL(cs.tracked_owners, (uint64_t)with_header + 1);
    }
    CU_ASSERT_EQUAL(outstanding(&f), 0);
    close_fixture(&f);
}

/* A hint whose only endpoint is draining while others serve: 503, and
 * nothing left outstanding. */
static void test_subset_draining(void)
{
    fixture f;
    open_fixture(&f, 1, CR_EPP_FULL_DUPLEX, 1u << 20);
    cr_error err;
    CU_ASSERT_EQUAL_FATAL(cr_core_drain_endpoint(f.core, "e1", 1, NULL, &err), CR_OK);
    const char *hint[] = {addresses[1]};
    cr_epp_stream *s = cr_epp_stream_open(f.epp, 0, f.t);
    hdr h[] = {{":method", "GET"}, {":path", "/v1/models"}};
    expect_immediate(&f, s, with_metadata(headers_msg(0, h, 2, 1, 1), "envoy.lb.subset_hint",
                                          CR_EPP_SUBSET_KEY, hint, 1, 1, -1),
                     503, "no usable endpoint");
    CU_ASSERT_EQUAL(outstanding(&f), 0);
    CU_ASSERT_EQUAL(stats(&f).errors[CR_EPP_ERR_NO_ENDPOINT], 1);
    close_fixture(&f);
}

/* A completions prompt of token ids gives the keys a Route caller
 * computes for the same tokens under the model's namespace: a Route call
 * for them afterwards finds the prefix where the picker sent it. */
static void test_token_ids_match_route(void)
{
    fixture f;
    open_fixture(&f, 1, CR_EPP_FULL_DUPLEX, 1u << 20);
    uint32_t tok[64];
    char body[1024];
    int n = snprintf(body, sizeof body, "{\"model\":\"m\",\"cache_salt\":\"s1\",\"prompt\":[");
    for (int i = 0; i < 64; i++) {
        tok[i] = 1000 + (uint32_t)i * 7;
        n += snprintf(body + n, sizeof body - (size_t)n, "%s%u", i ? "," : "", tok[i]);
    }
    snprintf(body + n, sizeof body - (size_t)n, "]}");
    cr_epp_stream *s = cr_epp_stream_open(f.epp, 0, f.t);
    got g = {0};
    hdr h[] = {{":method", "POST"}, {":path", "/v1/completions"}};
    step(&f, s, headers_msg(0, h, 2, 0, 1), &g);
    CU_ASSERT_EQUAL(step(&f, s, body_msg(0, body, strlen(body), 1), &g), CR_EPP_MORE);
    char dest[512];
    CU_ASSERT_PTR_NOT_NULL_FATAL(destination(g.r[0], dest, sizeof dest));
    dest[strcspn(dest, ",")] = '\0';
    got_free(&g);
    cr_epp_stream_close(s, CR_EPP_END_CLOSED, f.t);
    uint64_t keys[4];
    for (int b = 0; b < 4; b++)
        keys[b] = cr_route_block_hash(b ? keys[b - 1] : 0, tok + 16 * b, 16);
    const char space[] = "m\x1fs1";
    for (int salted = 0; salted < 2; salted++) {
        cr_route_request q = {.hashes = keys, .n_hashes = 4, .space = space,
                              .space_len = salted ? sizeof space - 1 : 1};
        cr_route_answer a;
        cr_error err;
        f.t += 10;
        CU_ASSERT_EQUAL_FATAL(cr_core_route(f.core, &q, 1, &a, NULL, &err), CR_OK);
        if (salted) {
            CU_ASSERT_STRING_EQUAL(addresses[a.shard], dest);
            CU_ASSERT_EQUAL(a.reason, CR_ROUTE_WHY_PREFIX);
            CU_ASSERT_EQUAL(a.cached_tokens, 64);
        } else { /* without the salt: another namespace, no hit */
            CU_ASSERT_EQUAL(a.cached_tokens, 0);
        }
    }
    close_fixture(&f);
}

/* The longest destination: nine endpoints of the longest ip:port text
 * (an IPv6 of 45 bytes, port 65535), best and 8 fallbacks, each whole. */
static void test_longest_destination(void)
{
    enum { N = CR_EPP_MAX_FALLBACKS + 1 };
    cr_core_config cc;
    cr_test_core_config(&cc, N);
    cr_error err;
    cr_core *core = cr_core_new(&cc, NULL, NULL, &err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(core);
    char ids[N][8], addr[N][64];
    cr_endpoint_spec v[N];
    for (int i = 0; i < N; i++) {
        snprintf(ids[i], sizeof ids[i], "e%d", i);
        snprintf(addr[i], sizeof addr[i], "[ffff:ffff:ffff:ffff:ffff:ffff:255.255.255.2%02d]:65535",
                 i);
        v[i] = (cr_endpoint_spec){.id = ids[i], .address = addr[i], .weight = 1};
    }
    CU_ASSERT_EQUAL_FATAL(cr_core_set_endpoints(core, v, N, NULL, &err), CR_OK);
    cr_epp_config c = {.fallbacks = CR_EPP_MAX_FALLBACKS, .owner_header = "",
                       .max_body_bytes = 1000, .tokenize_timeout_s = 0.05, .block_tokens = 16,
                       .max_hashes = 64, .max_requests = 1,
                       .max_buffered_bytes = CR_EPP_MAX_BODY_LIMIT};
    cr_epp *epp = cr_epp_new(&c, core, &err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(epp);
    cr_epp_stream *s = cr_epp_stream_open(epp, 0, 0);
    hdr h[] = {{":method", "GET"}, {":path", "/v1/models"}};
    bytes m = headers_msg(0, h, 2, 1, 1);
    CU_ASSERT_EQUAL(cr_epp_stream_step(s, m.p, m.n, 0, &out, &err), CR_EPP_MORE);
    free(m.p);
    CU_ASSERT_EQUAL_FATAL(out.n, 1);
    presp *r = envoy__service__ext_proc__v3__processing_response__unpack(NULL, out.msg[0].len,
                                                                         out.msg[0].data);
    char dest[1024], *parts[N + 1];
    CU_ASSERT_PTR_NOT_NULL_FATAL(destination(r, dest, sizeof dest));
    CU_ASSERT_EQUAL_FATAL(split(dest, parts, N + 1), N);
    for (int i = 0; i < N; i++)
        CU_ASSERT_EQUAL(strlen(parts[i]), 53);
    envoy__service__ext_proc__v3__processing_response__free_unpacked(r, NULL);
    cr_epp_out_clear(&out);
    cr_epp_stream_close(s, CR_EPP_END_CLOSED, 0);
    cr_epp_free(epp);
    cr_core_free(core);
}

/* --epp-max-buffered-bytes: bodies being gathered share one budget; a
 * body that would pass it is answered 429 (shed) and freed, so the next
 * stream gathers again; every byte is given back when the streams end. */
static void test_buffered_budget(void)
{
    fixture f;
    open_fixture(&f, 1, CR_EPP_FULL_DUPLEX, 1u << 20);
    cr_epp_free(f.epp);
    f.cfg.max_buffered_bytes = 1u << 20; /* one whole body's room */
    cr_error err;
    f.epp = cr_epp_new(&f.cfg, f.core, &err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(f.epp);
    size_t len;
    char *body = chat_body(1, 600000, "llama", &len);
    cr_epp_stream *a = cr_epp_stream_open(f.epp, 7, f.t), *b = cr_epp_stream_open(f.epp, 7, f.t);
    got g = {0};
    step(&f, a, post_headers(NULL), &g);
    step(&f, b, post_headers(NULL), &g);
    got_free(&g);
    CU_ASSERT_EQUAL(step(&f, a, body_msg(0, body, 400000, 0), &g), CR_EPP_MORE);
    CU_ASSERT_TRUE(stats(&f).buffered >= 400000);
    /* b's 600,000 bytes (room for 1 MiB) would take the budget past 1 MiB
     * with a's room (512 KiB) */
    expect_immediate(&f, b, body_msg(0, body, 600000, 0), 429, "--epp-max-buffered-bytes");
    CU_ASSERT_EQUAL(stats(&f).errors[CR_EPP_ERR_SHED], 1);
    CU_ASSERT_EQUAL(step(&f, a, body_msg(0, body + 400000, len - 400000, 1), &g),
                    CR_EPP_MORE);
    char dest[512];
    CU_ASSERT_PTR_NOT_NULL(destination(g.r[0], dest, sizeof dest));
    got_free(&g);
    CU_ASSERT_EQUAL(stats(&f).buffered, 0); /* routed: the body went back as its echo */
    cr_epp_stream_close(a, CR_EPP_END_BROKEN, f.t);
    CU_ASSERT_EQUAL(outstanding(&f), 0);
    free(body);
    close_fixture(&f);
}

/* --epp-base-model: that model's requests share the namespace of KV events
 * that name no adapter, so a prompt routed as "base" and the same prompt
 * as a Route with no namespace land on the same keys; an adapter's equal
 * prompt stays apart. */
static void test_base_model_namespace(void)
{
    fixture f;
    open_fixture(&f, 1, CR_EPP_FULL_DUPLEX, 1u << 20);
    cr_epp_free(f.epp);
    f.cfg.base_model = "base";
    cr_error err;
    f.epp = cr_epp_new(&f.cfg, f.core, &err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(f.epp);
    char a[64], b[64];
    one_request(&f, 9, "base", a, sizeof a);
    one_request(&f, 9, "base", b, sizeof b);
    CU_ASSERT_STRING_EQUAL(a, b);
    CU_ASSERT_TRUE(f.last_cached > 0);
    one_request(&f, 9, "adapter-1", b, sizeof b);
    CU_ASSERT_EQUAL(f.last_cached, 0);
    close_fixture(&f);
}

static const cr_test_case stream_tests[] = {
    {"buffered budget", test_buffered_budget},
    {"base model namespace", test_base_model_namespace},
    {"the longest destination, whole", test_longest_destination},
    {"max body, +1, 10 MB, bad JSON, non-UTF-8, deep", test_hostile_bodies},
    {"token ids: the keys a Route caller makes", test_token_ids_match_route},
    {"trailers end a body; the owner", test_trailers_and_owner},
    {"a hint of a draining endpoint: 503", test_subset_draining},
    {"engine mode falls back to the estimate", test_engine_fallback},
    {"addresses that are no ip:port left out", test_bad_address},
    {"full duplex: destination, fallbacks, every byte echoed", test_full_duplex},
    {"the same prompt twice: a prefix hit", test_prefix_hit},
    {"buffered mode", test_buffered},
    {"GET and other paths by load", test_get_by_load},
    {"subset hint", test_subset},
    {"served endpoint booked", test_served},
    {"400, 413, 429, 503", test_errors},
    {"objective headers, x-cacheroute-shed", test_objective_headers},
    {"the door: 429 for a sheddable objective only", test_door_sheds},
    {"the door holds: answered at the dispatch or the deadline", test_door_holds},
    {"the picker's ticker dispatches", test_ticker_dispatches},
    {"protocol errors", test_protocol_errors},
    {"every end releases the route once", test_every_end},
    {"the echo by hand equals protobuf-c", test_chunk_wire},
    {"config checks", test_config},
    {NULL, NULL},
};

static const cr_test_suite suites[] = {{"epp_stream", stream_tests}};
CR_TEST_MAIN(suites)
