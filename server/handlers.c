/* cacheroute.v1.CacheRoute handlers: decode the request, call the planner or
 * estimator, encode the answer. Every check that can reject a call runs
 * before any state changes, so a rejected call changes nothing. */
#include "handlers.h"

#include <stdlib.h>

#include "cacheroute/v1/cacheroute.pb-c.h"
#include "log.h"
#include "reply.h"

typedef Cacheroute__V1__PlanRequest PlanRequest;
typedef Cacheroute__V1__RecordArrivalRequest RecordArrivalRequest;
typedef Cacheroute__V1__GetRatesRequest GetRatesRequest;
typedef Cacheroute__V1__ForgetRequest ForgetRequest;
typedef Cacheroute__V1__Placement Placement;
typedef Cacheroute__V1__Route Route;
typedef Cacheroute__V1__SessionRate SessionRate;

/* A Route is at most 28 bytes on the wire: field tag and length (2), owner
 * (11), rate (9), admitted (2), preferred shard < 65536 (4). */
#define ROUTE_MAX_BYTES 28
#define RESPONSE_SLACK 32

static size_t max_message(const cr_sidecar *s) { return (size_t)s->cfg->max_message_bytes; }

/* ---- Plan ---- */

typedef struct table_msg {
    Cacheroute__V1__RoutingTable rt;
    Placement *placements;
    Placement **ptrs;
} table_msg;

/* Points a RoutingTable message at t's arrays (t must outlive the message). */
static int table_msg_init(table_msg *m, const cr_table *t)
{
    size_t n = cr_table_n_placements(t);
    cacheroute__v1__routing_table__init(&m->rt);
    m->placements = malloc((n ? n : 1) * sizeof *m->placements);
    m->ptrs = malloc((n ? n : 1) * sizeof *m->ptrs);
    if (!m->placements || !m->ptrs)
        return -1;
    for (size_t i = 0; i < n; i++) {
        const cr_placement *p = cr_table_placement(t, i);
        Placement *pm = &m->placements[i];
        cacheroute__v1__placement__init(pm);
        pm->owner = p->owner;
        pm->n_shards = p->kb;
        pm->shards = (uint32_t *)cr_table_shards(t, p);
        pm->preferred_shard = p->preferred_shard;
        m->ptrs[i] = pm;
    }
    m->rt.n_placements = n;
    m->rt.placements = m->ptrs;
    m->rt.n_expected_load = cr_table_n_shards(t);
    m->rt.expected_load = (double *)cr_table_expected_load(t);
    m->rt.n_shards = cr_table_n_shards(t);
    m->rt.admitted_rate_total = cr_table_admitted_rate_total(t);
    m->rt.unadmitted_rate_total = cr_table_unadmitted_rate_total(t);
    m->rt.imbalance = cr_table_imbalance(t);
    return 0;
}

static void table_msg_free(table_msg *m)
{
    free(m->placements);
    free(m->ptrs);
}

static cr_status plan_rates(const cr_planner_config *cfg, const PlanRequest *req, cr_table **t,
                            cr_error *err)
{
    cr_session_rate *rates = malloc(req->n_rates * sizeof *rates);
    if (!rates) {
        snprintf(err->msg, sizeof err->msg, "out of memory reading %zu rates", req->n_rates);
        return CR_ENOMEM;
    }
    for (size_t i = 0; i < req->n_rates; i++)
        rates[i] = (cr_session_rate){req->rates[i]->owner, req->rates[i]->rate};
    cr_status st = cr_planner_plan(cfg, rates, req->n_rates, t, err);
    free(rates);
    return st;
}

/* Answers with t, installing it first when asked; takes ownership of t.
 * t0: when planning started, for the plan-duration metric and log. */
static void answer_plan(cr_sidecar *s, cr_table *t, int install, double t0, cr_reply *out)
{
    double planned = cr_sidecar_now(s) - t0;
    int installed = 0;
    table_msg m;
    Cacheroute__V1__PlanResponse resp = CACHEROUTE__V1__PLAN_RESPONSE__INIT;
    resp.table = &m.rt;
    if (table_msg_init(&m, t) != 0) {
        cr_reply_error(out, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory encoding the plan");
        goto done;
    }
    /* Size the answer with the widest generation before installing, so a
     * plan too large to answer is not installed either. */
    m.rt.generation = install ? UINT64_MAX : 0;
    size_t size = protobuf_c_message_get_packed_size(&resp.base);
    if (size > max_message(s)) {
        cr_reply_message(out, &resp.base, max_message(s), "plan fewer sessions");
        goto done;
    }
    cr_installed *inst = NULL;
    if (install && !(inst = cr_sidecar_install(s, t))) {
        cr_reply_error(out, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory installing the plan");
        t = NULL;
        goto done;
    }
    m.rt.generation = inst ? inst->generation : 0;
    cr_reply_message(out, &resp.base, max_message(s), NULL);
    if (inst) {
        t = NULL; /* the sidecar owns it now */
        installed = 1;
        cr_sidecar_log_install(inst, "rpc", planned);
        cr_installed_release(inst);
    }
done:
    cr_metrics_plan(s->metrics, planned, installed);
    table_msg_free(&m);
    cr_table_free(t);
}

static void plan(void *ctx, const void *message, cr_reply *out)
{
    cr_sidecar *s = ctx;
    const PlanRequest *req = message;
    cr_planner_config cfg = s->cfg->planner;
    if (req->config)
        cfg = (cr_planner_config){req->config->n_shards, req->config->qcap,
                                  req->config->warm_slots_per_shard};
    if (req->n_rates && req->from_estimator) {
        cr_reply_error(out, GRPC_STATUS_INVALID_ARGUMENT,
                       "rates and from_estimator are mutually exclusive, got %zu rates and "
                       "from_estimator true",
                       req->n_rates);
        return;
    }
    if (!req->n_rates && !req->from_estimator) {
        cr_reply_error(out, GRPC_STATUS_INVALID_ARGUMENT,
                       "one of rates (non-empty) or from_estimator is required, got neither");
        return;
    }
    double t0 = cr_sidecar_now(s);
    cr_table *t;
    cr_error err;
    cr_status st = req->from_estimator ? cr_sidecar_plan_estimator(s, &cfg, &t, &err)
                                       : plan_rates(&cfg, req, &t, &err);
    if (st != CR_OK) {
        cr_reply_error(out,
                       st == CR_EINVAL ? GRPC_STATUS_INVALID_ARGUMENT
                                       : GRPC_STATUS_RESOURCE_EXHAUSTED,
                       "%s", err.msg);
        return;
    }
    answer_plan(s, t, req->install, t0, out);
}

void cr_handle_plan(void *ctx, const uint8_t *data, size_t len, cr_reply *out)
{
    cr_run_decoded(ctx, &cacheroute__v1__plan_request__descriptor, data, len, out, plan);
}

/* ---- RecordArrival ---- */

static void record_arrival(void *ctx, const void *message, cr_reply *out)
{
    cr_sidecar *s = ctx;
    const RecordArrivalRequest *req = message;
    size_t n = req->n_owners, max = max_message(s);
    if (n == 0) {
        cr_reply_error(out, GRPC_STATUS_INVALID_ARGUMENT, "owners must not be empty");
        return;
    }
    if (!req->omit_routes && n > (max - RESPONSE_SLACK) / ROUTE_MAX_BYTES) {
        cr_reply_error(out, GRPC_STATUS_RESOURCE_EXHAUSTED,
                       "%zu owners could need %zu response bytes, over the %zu-byte message "
                       "limit (--max-message-bytes); set omit_routes or send fewer owners",
                       n, n * ROUTE_MAX_BYTES + RESPONSE_SLACK, max);
        return;
    }
    Route *routes = req->omit_routes ? NULL : malloc(n * sizeof *routes);
    Route **ptrs = req->omit_routes ? NULL : malloc(n * sizeof *ptrs);
    if (!req->omit_routes && (!routes || !ptrs)) {
        free(routes);
        free(ptrs);
        cr_reply_error(out, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory for %zu routes", n);
        return;
    }
    Cacheroute__V1__RecordArrivalResponse resp = CACHEROUTE__V1__RECORD_ARRIVAL_RESPONSE__INIT;
    cr_installed *inst = cr_sidecar_acquire(s);
    uint32_t shards = inst ? cr_table_n_shards(inst->table) : s->cfg->planner.n_shards;
    double now = cr_sidecar_now(s);
    for (size_t i = 0; i < n; i++) {
        int64_t owner = req->owners[i];
        double rate = cr_estimator_record(s->estimator, owner, now);
        if (!routes)
            continue;
        const cr_placement *p = inst ? cr_table_find(inst->table, owner) : NULL;
        cacheroute__v1__route__init(&routes[i]);
        routes[i].owner = owner;
        routes[i].rate = rate;
        routes[i].admitted = p != NULL;
        routes[i].preferred_shard = p ? p->preferred_shard : cr_fallback_shard(owner, shards);
        ptrs[i] = &routes[i];
    }
    cr_metrics_arrivals(s->metrics, n);
    resp.n_routes = routes ? n : 0;
    resp.routes = ptrs;
    resp.recorded = (uint32_t)n;
    resp.table_generation = inst ? inst->generation : 0;
    cr_installed_release(inst);
    cr_reply_message(out, &resp.base, max, NULL);
    free(routes);
    free(ptrs);
}

void cr_handle_record_arrival(void *ctx, const uint8_t *data, size_t len, cr_reply *out)
{
    cr_run_decoded(ctx, &cacheroute__v1__record_arrival_request__descriptor, data, len, out,
                   record_arrival);
}

/* ---- GetRates ---- */

static void get_rates(void *ctx, const void *message, cr_reply *out)
{
    cr_sidecar *s = ctx;
    const GetRatesRequest *req = message;
    double now = cr_sidecar_now(s);
    size_t n = req->n_owners;
    cr_session_rate *all = NULL;
    if (n == 0 && !(all = cr_estimator_rates(s->estimator, now, &n))) {
        cr_reply_error(out, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory taking the snapshot");
        return;
    }
    SessionRate *rates = malloc((n ? n : 1) * sizeof *rates);
    SessionRate **ptrs = malloc((n ? n : 1) * sizeof *ptrs);
    if (!rates || !ptrs) {
        cr_reply_error(out, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory for %zu rates", n);
        goto done;
    }
    for (size_t i = 0; i < n; i++) {
        cacheroute__v1__session_rate__init(&rates[i]);
        rates[i].owner = all ? all[i].owner : req->owners[i];
        rates[i].rate = all ? all[i].rate : cr_estimator_rate(s->estimator, rates[i].owner, now);
        ptrs[i] = &rates[i];
    }
    Cacheroute__V1__GetRatesResponse resp = CACHEROUTE__V1__GET_RATES_RESPONSE__INIT;
    resp.n_rates = n;
    resp.rates = ptrs;
    resp.tracked_owners = cr_estimator_size(s->estimator);
    cr_reply_message(out, &resp.base, max_message(s),
                     "list the owners to read, or raise --max-message-bytes");
done:
    free(all);
    free(rates);
    free(ptrs);
}

void cr_handle_get_rates(void *ctx, const uint8_t *data, size_t len, cr_reply *out)
{
    cr_run_decoded(ctx, &cacheroute__v1__get_rates_request__descriptor, data, len, out, get_rates);
}

/* ---- Forget ---- */

static void forget(void *ctx, const void *message, cr_reply *out)
{
    cr_sidecar *s = ctx;
    const ForgetRequest *req = message;
    Cacheroute__V1__ForgetResponse resp = CACHEROUTE__V1__FORGET_RESPONSE__INIT;
    for (size_t i = 0; i < req->n_owners; i++)
        resp.forgotten += (uint32_t)cr_estimator_forget(s->estimator, req->owners[i]);
    cr_reply_message(out, &resp.base, max_message(s), NULL);
}

void cr_handle_forget(void *ctx, const uint8_t *data, size_t len, cr_reply *out)
{
    cr_run_decoded(ctx, &cacheroute__v1__forget_request__descriptor, data, len, out, forget);
}
