/* The replica's reports: one log line per change of state, and its gauges
 * at scrape time. */
#include "log.h"
#include "observe.h"

static void event(void *ctx, const cr_replica_event *ev)
{
    (void)ctx;
    switch (ev->kind) {
    case CR_REPLICA_BACKEND_UP:
        cr_log(CR_LOG_INFO, "state backend up", json_pack("{s:s}", "backend", ev->detail));
        break;
    case CR_REPLICA_BACKEND_DOWN:
        cr_log(CR_LOG_WARN, "state backend down: serving from local state and the last table",
               json_pack("{s:s}", "error", ev->detail));
        break;
    case CR_REPLICA_LEADER:
    case CR_REPLICA_FOLLOWER:
        cr_log(CR_LOG_INFO, ev->kind == CR_REPLICA_LEADER ? "replica leads" : "replica follows",
               json_pack("{s:s,s:I}", "replica_id", ev->detail, "generation",
                         (json_int_t)ev->generation));
        break;
    case CR_REPLICA_SKEWED:
    case CR_REPLICA_UNSKEWED:
        cr_log(ev->kind == CR_REPLICA_SKEWED ? CR_LOG_WARN : CR_LOG_INFO,
               ev->kind == CR_REPLICA_SKEWED
                   ? "wall clock skewed against Redis TIME: merged rates err by 2^(skew/H)"
                   : "wall clock agrees with Redis TIME again",
               json_pack("{s:s,s:f,s:f}", "replica_id", ev->detail, "skew_s", ev->skew_s,
                         "bound_s", CR_REPLICA_SKEW_WARN_S));
        break;
    case CR_REPLICA_TABLE_REFUSED:
        cr_log(CR_LOG_WARN, "published table refused",
               json_pack("{s:s,s:I}", "reason", ev->detail, "generation",
                         (json_int_t)ev->generation));
        break;
    case CR_REPLICA_MEMBERS_REFUSED:
        cr_log(CR_LOG_WARN, "published endpoint set refused",
               json_pack("{s:s,s:I}", "reason", ev->detail, "version",
                         (json_int_t)ev->generation));
        break;
    case CR_REPLICA_FORWARD_REFUSED:
        cr_log(CR_LOG_WARN, "forwarded endpoint call refused by the leader",
               json_pack("{s:s}", "reason", ev->detail));
        break;
    case CR_REPLICA_REFUSED:
        cr_log(CR_LOG_WARN, "publish refused by the lease fence",
               json_pack("{s:s,s:I}", "reason", ev->detail, "generation",
                         (json_int_t)ev->generation));
        break;
    default:
        cr_log(CR_LOG_ERROR, "replica error", json_pack("{s:s}", "error", ev->detail));
    }
}

cr_replica_hooks cr_observe_replica_hooks(cr_observer *o)
{
    return (cr_replica_hooks){.event = event, .ctx = o};
}

#define ROW(field, name, type, help) CR_OBSERVE_ROW(cr_replica_stats, field, name, type, help)
static const cr_observe_row replica_rows[] = {
    ROW(backend_up, "cacheroute_state_backend_up", "gauge",
        "1 while --state-backend answers, else 0."),
    ROW(last_sync_age_s, "cacheroute_replica_last_sync_age_seconds", "gauge",
        "Seconds since this replica's last successful push; -1 before the first."),
    ROW(leader, "cacheroute_replica_leader", "gauge", "1 while this replica holds the lease."),
    ROW(lease_changes, "cacheroute_replica_lease_changes_total", "counter",
        "Times this replica became leader or follower."),
    ROW(tables_published, "cacheroute_replica_tables_published_total", "counter",
        "Cluster tables this replica published as leader."),
    ROW(tables_installed, "cacheroute_replica_tables_installed_total", "counter",
        "Cluster tables this replica fetched and installed as follower."),
    ROW(tables_refused, "cacheroute_replica_tables_refused_total", "counter",
        "Published tables this replica did not install: a generation that did "
        "not move forward, or another --n-shards."),
    ROW(members_published, "cacheroute_replica_endpoint_sets_published_total", "counter",
        "Endpoint set versions this replica published as leader."),
    ROW(members_installed, "cacheroute_replica_endpoint_sets_installed_total", "counter",
        "Leader's endpoint sets this replica adopted as follower."),
    ROW(members_refused, "cacheroute_replica_endpoint_sets_refused_total", "counter",
        "Published endpoint sets this replica did not adopt: a version that "
        "did not move forward, or a bad blob."),
    ROW(members_version, "cacheroute_replica_endpoint_set_version", "gauge",
        "The endpoint set version this replica last published or adopted; 0 "
        "before the first."),
    ROW(forwarded, "cacheroute_replica_forwarded_total", "counter",
        "SetEndpoints and DrainEndpoint calls this follower pushed to the leader."),
    ROW(forwards_applied, "cacheroute_replica_forwards_applied_total", "counter",
        "Forwarded endpoint calls this leader applied."),
    ROW(forwards_refused, "cacheroute_replica_forwards_refused_total", "counter",
        "Forwarded endpoint calls this leader's core refused (logged)."),
    ROW(forward_queue, "cacheroute_replica_forward_queue", "gauge",
        "Forwarded endpoint calls held here, not yet pushed to Redis."),
    ROW(merge_seconds, "cacheroute_replica_merge_seconds", "gauge",
        "Duration of this replica's last merge of every live replica's counts."),
    ROW(merges, "cacheroute_replica_merges_total", "counter",
        "Merges of every live replica's counts: the leader's for its plans, and "
        "any replica's while merged GetRates are asked for."),
    ROW(replicas_seen, "cacheroute_replica_replicas_seen", "gauge",
        "Live replicas (pushed within --replica-ttl) at the last push or merge."),
};
#undef ROW

void cr_observe_replica_gauges(cr_replica *r, cr_page *p)
{
    cr_replica_stats st;
    cr_replica_stats_read(r, &st);
    cr_observe_rows(p, replica_rows, CR_OBSERVE_N(replica_rows), &st);
}
