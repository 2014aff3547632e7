/* ListEndpoints: the current set as EndpointsResponse; the answer
 * SetEndpoints and DrainEndpoint give too (cr_endpoints_answer), after
 * forwarding them to the leader when this replica follows its set
 * (cr_endpoints_reply); and each change as WatchEndpoints streams it
 * (cr_endpoint_change_pack). */
#include <math.h>
#include <stdlib.h>

#include "handlers.h"
#include "reply.h"

typedef Cacheroute__V1__EndpointStatus EndpointStatus;

void cr_endpoints_change_msg(Cacheroute__V1__EndpointsChange *m,
                             const cr_core_members_event *ev)
{
    *m = (Cacheroute__V1__EndpointsChange)CACHEROUTE__V1__ENDPOINTS_CHANGE__INIT;
    m->joined = ev->change.joined;
    m->removed = ev->change.removed;
    m->drained = ev->change.drained;
    m->undrained = ev->change.undrained;
    m->failed = ev->change.failed;
    m->recovered = ev->change.recovered;
    m->sessions_to_move = ev->sessions_to_move;
}

int cr_endpoint_change_pack(const cr_core_members_event *ev, uint8_t **body, size_t *len)
{
    Cacheroute__V1__EndpointChange m = CACHEROUTE__V1__ENDPOINT_CHANGE__INIT;
    Cacheroute__V1__EndpointsChange change;
    cr_endpoints_change_msg(&change, ev);
    m.by = (char *)ev->by;
    m.endpoint = (char *)(ev->id ? ev->id : "");
    m.version = ev->version;
    m.shards = ev->n_slots;
    m.change = &change;
    *len = protobuf_c_message_get_packed_size(&m.base);
    if (!(*body = malloc(*len ? *len : 1)))
        return -1;
    protobuf_c_message_pack(&m.base, *body);
    return 0;
}

void cr_endpoints_answer(const cr_handlers *h, const cr_endpoints *e,
                         const cr_core_members_event *ev, cr_reply *out)
{
    Cacheroute__V1__EndpointsResponse resp = CACHEROUTE__V1__ENDPOINTS_RESPONSE__INIT;
    Cacheroute__V1__EndpointsChange change = CACHEROUTE__V1__ENDPOINTS_CHANGE__INIT;
    uint32_t n = e ? e->n_slots : 0;
    EndpointStatus *rows = calloc(n ? n : 1, sizeof *rows);
    EndpointStatus **ptrs = calloc(n ? n : 1, sizeof *ptrs);
    if (!rows || !ptrs) {
        free(rows), free(ptrs);
        cr_reply_error(out, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory for %u endpoints", n);
        return;
    }
    double now = cr_core_now(h->core);
    for (uint32_t s = 0; s < n; s++) {
        const cr_endpoint *x = &e->slot[s];
        EndpointStatus *r = &rows[s];
        *r = (EndpointStatus)CACHEROUTE__V1__ENDPOINT_STATUS__INIT;
        r->shard = s;
        r->id = (char *)x->id;
        r->address = (char *)x->address;
        r->weight = x->weight;
        r->kv_events = (char *)x->kv_events;
        r->state = (char *)cr_endpoint_state_name(x->state);
        r->state_age_s = fmax(0, now - x->since_s);
        r->retry_in_s = x->state == CR_ENDPOINT_DOWN ? fmax(0, x->down_until_s - now) : 0;
        ptrs[s] = r;
    }
    resp.version = e ? e->version : 0;
    resp.n_endpoints = n;
    resp.endpoints = ptrs;
    if (ev) {
        cr_endpoints_change_msg(&change, ev);
        resp.change = &change;
        resp.forwarded = ev->followed != 0;
    }
    cr_reply_message(out, &resp.base, h->max_message, NULL);
    free(rows), free(ptrs);
}

void cr_endpoints_reply(const cr_handlers *h, const cr_core_members_event *ev,
                        const cr_forward *f, cr_reply *out)
{
    cr_error err;
    if (ev->followed) { /* checked by the core: the leader's set takes it */
        cr_status st = h->replica ? cr_replica_forward(h->replica, f, &err)
                                  : cr_fail(&err, CR_ESTATE, "no leader to forward to");
        if (st != CR_OK) {
            cr_reply_core_error(out, st, &err);
            return;
        }
    }
    const cr_endpoints *e = cr_core_endpoints(h->core);
    cr_endpoints_answer(h, e, ev, out);
    cr_endpoints_release(e);
}

static void list_endpoints(void *ctx, const void *message, cr_reply *out)
{
    (void)message;
    const cr_handlers *h = ctx;
    const cr_endpoints *e = cr_core_endpoints(h->core);
    cr_endpoints_answer(h, e, NULL, out);
    cr_endpoints_release(e);
}

void cr_handle_list_endpoints(void *ctx, const uint8_t *data, size_t len, cr_reply *out)
{
    cr_run_decoded(ctx, &cacheroute__v1__list_endpoints_request__descriptor, data, len, out,
                   list_endpoints);
}
