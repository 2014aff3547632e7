/* Kubernetes discovery: its reports as log lines, its figures as the
 * cacheroute_k8s_* families. */
#include "log.h"
#include "observe.h"

static void k8s_log(void *ctx, int level, const char *what, const char *detail)
{
    (void)ctx;
    cr_log(level ? CR_LOG_WARN : CR_LOG_INFO, what,
           *detail ? json_pack("{s:s}", "error", detail) : NULL);
}

cr_k8s_hooks cr_observe_k8s_hooks(cr_observer *o)
{
    return (cr_k8s_hooks){.log = k8s_log, .ctx = o};
}

#define ROW(field, name, type, help) CR_OBSERVE_ROW(cr_k8s_stats, field, name, type, help)
static const cr_observe_row k8s_rows[] = {
    ROW(lists, "cacheroute_k8s_lists_total", "counter",
        "Pod lists read from the API server (the first and each relist)."),
    ROW(relists, "cacheroute_k8s_relists_total", "counter",
        "Pod lists after the first: after 410 Gone, or a pool whose selector or ports "
        "changed."),
    ROW(watches, "cacheroute_k8s_watches_total", "counter",
        "Pod watches opened (each ends after its timeoutSeconds and is opened again)."),
    ROW(events, "cacheroute_k8s_events_total", "counter",
        "ADDED, MODIFIED and DELETED pod events read."),
    ROW(bookmarks, "cacheroute_k8s_bookmarks_total", "counter", "BOOKMARK events read."),
    ROW(gone, "cacheroute_k8s_gone_total", "counter",
        "410 Gone answers (the resourceVersion too old): each relists."),
    ROW(errors, "cacheroute_k8s_errors_total", "counter",
        "Failed or refused requests and answers, and endpoints left out: the set stays."),
    ROW(empty, "cacheroute_k8s_empty_sets_total", "counter",
        "Times the pool selected no pod with an IP: not applied, the last set stays."),
    ROW(applied, "cacheroute_k8s_sets_applied_total", "counter",
        "Endpoint sets applied from the pool's pods."),
    ROW(pods, "cacheroute_k8s_pods", "gauge", "Pods the pool selects, as last read."),
};
#undef ROW

void cr_observe_k8s_gauges(cr_k8s *k, cr_page *page)
{
    cr_k8s_stats st;
    cr_k8s_stats_read(k, &st);
    cr_observe_rows(page, k8s_rows, CR_OBSERVE_N(k8s_rows), &st);
}
