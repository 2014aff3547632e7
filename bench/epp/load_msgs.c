/* The load driver's messages (load_msgs.h). A conversation is an OpenAI
 * chat body as a chat client sends it: one system prompt shared by every
 * conversation (a deployment's prompt prefix), then user and assistant
 * turns of English-like text with escaped newlines, streaming with usage
 * asked for; its answer is an SSE stream of token chunks and a final chunk
 * with usage, as vLLM sends it. */
#include "load_msgs.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "envoy/service/ext_proc/v3/external_processor.pb-c.h"

#define MODEL "meta-llama/Llama-3.1-8B-Instruct"

typedef Envoy__Config__Core__V3__HeaderValue HeaderValue;
typedef Envoy__Service__ExtProc__V3__ProcessingRequest ProcessingRequest;

/* ---- text ---------------------------------------------------------------- */

typedef struct text {
    char *p;
    size_t len, cap;
} text;

static int text_add(text *t, const char *s, size_t n)
{
    if (t->len + n + 1 > t->cap) {
        size_t cap = (t->len + n + 1) * 2;
        char *p = realloc(t->p, cap);
        if (!p)
            return -1;
        t->p = p;
        t->cap = cap;
    }
    memcpy(t->p + t->len, s, n);
    t->len += n;
    t->p[t->len] = '\0';
    return 0;
}

static int text_str(text *t, const char *s) { return text_add(t, s, strlen(s)); }

static const char *const words[] = {
    "the", "model", "request", "cache", "prefix", "token", "answer", "question", "please",
    "explain", "how", "why", "what", "data", "system", "user", "assistant", "with", "and",
    "of", "to", "in", "for", "is", "that", "this", "latency", "throughput", "memory", "block",
    "server", "client", "route", "endpoint", "gateway", "kernel", "batch", "queue", "network",
    "example", "function", "returns", "value", "error", "should", "could", "would", "because",
    "therefore", "however", "summary", "document", "section", "table", "figure", "result",
    "measure", "compare", "policy", "customer", "invoice", "account", "support", "ticket"};
#define N_WORDS (sizeof words / sizeof words[0])

static uint64_t next_rand(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* About n bytes of JSON-safe prose from seed into t. */
static int prose(text *t, size_t n, uint64_t seed)
{
    uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
    size_t end = t->len + n;
    for (unsigned w = 1; t->len < end; w++) {
        const char *word = words[next_rand(&s) % N_WORDS];
        if (text_str(t, word) || text_str(t, w % 40 == 0 ? ".\\n\\n" : w % 12 == 0 ? ", " : " "))
            return -1;
    }
    return 0;
}

/* The chat body: shared system prompt, turns, parameters; padded with
 * prose in the last user turn to about body_bytes. */
static int chat_body(text *t, unsigned conv, size_t body_bytes)
{
    size_t sys = body_bytes / 5 < 4000 ? body_bytes / 5 : 4000;
    unsigned turns = body_bytes < 4096 ? 0 : body_bytes < 65536 ? 2 : 4; /* earlier exchanges */
    size_t per = body_bytes > sys + 400 ? (body_bytes - sys - 400) / (2 * turns + 1) : 16;
    if (text_str(t, "{\"model\":\"" MODEL "\",\"messages\":[{\"role\":\"system\",\"content\":\"")
        || prose(t, sys, 7) || text_str(t, "\"}"))
        return -1;
    for (unsigned k = 0; k < 2 * turns; k++) {
        if (text_str(t, k % 2 ? ",{\"role\":\"assistant\",\"content\":\"" : ",{\"role\":\"user\",\"content\":\"")
            || prose(t, per, 1000u * conv + k + 11) || text_str(t, "\"}"))
            return -1;
    }
    char tail[256];
    int n = snprintf(tail, sizeof tail,
                     "\"}],\"stream\":true,\"stream_options\":{\"include_usage\":true},"
                     "\"max_tokens\":256,\"temperature\":0.7,\"user\":\"bench-user-%u\"}",
                     conv);
    if (text_str(t, ",{\"role\":\"user\",\"content\":\""))
        return -1;
    size_t want = body_bytes > t->len + (size_t)n ? body_bytes - t->len - (size_t)n : 16;
    if (prose(t, want > 8 ? want - 8 : 1, 1000u * conv + 999))
        return -1;
    while (t->len + (size_t)n < body_bytes && !text_str(t, "."))
        ;
    return text_add(t, tail, (size_t)n);
}

/* ---- packing ------------------------------------------------------------- */

static grpc_slice pack(const ProcessingRequest *m)
{
    size_t n = envoy__service__ext_proc__v3__processing_request__get_packed_size(m);
    grpc_slice s = grpc_slice_malloc(n);
    envoy__service__ext_proc__v3__processing_request__pack(m, GRPC_SLICE_START_PTR(s));
    return s;
}

static void header(HeaderValue *h, HeaderValue **slot, const char *key, const char *value)
{
    envoy__config__core__v3__header_value__init(h);
    h->key = (char *)key;
    h->raw_value.data = (uint8_t *)value;
    h->raw_value.len = strlen(value);
    *slot = h;
}

/* A headers message of n (key, value) pairs; request headers announce the
 * body modes as Envoy 1.33 and later do on a stream's first message. */
static grpc_slice headers_msg(const char *const kv[][2], size_t n, int request)
{
    HeaderValue hv[16], *hp[16];
    Envoy__Config__Core__V3__HeaderMap map;
    Envoy__Service__ExtProc__V3__HttpHeaders hh;
    Envoy__Service__ExtProc__V3__ProtocolConfiguration pc;
    ProcessingRequest m;
    envoy__config__core__v3__header_map__init(&map);
    envoy__service__ext_proc__v3__http_headers__init(&hh);
    envoy__service__ext_proc__v3__protocol_configuration__init(&pc);
    envoy__service__ext_proc__v3__processing_request__init(&m);
    for (size_t i = 0; i < n && i < 16; i++)
        header(&hv[i], &hp[i], kv[i][0], kv[i][1]);
    map.n_headers = n < 16 ? n : 16;
    map.headers = hp;
    hh.headers = &map;
    if (request) {
        pc.request_body_mode =
            ENVOY__EXTENSIONS__FILTERS__HTTP__EXT_PROC__V3__PROCESSING_MODE__BODY_SEND_MODE__FULL_DUPLEX_STREAMED;
        pc.response_body_mode = pc.request_body_mode;
        m.protocol_config = &pc;
        m.request_case = ENVOY__SERVICE__EXT_PROC__V3__PROCESSING_REQUEST__REQUEST_REQUEST_HEADERS;
        m.request_headers = &hh;
    } else {
        m.request_case = ENVOY__SERVICE__EXT_PROC__V3__PROCESSING_REQUEST__REQUEST_RESPONSE_HEADERS;
        m.response_headers = &hh;
    }
    return pack(&m);
}

static grpc_slice body_msg(const char *p, size_t n, int end, int request)
{
    Envoy__Service__ExtProc__V3__HttpBody b;
    ProcessingRequest m;
    envoy__service__ext_proc__v3__http_body__init(&b);
    envoy__service__ext_proc__v3__processing_request__init(&m);
    b.body.data = (uint8_t *)p;
    b.body.len = n;
    b.end_of_stream = end;
    if (request) {
        m.request_case = ENVOY__SERVICE__EXT_PROC__V3__PROCESSING_REQUEST__REQUEST_REQUEST_BODY;
        m.request_body = &b;
    } else {
        m.request_case = ENVOY__SERVICE__EXT_PROC__V3__PROCESSING_REQUEST__REQUEST_RESPONSE_BODY;
        m.response_body = &b;
    }
    return pack(&m);
}

static int sse_event(text *t, unsigned i, int last, size_t prompt_tokens)
{
    char ev[512];
    int n;
    if (!last)
        n = snprintf(ev, sizeof ev,
                     "data: {\"id\":\"chatcmpl-bench\",\"object\":\"chat.completion.chunk\","
                     "\"created\":1765000000,\"model\":\"" MODEL "\",\"choices\":[{\"index\":0,"
                     "\"delta\":{\"content\":\" %s\"},\"finish_reason\":null}]}\n\n",
                     words[i % N_WORDS]);
    else
        n = snprintf(ev, sizeof ev,
                     "data: {\"id\":\"chatcmpl-bench\",\"object\":\"chat.completion.chunk\","
                     "\"created\":1765000000,\"model\":\"" MODEL "\",\"choices\":[],"
                     "\"usage\":{\"prompt_tokens\":%zu,\"completion_tokens\":%u,"
                     "\"total_tokens\":%zu,\"prompt_tokens_details\":{\"cached_tokens\":%zu}}}\n\n"
                     "data: [DONE]\n\n",
                     prompt_tokens, i, prompt_tokens + i, prompt_tokens / 2);
    return text_add(t, ev, (size_t)n);
}

int epp_conv_make(epp_conv *c, unsigned i, const epp_conv_opts *o)
{
    memset(c, 0, sizeof *c);
    text body = {0};
    if (chat_body(&body, i, o->body_bytes))
        goto fail;
    c->body_bytes = body.len;
    size_t chunk = o->chunk_bytes ? o->chunk_bytes : 16384;
    size_t n_chunks = (body.len + chunk - 1) / chunk;
    c->req = calloc(n_chunks + 1, sizeof *c->req);
    c->resp = calloc(o->sse_chunks + 2, sizeof *c->resp);
    if (!c->req || !c->resp)
        goto fail;
    char length[32], session[32];
    snprintf(length, sizeof length, "%zu", body.len);
    snprintf(session, sizeof session, "conv-%u", i);
    const char *const req_h[][2] = {
        {":authority", "inference-gateway.example"}, {":path", "/v1/chat/completions"},
        {":method", "POST"}, {":scheme", "http"}, {"content-type", "application/json"},
        {"content-length", length}, {"accept", "text/event-stream"},
        {"user-agent", "OpenAI/Python 1.54.0"}, {"x-session-id", session},
        {"x-request-id", "5d1c2b4e-bench"}, {"x-forwarded-proto", "http"}};
    c->req[c->n_req++] = headers_msg(req_h, sizeof req_h / sizeof req_h[0], 1);
    for (size_t off = 0; off < body.len; off += chunk) {
        size_t n = body.len - off < chunk ? body.len - off : chunk;
        c->req[c->n_req++] = body_msg(body.p + off, n, off + n == body.len, 1);
    }
    const char *const resp_h[][2] = {
        {":status", "200"}, {"content-type", "text/event-stream; charset=utf-8"},
        {"date", "Sun, 06 Dec 2026 12:00:00 GMT"}, {"server", "uvicorn"},
        {"x-envoy-upstream-service-time", "12"}};
    c->resp[c->n_resp++] = headers_msg(resp_h, sizeof resp_h / sizeof resp_h[0], 0);
    for (unsigned k = 0; k <= o->sse_chunks; k++) {
        text ev = {0};
        int last = k == o->sse_chunks;
        if (sse_event(&ev, k, last, body.len / 4)) {
            free(ev.p);
            goto fail;
        }
        c->sse_bytes += ev.len;
        c->resp[c->n_resp++] = body_msg(ev.p, ev.len, last, 0);
        free(ev.p);
    }
    free(body.p);
    return 0;
fail:
    free(body.p);
    epp_conv_free(c);
    return -1;
}

void epp_conv_free(epp_conv *c)
{
    for (size_t k = 0; k < c->n_req; k++)
        grpc_slice_unref(c->req[k]);
    for (size_t k = 0; k < c->n_resp; k++)
        grpc_slice_unref(c->resp[k]);
    free(c->req);
    free(c->resp);
    memset(c, 0, sizeof *c);
}

/* ---- reading answers ----------------------------------------------------- */

typedef struct span {
    const unsigned char *p;
    size_t len;
} span;

static int varint(span *s, uint64_t *v)
{
    *v = 0;
    for (unsigned shift = 0; shift < 64 && s->len; shift += 7) {
        unsigned char b = *s->p++;
        s->len--;
        *v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80))
            return 0;
    }
    return -1;
}

/* The last occurrence of field num in s (protobuf's rule for a message
 * field seen twice is a merge; ours are never repeated): its bytes when
 * length-delimited, else its varint in *v. 1 found, 0 not, -1 malformed. */
static int field(span s, unsigned num, span *out, uint64_t *v)
{
    int found = 0;
    while (s.len) {
        uint64_t tag, x;
        if (varint(&s, &tag))
            return -1;
        switch (tag & 7) {
        case 0:
            if (varint(&s, &x))
                return -1;
            if ((tag >> 3) == num && v) {
                *v = x;
                found = 1;
            }
            break;
        case 2:
            if (varint(&s, &x) || x > s.len)
                return -1;
            if ((tag >> 3) == num && out) {
                out->p = s.p;
                out->len = (size_t)x;
                found = 1;
            }
            s.p += x;
            s.len -= (size_t)x;
            break;
        case 1:
            if (s.len < 8)
                return -1;
            s.p += 8;
            s.len -= 8;
            break;
        case 5:
            if (s.len < 4)
                return -1;
            s.p += 4;
            s.len -= 4;
            break;
        default:
            return -1;
        }
    }
    return found;
}

/* A path of message fields from s; 0 when every one is there. */
static int path(span s, const unsigned *nums, size_t n, span *out)
{
    for (size_t i = 0; i < n; i++)
        if (field(s, nums[i], &s, NULL) != 1)
            return -1;
    *out = s;
    return 0;
}

static void read_body(span s, epp_answer *a)
{
    /* BodyResponse.response / CommonResponse.body_mutation / streamed_response */
    static const unsigned p[] = {1, 3, 3};
    span sr, body = {0};
    uint64_t end = 0;
    if (path(s, p, 3, &sr) || field(sr, 1, &body, NULL) < 0 || field(sr, 2, NULL, &end) < 0) {
        a->kind = EPP_A_BAD;
        return;
    }
    a->body_len = body.len;
    a->end = end != 0;
}

static void read_destination(span s, epp_answer *a)
{
    /* HeadersResponse.response / CommonResponse */
    span common, mut, key, value;
    uint64_t crc = 0;
    if (field(s, 1, &common, NULL) != 1 || field(common, 5, NULL, &crc) < 0 || !crc)
        return;
    if (field(common, 2, &mut, NULL) != 1)
        return;
    /* each HeaderMutation.set_headers: HeaderValueOption.header */
    span m = mut;
    while (m.len) {
        uint64_t tag, len;
        if (varint(&m, &tag) || (tag & 7) != 2 || varint(&m, &len) || len > m.len)
            return;
        span opt = {m.p, (size_t)len}, hv;
        m.p += len;
        m.len -= (size_t)len;
        if ((tag >> 3) != 1 || field(opt, 1, &hv, NULL) != 1)
            continue;
        static const char want[] = "x-gateway-destination-endpoint";
        if (field(hv, 1, &key, NULL) == 1 && key.len == sizeof want - 1
            && !memcmp(key.p, want, key.len)
            && ((field(hv, 3, &value, NULL) == 1 && value.len) || (field(hv, 2, &value, NULL) == 1 && value.len)))
            a->has_destination = 1;
    }
}

void epp_answer_read(const unsigned char *msg, size_t len, epp_answer *a)
{
    memset(a, 0, sizeof *a);
    span s = {msg, len}, sub;
    for (unsigned num = 1; num <= 7; num++) {
        if (field(s, num, &sub, NULL) != 1)
            continue;
        switch (num) {
        case 1:
            a->kind = EPP_A_REQ_HEADERS;
            read_destination(sub, a);
            return;
        case 2:
            a->kind = EPP_A_RESP_HEADERS;
            return;
        case 3:
        case 4:
            a->kind = num == 3 ? EPP_A_REQ_BODY : EPP_A_RESP_BODY;
            read_body(sub, a);
            return;
        case 5:
        case 6:
            a->kind = EPP_A_TRAILERS;
            return;
        case 7: {
            span st;
            uint64_t code = 0;
            a->kind = EPP_A_IMMEDIATE;
            if (field(sub, 1, &st, NULL) == 1 && field(st, 1, NULL, &code) >= 0)
                a->status = (unsigned)code;
            return;
        }
        }
    }
    a->kind = EPP_A_BAD;
}
