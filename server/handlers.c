/* Plan, RecordArrival, GetRates and Forget: decode, one cr_core_* call,
 * encode. Every rule, and every check that can reject a call before state
 * changes, is the core's; here are only the wire's own limits. */
#include "handlers.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>

#include "cacheroute/v1/cacheroute.pb-c.h"
#include "reply.h"
#include "wire.h"

typedef Cacheroute__V1__PlanRequest PlanRequest;
typedef Cacheroute__V1__RecordArrivalRequest RecordArrivalRequest;
typedef Cacheroute__V1__GetRatesRequest GetRatesRequest;
typedef Cacheroute__V1__ForgetRequest ForgetRequest;
typedef Cacheroute__V1__SessionRate SessionRate;


/* A switch with no default, so a new cr_status fails the build here. */
static grpc_status_code core_code(cr_status st)
{
    switch (st) {
    case CR_EINVAL:
        return GRPC_STATUS_INVALID_ARGUMENT;
    case CR_ESTATE:
        return GRPC_STATUS_FAILED_PRECONDITION;
    case CR_OK: /* not an error: a caller's bug, answered as the server's */
        return GRPC_STATUS_INTERNAL;
    case CR_ENOMEM:
        break;
    }
    return GRPC_STATUS_RESOURCE_EXHAUSTED;
}

void cr_reply_core_error(cr_reply *out, cr_status st, const cr_error *err)
{
    cr_reply_error(out, core_code(st), "%s", err->msg);
}

/* ---- Plan ---- */

typedef struct plan_answer {
    cr_plan_answer m; /* written by plan_fits; finished (or freed) by plan */
    int ready;        /* m written and within max */
    size_t max;
    cr_reply *out;
} plan_answer;

static void widest(cr_plan_answer *m, int install)
{
    m->rest.generation = install ? UINT64_MAX : 0;
    m->churn.moved = m->churn.admitted_in = m->churn.admitted_out = UINT64_MAX;
    m->churn.compared_generation = UINT64_MAX;
}

/* The core's last check before install: the answer must fit, sized with the
 * widest generation and churn, so a plan too large to answer is not
 * installed either. Its placements are written here, once (the bulk of
 * the answer, and what sizes it); the numbers install and churn give are
 * filled in after. */
static int plan_fits(void *ctx, const cr_table *t, int install, cr_error *err)
{
    plan_answer *a = ctx;
    if (cr_plan_answer_init(&a->m, t, a->max) != 0) {
        cr_fail(err, CR_ENOMEM, "out of memory encoding the plan");
        cr_reply_core_error(a->out, CR_ENOMEM, err);
        return -1;
    }
    widest(&a->m, install);
    size_t bound = cr_plan_answer_size(&a->m);
    if (bound <= a->max) {
        a->ready = 1;
        return 0;
    }
    cr_plan_answer_free(&a->m);
    cr_reply_too_big(a->out, &cacheroute__v1__plan_response__descriptor, bound, a->max,
                     "plan fewer sessions");
    cr_fail(err, CR_ENOMEM, "%s", a->out->message);
    return -1;
}

/* The answer plan_fits wrote, finished with the plan's numbers. */
static void plan_answered(plan_answer *a, const cr_core_plan_result *res)
{
    a->m.rest.generation = res->generation;
    a->m.churn.moved = res->churn.moved;
    a->m.churn.admitted_in = res->churn.admitted_in;
    a->m.churn.admitted_out = res->churn.admitted_out;
    a->m.churn.compared_generation = res->churn_generation;
    size_t len = 0;
    uint8_t *body = a->ready ? cr_plan_answer_finish(&a->m, &len) : NULL;
    if (!body) {
        cr_reply_error(a->out, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory packing %s",
                       cacheroute__v1__plan_response__descriptor.name);
        return;
    }
    a->out->status = GRPC_STATUS_OK;
    a->out->body = body;
    a->out->len = len;
}

/* A Plan call: its rates, decoded straight from the wire (split_rates) or,
 * when that was unsure, copied from protobuf-c's message. */
typedef struct plan_call {
    const cr_handlers *h;
    size_t max_rates; /* cr_wire_count's count, already bounded */
    cr_session_rate *rates;
    size_t n_rates;
    int split;
} plan_call;

/* The rates first, the rest's len bytes (mostly untouched) after them: a
 * big call's first big chunk is the process's spare (arena.h), faulted in
 * already by the last one, and the rates are what gets written. */
static int split_rates(void *ctx, const uint8_t *data, size_t len, cr_arena *a,
                       const uint8_t **rest, size_t *rest_len)
{
    plan_call *c = ctx;
    cr_wire_pairs out = {
        .base = cr_arena_alloc(a, c->max_rates * sizeof *c->rates),
        .max = c->max_rates,
        .stride = sizeof *c->rates,
        .key_at = offsetof(cr_session_rate, owner),
        .value_at = offsetof(cr_session_rate, rate),
    };
    uint8_t *left = cr_arena_alloc(a, len);
    if (!out.base || !left ||
        cr_wire_split_pairs(data, len, CR_WIRE_PLAN_RATES_FIELD, &out, left, rest_len) != 0)
        return -1;
    c->rates = out.base;
    c->n_rates = out.n;
    c->split = 1;
    *rest = left;
    return 0;
}

/* protobuf-c's rates, when split_rates did not take them. */
static int copy_rates(plan_call *c, const PlanRequest *req, cr_arena *scratch, cr_reply *out)
{
    if (c->split)
        return 0;
    c->rates = cr_arena_alloc(scratch, req->n_rates * sizeof *c->rates);
    if (!c->rates) {
        cr_reply_error(out, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory reading %zu rates",
                       req->n_rates);
        return -1;
    }
    for (size_t i = 0; i < req->n_rates; i++)
        c->rates[i] = (cr_session_rate){req->rates[i]->owner, req->rates[i]->rate};
    c->n_rates = req->n_rates;
    return 0;
}

static void plan(void *ctx, const void *message, cr_arena *scratch, cr_reply *out)
{
    plan_call *c = ctx;
    const cr_handlers *h = c->h;
    const PlanRequest *req = message;
    const Cacheroute__V1__PlannerConfig *pc = req->config;
    if (copy_rates(c, req, scratch, out) != 0)
        return;
    plan_answer a = {.max = h->max_message, .out = out};
    cr_core_plan_request pr = {
        .rates = c->rates,
        .n_rates = c->n_rates,
        .from_estimator = req->from_estimator,
        .has_n_shards = pc && pc->has_n_shards,
        .n_shards = pc ? pc->n_shards : 0,
        .has_qcap = pc && pc->has_qcap,
        .qcap = pc ? pc->qcap : 0,
        .has_warm_slots_per_shard = pc && pc->has_warm_slots_per_shard,
        .warm_slots_per_shard = pc ? pc->warm_slots_per_shard : 0,
        .install = req->install,
        .max_answer_bytes = h->max_message,
        .answer_bound = cr_wire_plan_bound,
        .fits = plan_fits,
        .fits_ctx = &a,
    };
    cr_core_plan_result res;
    cr_error err;
    cr_status st = cr_core_plan(h->core, &pr, &res, &err);
    if (st == CR_OK) {
        plan_answered(&a, &res);
    } else if (out->status == GRPC_STATUS_OK) { /* not already answered by plan_fits */
        cr_reply_core_error(out, st, &err);
    }
    cr_plan_answer_free(&a.m); /* written but not finished: the install failed */
    cr_core_plan_result_free(&res);
}

void cr_handle_plan(void *ctx, const uint8_t *data, size_t len, cr_reply *out)
{
    const cr_handlers *h = ctx;
    const ProtobufCMessageDescriptor *d = &cacheroute__v1__plan_request__descriptor;
    size_t each = sizeof(void *) + sizeof(Cacheroute__V1__SessionRate) + sizeof(cr_session_rate);
    plan_call c = {.h = h, .max_rates = cr_wire_count(d, data, len, "rates")};
    if (cr_refuse_entries(out, "rates", c.max_rates, cr_decode_limit(h->max_message, each),
                          GRPC_STATUS_RESOURCE_EXHAUSTED, CR_DECODE_HINT) != 0)
        return;
    cr_run_split_in(&c, d, data, len, out, split_rates, plan);
}

/* ---- RecordArrival ---- */

/* The answer, written straight from the core's routes (record_answer.h)
 * into a body of its bound; routes NULL (omit_routes) answers none. The
 * request's count was checked against the message limit before anything
 * was recorded, so the limit is only checked again here, as protobuf-c's
 * answer was. */
static void answer_routes(const cr_handlers *h, const cr_route *routes, size_t n,
                          uint64_t generation, cr_reply *out)
{
    const ProtobufCMessageDescriptor *d = &cacheroute__v1__record_arrival_response__descriptor;
    size_t n_routes = routes ? n : 0;
    uint8_t *body = malloc(cr_record_answer_bound(n_routes));
    if (!body) {
        cr_reply_error(out, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory packing %s", d->name);
        return;
    }
    size_t len = cr_record_answer_pack(routes, n_routes, (uint32_t)n, generation, body);
    if (len > h->max_message) {
        free(body);
        cr_reply_too_big(out, d, len, h->max_message, NULL);
        return;
    }
    out->status = GRPC_STATUS_OK;
    out->body = body;
    out->len = len;
}

/* A RecordArrival call: its owners, decoded straight from the wire
 * (split_owners) or, when that was unsure, protobuf-c's. */
typedef struct record_call {
    const cr_handlers *h;
    size_t max_owners; /* cr_wire_count's count */
    int64_t *owners;
    size_t n_owners;
    int split;
} record_call;

static int split_owners(void *ctx, const uint8_t *data, size_t len, cr_arena *a,
                        const uint8_t **rest, size_t *rest_len)
{
    record_call *c = ctx;
    cr_wire_varints out = {cr_arena_alloc(a, (c->max_owners ? c->max_owners : 1) *
                                                 sizeof *c->owners),
                           c->max_owners, 0};
    uint8_t *left = cr_arena_alloc(a, len ? len : 1);
    if (!out.values || !left ||
        cr_wire_split_varints(data, len, CR_WIRE_RECORD_OWNERS_FIELD, &out, left, rest_len) != 0)
        return -1;
    c->owners = out.values;
    c->n_owners = out.n;
    c->split = 1;
    *rest = left;
    return 0;
}

static void record_arrival(void *ctx, const void *message, cr_arena *scratch, cr_reply *out)
{
    const record_call *c = ctx;
    const cr_handlers *h = c->h;
    const RecordArrivalRequest *req = message;
    const int64_t *owners = c->split ? c->owners : req->owners;
    size_t n = c->split ? c->n_owners : req->n_owners;
    /* Allocated before anything is recorded: a call that could not be
     * answered records nothing (only the body is allocated after). */
    cr_route *routes = req->omit_routes ? NULL : cr_arena_alloc(scratch, n * sizeof *routes);
    uint64_t generation;
    cr_error err;
    cr_status st;
    if (!req->omit_routes && !routes)
        cr_reply_error(out, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory for %zu routes", n);
    else if ((st = cr_core_record(h->core, owners, n, req->weights, req->n_weights, routes,
                                  &generation, &err)) != CR_OK)
        cr_reply_core_error(out, st, &err);
    else
        answer_routes(h, routes, n, generation, out);
}

/* Owners bound the decode (8 bytes each in the arena, so a message of
 * 1-byte owners would take 8 times its size: --max-arrivals-per-call), and
 * routed ones the answer: counted on the wire, before decoding. */
void cr_handle_record_arrival(void *ctx, const uint8_t *data, size_t len, cr_reply *out)
{
    const cr_handlers *h = ctx;
    const ProtobufCMessageDescriptor *d = &cacheroute__v1__record_arrival_request__descriptor;
    size_t max = h->max_message;
    record_call c = {.h = h, .max_owners = cr_wire_count(d, data, len, "owners")};
    size_t n = cr_wire_last_varint(d, data, len, "omit_routes", 0) ? 0 : c.max_owners;
    size_t each = cr_wire_route_bytes(CR_MAX_SHARDS);
    if (n > (max - CR_WIRE_ANSWER_SLACK) / each) {
        cr_reply_error(out, GRPC_STATUS_RESOURCE_EXHAUSTED,
                       "%zu owners could need %zu response bytes, over the %zu-byte message "
                       "limit (--max-message-bytes); set omit_routes or send fewer owners",
                       n, n * each + CR_WIRE_ANSWER_SLACK, max);
        return;
    }
    if (cr_refuse_entries(out, "owners", c.max_owners, h->max_arrivals,
                          GRPC_STATUS_RESOURCE_EXHAUSTED,
                          "the limit of --max-arrivals-per-call; send them in several calls") != 0)
        return;
    cr_run_split_in(&c, d, data, len, out, split_owners, record_arrival);
}

/* ---- GetRates ---- */

/* The rates to answer: this sidecar's, or (merged) the cluster's from the
 * replica; 0, or -1 with the reply made (the core's error, no backend,
 * backend down, out of memory). */
static int read_rates(const cr_handlers *h, const GetRatesRequest *req, cr_session_rate **all,
                      size_t *n, uint64_t *tracked, cr_reply *out)
{
    cr_error err;
    if (!req->merged) {
        cr_status st = cr_core_rates(h->core, req->owners, req->n_owners, all, n, tracked, &err);
        if (st != CR_OK)
            cr_reply_core_error(out, st, &err);
        return st == CR_OK ? 0 : -1;
    }
    if (!h->replica) {
        cr_reply_error(out, GRPC_STATUS_FAILED_PRECONDITION,
                       "merged needs --state-backend (this sidecar is standalone)");
        return -1;
    }
    switch (cr_replica_rates(h->replica, req->owners, req->n_owners, all, n, tracked, &err)) {
    case CR_REPLICA_RATES:
        return 0;
    case CR_REPLICA_UNAVAILABLE:
        cr_reply_error(out, GRPC_STATUS_UNAVAILABLE, "%s", err.msg);
        return -1;
    default:
        cr_reply_error(out, GRPC_STATUS_RESOURCE_EXHAUSTED, "%s", err.msg);
        return -1;
    }
}

static void get_rates(void *ctx, const void *message, cr_arena *scratch, cr_reply *out)
{
    const cr_handlers *h = ctx;
    const GetRatesRequest *req = message;
    cr_session_rate *all;
    size_t n;
    uint64_t tracked;
    if (read_rates(h, req, &all, &n, &tracked, out) != 0)
        return;
    SessionRate *rates = cr_arena_alloc(scratch, n * sizeof *rates);
    SessionRate **ptrs = cr_arena_alloc(scratch, n * sizeof *ptrs);
    if (!rates || !ptrs) {
        cr_reply_error(out, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory for %zu rates", n);
        goto done;
    }
    for (size_t i = 0; i < n; i++) {
        cacheroute__v1__session_rate__init(&rates[i]);
        rates[i].owner = all[i].owner;
        rates[i].rate = all[i].rate;
        ptrs[i] = &rates[i];
    }
    Cacheroute__V1__GetRatesResponse resp = CACHEROUTE__V1__GET_RATES_RESPONSE__INIT;
    resp.n_rates = n;
    resp.rates = ptrs;
    resp.tracked_owners = tracked;
    cr_reply_message(out, &resp.base, h->max_message,
                     "list the owners to read, or raise --max-message-bytes");
done:
    free(all);
}

/* Each listed owner is answered, so their count bounds the answer: refused
 * before decoding, as protobuf-c and the answer would spend ~100 bytes on
 * each (a 33.5 MB request of 1-byte owners took 2.4 GB). */
void cr_handle_get_rates(void *ctx, const uint8_t *data, size_t len, cr_reply *out)
{
    const cr_handlers *h = ctx;
    const ProtobufCMessageDescriptor *d = &cacheroute__v1__get_rates_request__descriptor;
    size_t n = cr_wire_count(d, data, len, "owners"), each = cr_wire_rate_bytes();
    char why[160];
    snprintf(why, sizeof why,
             "their answer could need %zu bytes, over the %zu-byte message limit "
             "(--max-message-bytes); list fewer owners",
             n * each + CR_WIRE_ANSWER_SLACK, h->max_message);
    if (cr_refuse_entries(out, "owners", n, (h->max_message - CR_WIRE_ANSWER_SLACK) / each,
                          GRPC_STATUS_RESOURCE_EXHAUSTED, why) != 0)
        return;
    cr_run_decoded_in(ctx, d, data, len, out, get_rates);
}

/* ---- Forget ---- */

static void forget(void *ctx, const void *message, cr_reply *out)
{
    const cr_handlers *h = ctx;
    const ForgetRequest *req = message;
    Cacheroute__V1__ForgetResponse resp = CACHEROUTE__V1__FORGET_RESPONSE__INIT;
    resp.forgotten = cr_core_forget(h->core, req->owners, req->n_owners);
    cr_reply_message(out, &resp.base, h->max_message, NULL);
}

void cr_handle_forget(void *ctx, const uint8_t *data, size_t len, cr_reply *out)
{
    cr_run_decoded(ctx, &cacheroute__v1__forget_request__descriptor, data, len, out, forget);
}
