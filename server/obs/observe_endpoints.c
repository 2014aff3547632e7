/* The endpoint set: a log line per change, and at scrape time the
 * endpoints by state, each one's state (at most CR_ROUTE_INDEX_MAX_SHARDS
 * samples, so a scrape stays small), the changes and the sessions they
 * moved, and the endpoints file's reads (discovery's own:
 * observe_discover.c). */
#include <stdio.h>

#include "handlers.h" /* cr_endpoint_change_pack */
#include "log.h"
#include "observe.h"

/* A change at info, an endpoint marked down at warn; sent to every
 * WatchEndpoints watcher. */
void cr_observe_members(void *ctx, const cr_core_members_event *ev)
{
    cr_observer *o = ctx;
    cr_kv_endpoints_changed(atomic_load(&o->kv_follow)); /* a flag: it re-reads the set */
    const cr_endpoints_change *c = &ev->change;
    uint8_t *body;
    size_t len;
    if (o->members && cr_watch_active(o->members) && cr_endpoint_change_pack(ev, &body, &len) == 0)
        cr_watch_publish(o->members, body, len);
    json_t *f = json_pack("{s:s,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I}", "by", ev->by, "version",
                          (json_int_t)ev->version, "shards", (json_int_t)ev->n_slots, "joined",
                          (json_int_t)c->joined, "removed", (json_int_t)c->removed, "drained",
                          (json_int_t)c->drained, "undrained", (json_int_t)c->undrained,
                          "failed", (json_int_t)c->failed, "recovered",
                          (json_int_t)c->recovered, "sessions_to_move",
                          (json_int_t)ev->sessions_to_move);
    if (ev->id)
        json_object_set_new(f, "endpoint", json_string(ev->id));
    cr_log(c->failed ? CR_LOG_WARN : CR_LOG_INFO, "endpoints changed", f);
}

static void by_state(const cr_endpoints *e, cr_page *p)
{
    const char *name = "cacheroute_endpoints";
    char label[32];
    cr_page_family(p, name, "gauge", "Endpoints (shards) in the set, by state.");
    for (int s = CR_ENDPOINT_ACTIVE; s <= CR_ENDPOINT_GONE; s++) {
        snprintf(label, sizeof label, "state=\"%s\"", cr_endpoint_state_name(s));
        cr_page_sample(p, name, label, e->n_state[s]);
    }
}

static void each_endpoint(const cr_endpoints *e, cr_page *p)
{
    const char *name = "cacheroute_endpoint_active";
    char label[CR_ENDPOINT_ID_MAX * 2 + 64], id[CR_ENDPOINT_ID_MAX * 2 + 24];
    cr_page_family(p, name, "gauge",
                   "1 while the endpoint takes new requests, 0 while draining or down "
                   "(gone ones are left out).");
    for (uint32_t s = 0; s < e->n_slots && s < CR_ROUTE_INDEX_MAX_SHARDS; s++) {
        const cr_endpoint *x = &e->slot[s];
        if (x->state == CR_ENDPOINT_GONE)
            continue;
        cr_page_label(id, sizeof id, "endpoint", x->id);
        snprintf(label, sizeof label, "shard=\"%u\",%s", s, id);
        cr_page_sample(p, name, label, x->state == CR_ENDPOINT_ACTIVE);
    }
}

static void changes(const cr_endpoints *e, cr_page *p)
{
    static const char *const what[6] = {"joined", "removed", "drained",
                                        "undrained", "failed", "recovered"};
    const char *name = "cacheroute_endpoint_changes_total";
    char label[32];
    cr_page_family(p, name, "counter", "Endpoints that joined, left, drained, ... since start.");
    for (int i = 0; i < 6; i++) {
        snprintf(label, sizeof label, "change=\"%s\"", what[i]);
        cr_page_sample(p, name, label, (double)e->total[i]);
    }
}

#define ROW(field, name, type, help) CR_OBSERVE_ROW(cr_endpoints, field, name, type, help)
static const cr_observe_row set_rows[] = {
    ROW(version, "cacheroute_endpoints_version", "gauge",
        "The endpoint set's version: one more per change."),
    ROW(sessions_to_move, "cacheroute_endpoint_sessions_to_move_total", "counter",
        "Sessions whose last shard left service with a change: the fewest "
        "any rule must move."),
};
#undef ROW

void cr_observe_endpoint_gauges(const cr_observer *o, cr_page *p)
{
    const cr_endpoints *e = cr_core_endpoints(o->core);
    cr_route_stats st;
    cr_core_route_stats_read(o->core, &st, NULL, 0);
    const char *moved = "cacheroute_route_sessions_moved_total";
    cr_page_family(p, moved, "counter",
                   "Requests of a session sent to another shard than its last: cause "
                   "\"rebalance\" while the last one could still take it, \"left\" when it had "
                   "drained, gone down or been removed.");
    cr_page_sample(p, moved, "cause=\"rebalance\"", (double)st.moved[0]);
    cr_page_sample(p, moved, "cause=\"left\"", (double)st.moved[1]);
    if (e) {
        by_state(e, p);
        each_endpoint(e, p);
        changes(e, p);
        cr_observe_rows(p, set_rows, CR_OBSERVE_N(set_rows), e);
    }
    cr_endpoints_release(e);
    if (o->endpoints) {
        uint64_t refused, applied;
        cr_endpoints_watch_counts(o->endpoints, &refused, &applied);
        const char *name = "cacheroute_endpoints_file_reads_total";
        cr_page_family(p, name, "counter",
                       "Reads of --endpoints-file: applied, or refused (the set stays).");
        cr_page_sample(p, name, "result=\"applied\"", (double)applied);
        cr_page_sample(p, name, "result=\"refused\"", (double)refused);
    }
}
