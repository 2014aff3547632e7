/* Plan: the rates decoded straight from the wire when they can be, one
 * cr_core_plan, and the answer written straight from the table (wire.h),
 * sized before install so a plan too large to answer is not installed. */
#include <stddef.h>
#include <stdlib.h>

#include "answer.h"
#include "handlers.h"
#include "reply.h"
#include "wire.h"

typedef Cacheroute__V1__PlanRequest PlanRequest;

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
