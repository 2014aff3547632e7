/* One ext_proc stream as a state machine (epp.h): each ProcessingRequest
 * in, the ProcessingResponses it gives out, and the outcome at the end. */
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

typedef enum phase {
    WAIT_HEADERS, /* nothing read yet */
    GATHER,       /* an OpenAI body being gathered; routed at its end */
    PASS,         /* routed at the headers: a body goes through as it comes */
    ROUTED,       /* routed at the body's end; the response may come */
    HELD,         /* the door holds it: answered at a wake (hold.c) */
    ANSWERED      /* an immediate response sent: nothing more is read */
} phase;

struct cr_epp_stream {
    cr_epp *e;
    uint64_t caller;
    double opened, headers_at;
    phase phase;
    int shed, first;
    int request_mode, response_mode; /* CR_EPP_MODE_* */
    cr_openai_kind kind;
    int has_owner;
    int64_t owner;
    int has_subset;
    char *subset;
    char served[CR_ENDPOINT_ADDRESS_MAX + 1];
    uint8_t *body; /* gathered */
    size_t len, cap;
    int routed, reported;
    uint32_t shard;
    char request_id[24];
    cr_epp_hold hold;   /* held at the door: where it was (the body's end, or
                         * the headers), and whether trailers ended the body */
    int held_at_body, by_trailers;
    uint32_t held_tokens;   /* its L, for the receipt made at its dispatch */
    /* What the objective headers asked, the names copied here. */
    char objective[CR_REQUEST_OBJECTIVE_MAX + 1], fairness[CR_REQUEST_FAIRNESS_MAX + 1];
    double slo_ttft_ms; /* 0: none given */
    int status;       /* the response's :status; 0 unseen */
    int has_ttft;
    double ttft_s;
    uint8_t *tail;    /* the response body's last CR_EPP_USAGE_TAIL_BYTES */
    size_t tail_len;
};

/* The gathered body freed, its room given back to --epp-max-buffered-bytes. */
static void body_free(cr_epp_stream *s)
{
    atomic_fetch_sub_explicit(&s->e->buffered, s->cap, memory_order_relaxed);
    free(s->body);
    s->body = NULL;
    s->len = s->cap = 0;
}

/* Room for cap bytes of body, counted against --epp-max-buffered-bytes
 * first: 0, or -1 with nothing changed when the streams' bodies would pass
 * it (*held: what they hold). */
static int body_reserve(cr_epp_stream *s, size_t cap, uint64_t *held)
{
    cr_epp *e = s->e;
    uint64_t more = cap - s->cap;
    *held = atomic_fetch_add_explicit(&e->buffered, more, memory_order_relaxed);
    if (*held + more > e->cfg.max_buffered_bytes) {
        atomic_fetch_sub_explicit(&e->buffered, more, memory_order_relaxed);
        return -1;
    }
    return 0;
}

cr_epp_stream *cr_epp_stream_open(cr_epp *e, uint64_t caller, double now)
{
    cr_epp_stream *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    uint64_t open = atomic_fetch_add_explicit(&e->open, 1, memory_order_relaxed) + 1;
    cr_epp_count(&e->streams, 1);
    s->e = e;
    s->caller = caller;
    s->opened = s->headers_at = now;
    s->shed = open > e->cfg.max_requests;
    s->first = 1;
    s->request_mode = s->response_mode =
        e->cfg.body_mode == CR_EPP_BUFFERED ? CR_EPP_MODE_BUFFERED : CR_EPP_MODE_FULL_DUPLEX;
    return s;
}

/* ---- answers ---------------------------------------------------------------- */

static cr_epp_next protocol(cr_epp_stream *s, cr_error *err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static cr_epp_next protocol(cr_epp_stream *s, cr_error *err, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    va_end(ap);
    cr_epp_count(&s->e->errors[CR_EPP_ERR_PROTOCOL], 1);
    return CR_EPP_FAILED;
}

/* A 429 by what shed says (epp.h's CR_EPP_SHED_HEADER), else any answer
 * but the destination. */
static cr_epp_next refuse(cr_epp_stream *s, cr_epp_out *out, int status, cr_epp_error reason,
                          const char *why, const char *shed)
{
    cr_epp_count(&s->e->errors[reason], 1);
    body_free(s); /* what was gathered is dropped at once */
    s->phase = ANSWERED;
    return cr_epp_reply_immediate(out, status, reason, why, shed) == CR_OK
               ? CR_EPP_FINISHED
               : CR_EPP_FAILED;
}

static cr_epp_next immediate(cr_epp_stream *s, cr_epp_out *out, int status, cr_epp_error reason,
                             const char *why)
{
    return refuse(s, out, status, reason, why, NULL);
}

static cr_epp_next done(cr_status st, cr_error *err)
{
    if (st == CR_OK)
        return CR_EPP_MORE;
    snprintf(err->msg, sizeof err->msg, "out of memory");
    return CR_EPP_FAILED;
}

/* The route's answer: a refusal answered now, or the stream routed. */
static cr_epp_next routed(cr_epp_stream *s, const cr_epp_picked *picked, cr_error *err,
                          cr_epp_out *out)
{
    if (picked->status)
        return refuse(s, out, picked->status, picked->reason, err->msg, picked->shed);
    s->routed = 1;
    s->shard = picked->shard;
    return CR_EPP_MORE;
}

/* The stream's route; an answer of its destination is the caller's. With
 * may_hold (nothing more of the request comes before its answer) the
 * door may hold it: phase HELD, answered at a wake. */
static cr_epp_next route(cr_epp_stream *s, const cr_openai_request *body, int may_hold,
                         cr_epp_picked *picked, cr_epp_out *out)
{
    cr_epp *e = s->e;
    uint64_t id = atomic_fetch_add_explicit(&e->next_id, 1, memory_order_relaxed);
    snprintf(s->request_id, sizeof s->request_id, "epp-%016" PRIx64, id);
    int has_owner = s->has_owner;
    int64_t owner = s->owner;
    if (!has_owner && body && body->user_len) {
        has_owner = 1;
        owner = (int64_t)cr_route_text_key(body->user, body->user_len);
    }
    /* only a request that names an objective meets the door */
    int can_wait = may_hold && s->hold.wake && (s->objective[0] || s->slo_ttft_ms > 0) &&
                   cr_epp_holds(e);
    cr_epp_pick p = {body, s->body, s->len, owner, has_owner,
                     s->has_subset ? (s->subset ? s->subset : "") : NULL, s->caller,
                     s->request_id, s->objective, s->fairness, strlen(s->objective),
                     strlen(s->fairness), s->slo_ttft_ms, can_wait};
    cr_error err;
    if (can_wait) {
        s->hold.request_id = s->request_id;
        cr_epp_hold_list(e, &s->hold);
    }
    cr_epp_pick_route(e, &p, picked, &err);
    if (picked->held) { /* answered by resume(), at a wake */
        s->hold.handle = picked->held;
        s->phase = HELD;
        s->held_tokens = picked->prompt_tokens;
        return done(cr_epp_reply_timeout(out, cr_epp_hold_timeout_s(e)), &err);
    }
    if (can_wait)
        cr_epp_hold_unlist(e, &s->hold);
    return routed(s, picked, &err, out);
}

static void decided(cr_epp_stream *s, double now)
{
    if (s->e->cfg.decided)
        s->e->cfg.decided(s->e->cfg.ctx, now - s->headers_at);
}

/* The request's destination answered at the body's end: the body whole
 * (buffered), or the headers and the body in chunks (full duplex); and
 * the trailers' answer when trailers ended it. */
static cr_epp_next answer_body(cr_epp_stream *s, const char *destination, int by_trailers,
                               cr_epp_out *out, cr_error *err)
{
    cr_status st;
    s->phase = ROUTED;
    if (s->request_mode == CR_EPP_MODE_BUFFERED)
        st = cr_epp_reply_common(out, CR_EPP_OUT_REQUEST_BODY, destination);
    else if ((st = cr_epp_reply_common(out, CR_EPP_OUT_REQUEST_HEADERS, destination)) == CR_OK) {
        st = cr_epp_reply_chunks(out, CR_EPP_OUT_REQUEST_BODY, s->body, s->len, !by_trailers);
        cr_epp_count(&s->e->bytes_out, s->len);
    }
    body_free(s);
    if (st == CR_OK && by_trailers)
        st = cr_epp_reply_trailers(out, CR_EPP_OUT_REQUEST_TRAILERS);
    return done(st, err);
}

/* The gathered body's end (end_of_stream, or trailers when by_trailers):
 * read, routed, answered (held: at the wake, by resume()). */
static cr_epp_next body_end(cr_epp_stream *s, double now, int by_trailers, cr_epp_out *out)
{
    cr_openai_request r;
    cr_error err;
    cr_status st = cr_openai_parse(s->kind, s->body, s->len, &r, &err);
    if (st != CR_OK)
        return immediate(s, out, st == CR_EINVAL ? 400 : 503,
                         st == CR_EINVAL ? CR_EPP_ERR_BAD_BODY : CR_EPP_ERR_NO_ENDPOINT, err.msg);
    cr_epp_picked picked;
    cr_epp_next next = route(s, &r, 1, &picked, out);
    cr_openai_request_free(&r);
    if (next != CR_EPP_MORE)
        return next;
    if (s->phase == HELD) {
        s->held_at_body = 1;
        s->by_trailers = by_trailers;
        return next;
    }
    decided(s, now);
    return answer_body(s, picked.destination, by_trailers, out, &err);
}

/* A wake (a message of none): the door's answer to a held request, if it
 * came; the route's answer as it would have been at once, or 429 when it
 * was dropped at its deadline. */
static cr_epp_next resume(cr_epp_stream *s, double now, cr_epp_out *out, cr_error *err)
{
    cr_core_dispatched got;
    if (s->phase != HELD || !cr_epp_hold_take(s->e, &s->hold, &got))
        return CR_EPP_MORE; /* nothing for it (yet) */
    cr_epp_picked picked;
    memset(&picked, 0, sizeof picked);
    if (got.dropped) {
        char why[CR_ERRLEN];
        snprintf(why, sizeof why,
                 "shed: held %.0f ms at the door, and no endpoint could meet its TTFT objective "
                 "before its deadline",
                 got.held_ms);
        return refuse(s, out, 429, CR_EPP_ERR_SHED, why, "slo");
    }
    cr_route_request q = {.request_id = s->request_id, .caller = s->caller,
                          .prompt_tokens = s->held_tokens, .objective = s->objective,
                          .objective_len = strlen(s->objective), .fairness = s->fairness,
                          .fairness_len = strlen(s->fairness), .slo_ttft_ms = s->slo_ttft_ms};
    cr_epp_pick_answer(s->e, &q, &got.answer, &picked, err);
    cr_epp_next next = routed(s, &picked, err, out);
    if (next != CR_EPP_MORE)
        return next;
    decided(s, now);
    if (s->held_at_body)
        return answer_body(s, picked.destination, s->by_trailers, out, err);
    s->phase = PASS;
    return done(cr_epp_reply_common(out, CR_EPP_OUT_REQUEST_HEADERS, picked.destination), err);
}

/* ---- the request ------------------------------------------------------------ */

/* A header's value copied into to (room for max bytes and a NUL): 0, or
 * -1 with why naming the header when it is longer. */
static int copy_header(const cr_epp_text *t, const char *name, char *to, size_t max, char *why,
                       size_t why_len)
{
    if (t->n > max) {
        snprintf(why, why_len, "%s must be at most %zu bytes, got %zu", name, max, t->n);
        return -1;
    }
    memcpy(to, t->p ? t->p : "", t->n);
    to[t->n] = '\0';
    return 0;
}

/* The objective headers into the stream's (request.h's fields): the
 * name, the fairness id, the TTFT objective in ms (a number in [0,
 * CR_REQUEST_SLO_MAX_MS]; an empty header is none given). 0, or -1 with
 * why naming the header and its value. */
static int objective_of(cr_epp_stream *s, const cr_epp_in *in, char *why, size_t why_len)
{
    if (copy_header(&in->objective, CR_EPP_OBJECTIVE_HEADER, s->objective,
                    CR_REQUEST_OBJECTIVE_MAX, why, why_len) != 0 ||
        copy_header(&in->fairness, CR_EPP_FAIRNESS_HEADER, s->fairness, CR_REQUEST_FAIRNESS_MAX,
                    why, why_len) != 0)
        return -1;
    if (!in->slo.n)
        return 0;
    char text[32];
    double ms;
    size_t n = in->slo.n < sizeof text - 1 ? in->slo.n : sizeof text - 1;
    memcpy(text, in->slo.p, n);
    text[n] = '\0';
    if (in->slo.n >= sizeof text || cr_parse_double(text, &ms) != 0 || !(ms >= 0) ||
        ms > CR_REQUEST_SLO_MAX_MS) {
        snprintf(why, why_len, "%s must be a number of ms in [0, %.0f], got \"%.*s\"",
                 CR_EPP_SLO_HEADER, CR_REQUEST_SLO_MAX_MS, (int)n, text);
        return -1;
    }
    s->slo_ttft_ms = ms;
    return 0;
}

static cr_epp_next request_headers(cr_epp_stream *s, const cr_epp_in *in, double now,
                                   cr_epp_out *out, cr_error *err)
{
    cr_epp *e = s->e;
    if (s->phase != WAIT_HEADERS)
        return protocol(s, err, "a second request_headers");
    s->headers_at = now;
    char why[CR_ERRLEN];
    if (s->shed) {
        snprintf(why, sizeof why, "shed: %" PRIu64 " requests in flight (--epp-max-requests)",
                 (uint64_t)atomic_load_explicit(&e->open, memory_order_relaxed));
        return refuse(s, out, 429, CR_EPP_ERR_SHED, why, "requests");
    }
    if (in->too_large) {
        snprintf(why, sizeof why, "%s: over %u bytes", in->too_large, CR_EPP_MAX_HEADER_BYTES);
        return immediate(s, out, 400, CR_EPP_ERR_BAD_BODY, why);
    }
    const char *no_set = cr_epp_no_set(e);
    if (no_set)
        return immediate(s, out, 503, CR_EPP_ERR_NO_ENDPOINT, no_set);
    s->kind = cr_openai_kind_of(in->method.p ? in->method.p : "", in->method.n,
                                in->path.p ? in->path.p : "", in->path.n);
    if (in->owner.n) {
        s->has_owner = 1;
        s->owner = (int64_t)cr_route_text_key(in->owner.p, in->owner.n);
    }
    if (objective_of(s, in, why, sizeof why) != 0)
        return immediate(s, out, 400, CR_EPP_ERR_BAD_BODY, why);
    if (in->end_of_stream || s->kind == CR_OPENAI_OTHER || s->request_mode == CR_EPP_MODE_NONE) {
        cr_epp_picked picked;
        /* by load alone; held only when no body comes before the answer */
        int may_hold = in->end_of_stream || s->request_mode == CR_EPP_MODE_NONE;
        cr_epp_next next = route(s, NULL, may_hold, &picked, out);
        if (next != CR_EPP_MORE || s->phase == HELD)
            return next;
        s->phase = PASS;
        decided(s, now);
        return done(cr_epp_reply_common(out, CR_EPP_OUT_REQUEST_HEADERS, picked.destination), err);
    }
    s->phase = GATHER;
    if (s->request_mode == CR_EPP_MODE_BUFFERED) /* the body comes whole, after this */
        return done(cr_epp_reply_common(out, CR_EPP_OUT_REQUEST_HEADERS, NULL), err);
    return CR_EPP_MORE; /* full duplex: held until the destination is known */
}

static cr_epp_next request_body(cr_epp_stream *s, const cr_epp_in *in, double now,
                                cr_epp_out *out, cr_error *err)
{
    cr_epp *e = s->e;
    cr_epp_count(&e->bytes_in, in->body_len);
    if (s->phase == WAIT_HEADERS)
        return protocol(s, err, "a request_body before request_headers");
    if (s->phase == ROUTED)
        return protocol(s, err, "a request_body after the body's end");
    if (s->phase == PASS) {
        if (s->request_mode != CR_EPP_MODE_FULL_DUPLEX)
            return done(cr_epp_reply_common(out, CR_EPP_OUT_REQUEST_BODY, NULL), err);
        cr_epp_count(&e->bytes_out, in->body_len);
        return done(cr_epp_reply_chunks(out, CR_EPP_OUT_REQUEST_BODY, in->body, in->body_len,
                                        in->end_of_stream),
                    err);
    }
    if (in->body_len > e->cfg.max_body_bytes - s->len) {
        char why[CR_ERRLEN];
        snprintf(why, sizeof why, "body is over %zu bytes (--epp-max-body-bytes)",
                 e->cfg.max_body_bytes);
        return immediate(s, out, 413, CR_EPP_ERR_TOO_LARGE, why);
    }
    if (s->len + in->body_len > s->cap) {
        size_t cap = s->cap ? s->cap : 4096;
        while (cap < s->len + in->body_len)
            cap *= 2;
        if (cap > e->cfg.max_body_bytes)
            cap = e->cfg.max_body_bytes;
        uint64_t held;
        if (body_reserve(s, cap, &held) != 0) {
            char why[CR_ERRLEN];
            snprintf(why, sizeof why,
                     "shed: request bodies held (%" PRIu64 " bytes) would pass %" PRIu64
                     " bytes (--epp-max-buffered-bytes)",
                     held, e->cfg.max_buffered_bytes);
            return refuse(s, out, 429, CR_EPP_ERR_SHED, why, "buffered");
        }
        uint8_t *grown = realloc(s->body, cap);
        if (!grown) {
            atomic_fetch_sub_explicit(&e->buffered, cap - s->cap, memory_order_relaxed);
            return done(CR_ENOMEM, err);
        }
        s->body = grown;
        s->cap = cap;
    }
    if (in->body_len)
        memcpy(s->body + s->len, in->body, in->body_len);
    s->len += in->body_len;
    /* BUFFERED sends the body whole in one message */
    if (in->end_of_stream || s->request_mode == CR_EPP_MODE_BUFFERED)
        return body_end(s, now, 0, out);
    return CR_EPP_MORE;
}

static cr_epp_next request_trailers(cr_epp_stream *s, double now, cr_epp_out *out,
                                    cr_error *err)
{
    if (s->phase == WAIT_HEADERS)
        return protocol(s, err, "request_trailers before request_headers");
    if (s->phase == GATHER) {
        if (s->request_mode == CR_EPP_MODE_BUFFERED)
            return protocol(s, err, "request_trailers before the buffered body");
        return body_end(s, now, 1, out); /* which answers the trailers too */
    }
    return done(cr_epp_reply_trailers(out, CR_EPP_OUT_REQUEST_TRAILERS), err);
}

/* ---- the response and the outcome ----------------------------------------- */

static void report(cr_epp_stream *s, int broken)
{
    if (!s->routed || s->reported)
        return;
    s->reported = 1;
    cr_epp *e = s->e;
    cr_outcome o = {.request_id = s->request_id, .has = CR_OUT_SHARD, .shard = s->shard};
    uint32_t served = s->served[0] ? cr_epp_shard_of(e, s->served, strlen(s->served))
                                   : UINT32_MAX;
    if (served != UINT32_MAX) /* a fallback served it */
        o.shard = served;
    uint32_t prompt, cached;
    if (s->tail_len && cr_openai_usage(s->tail, s->tail_len, &prompt, &cached)) {
        o.prompt_tokens = prompt > CR_REQUEST_MAX_TOKENS ? CR_REQUEST_MAX_TOKENS : prompt;
        o.cached_tokens = cached > o.prompt_tokens ? o.prompt_tokens : cached;
        o.has |= CR_OUT_PROMPT_TOKENS | CR_OUT_CACHED_TOKENS;
    }
    if (s->has_ttft) {
        o.ttft_ms = fmax(0, (s->ttft_s - s->opened) * 1000);
        o.has |= isfinite(o.ttft_ms) ? CR_OUT_TTFT : 0;
    }
    if (s->status >= 500 && s->status <= 599) {
        o.has |= CR_OUT_ERROR;
        o.error = "upstream 5xx";
        cr_epp_count(&e->errors[CR_EPP_ERR_UPSTREAM_5XX], 1);
    } else if (broken) {
        o.has |= CR_OUT_ERROR;
        o.error = "stream reset";
        cr_epp_count(&e->errors[CR_EPP_ERR_RESET], 1);
    }
    cr_epp_report(e, s->caller, &o);
}

static int status_of(cr_epp_text t)
{
    int v = 0;
    for (size_t i = 0; i < t.n && i < 3; i++) {
        if (t.p[i] < '0' || t.p[i] > '9')
            return 0;
        v = v * 10 + (t.p[i] - '0');
    }
    return t.n == 3 ? v : 0;
}

/* The last CR_EPP_USAGE_TAIL_BYTES of the response body, where usage is. */
static cr_status keep_tail(cr_epp_stream *s, const uint8_t *b, size_t n)
{
    if (!s->tail && !(s->tail = malloc(CR_EPP_USAGE_TAIL_BYTES)))
        return CR_ENOMEM;
    if (n >= CR_EPP_USAGE_TAIL_BYTES) {
        memcpy(s->tail, b + n - CR_EPP_USAGE_TAIL_BYTES, CR_EPP_USAGE_TAIL_BYTES);
        s->tail_len = CR_EPP_USAGE_TAIL_BYTES;
        return CR_OK;
    }
    size_t keep = s->tail_len + n > CR_EPP_USAGE_TAIL_BYTES ? CR_EPP_USAGE_TAIL_BYTES - n
                                                             : s->tail_len;
    memmove(s->tail, s->tail + s->tail_len - keep, keep);
    memcpy(s->tail + keep, b, n);
    s->tail_len = keep + n;
    return CR_OK;
}

static cr_epp_next response(cr_epp_stream *s, const cr_epp_in *in, double now, cr_epp_out *out,
                            cr_error *err)
{
    cr_epp *e = s->e;
    if (s->phase != PASS && s->phase != ROUTED)
        return protocol(s, err, "a response phase before the request was routed");
    cr_status st;
    int end = in->end_of_stream;
    switch (in->kind) {
    case CR_EPP_IN_RESPONSE_HEADERS:
        s->status = status_of(in->status);
        st = cr_epp_reply_common(out, CR_EPP_OUT_RESPONSE_HEADERS, NULL);
        break;
    case CR_EPP_IN_RESPONSE_BODY:
        cr_epp_count(&e->bytes_in, in->body_len);
        if (in->body_len && !s->has_ttft) {
            s->has_ttft = 1;
            s->ttft_s = now;
        }
        if (in->body_len && keep_tail(s, in->body, in->body_len) != CR_OK)
            return done(CR_ENOMEM, err);
        if (s->response_mode == CR_EPP_MODE_FULL_DUPLEX) {
            cr_epp_count(&e->bytes_out, in->body_len);
            st = cr_epp_reply_chunks(out, CR_EPP_OUT_RESPONSE_BODY, in->body, in->body_len, end);
        } else {
            st = cr_epp_reply_common(out, CR_EPP_OUT_RESPONSE_BODY, NULL);
        }
        break;
    default: /* trailers end the response */
        end = 1;
        st = cr_epp_reply_trailers(out, CR_EPP_OUT_RESPONSE_TRAILERS);
        break;
    }
    if (end)
        report(s, 0);
    return done(st, err);
}

/* ---- steps ------------------------------------------------------------------ */

/* The body modes the data plane announced on its first message. */
static cr_epp_next modes(cr_epp_stream *s, const cr_epp_in *in, cr_error *err)
{
    int r = in->request_mode, p = in->response_mode;
    if (r != CR_EPP_MODE_NONE && r != CR_EPP_MODE_BUFFERED && r != CR_EPP_MODE_FULL_DUPLEX)
        return protocol(s, err,
                        "protocol_config.request_body_mode %d is not supported "
                        "(FULL_DUPLEX_STREAMED, BUFFERED or NONE)",
                        r);
    s->request_mode = r;
    s->response_mode = p; /* anything but full duplex: each body message answered CONTINUE */
    return CR_EPP_MORE;
}

cr_epp_next cr_epp_stream_step(cr_epp_stream *s, const uint8_t *msg, size_t len, double now,
                               cr_epp_out *out, cr_error *err)
{
    err->msg[0] = '\0';
    if (!msg)
        return resume(s, now, out, err);
    if (s->phase == ANSWERED)
        return protocol(s, err, "a message after the immediate response");
    if (s->phase == HELD)
        return protocol(s, err, "a message while the door holds the request");
    cr_epp_in in;
    cr_status st = cr_epp_in_read(msg, len, s->e->owner, &in, err);
    if (st != CR_OK) {
        char why[CR_ERRLEN];
        snprintf(why, sizeof why, "%s", err->msg);
        return st == CR_EINVAL ? protocol(s, err, "%s", why) : done(st, err);
    }
    cr_epp_next next = CR_EPP_MORE;
    if (s->first && in.has_modes)
        next = modes(s, &in, err);
    s->first = 0;
    if (in.has_subset) {
        free(s->subset);
        s->subset = in.subset;
        s->has_subset = 1;
        in.subset = NULL;
    }
    if (in.served.n && in.served.n < sizeof s->served) {
        memcpy(s->served, in.served.p, in.served.n);
        s->served[in.served.n] = '\0';
    }
    if (next == CR_EPP_MORE) {
        switch (in.kind) {
        case CR_EPP_IN_REQUEST_HEADERS: next = request_headers(s, &in, now, out, err); break;
        case CR_EPP_IN_REQUEST_BODY: next = request_body(s, &in, now, out, err); break;
        case CR_EPP_IN_REQUEST_TRAILERS: next = request_trailers(s, now, out, err); break;
        default: next = response(s, &in, now, out, err); break;
        }
    }
    cr_epp_in_free(&in);
    if (next == CR_EPP_FAILED && !err->msg[0]) /* an answer that could not be made */
        snprintf(err->msg, sizeof err->msg, "out of memory");
    return next;
}

void cr_epp_stream_wake_by(cr_epp_stream *s, void (*wake)(void *arg), void *arg)
{
    s->hold.wake = wake;
    s->hold.wake_arg = arg;
}

void cr_epp_stream_close(cr_epp_stream *s, cr_epp_end how, double now)
{
    (void)now; /* the outcome's times were taken as they came */
    if (!s)
        return;
    cr_epp *e = s->e;
    if (s->phase == HELD) /* only a held stream is listed, or has an answer parked */
        cr_epp_hold_close(e, &s->hold, s->caller);
    if (s->routed)
        report(s, how == CR_EPP_END_BROKEN);
    else if (s->phase == GATHER || s->phase == HELD)
        cr_epp_count(&e->errors[CR_EPP_ERR_ABANDONED], 1);
    atomic_fetch_sub_explicit(&e->open, 1, memory_order_relaxed);
    free(s->subset);
    body_free(s);
    free(s->tail);
    free(s);
}
