/* The discovery sources' reports: a log line for each (the sources
 * already limit failures to one a minute), and their figures at scrape
 * time. */
#include "log.h"
#include "observe.h"

static void say(void *ctx, int level, const char *what, const char *source, const char *why)
{
    (void)ctx;
    cr_log(level ? CR_LOG_WARN : CR_LOG_INFO, what,
           why ? json_pack("{s:s,s:s}", "source", source, "detail", why)
               : json_pack("{s:s}", "source", source));
}

cr_discover_hooks cr_observe_discover_hooks(cr_observer *o)
{
    return (cr_discover_hooks){.log = say, .ctx = o};
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

/* A counter family with a sample a result. */
static void results(cr_page *p, const char *name, const char *help, const char *a, uint64_t va,
                    const char *b, uint64_t vb)
{
    cr_page_family(p, name, "counter", help);
    cr_page_sample(p, name, a, (double)va);
    cr_page_sample(p, name, b, (double)vb);
}

void cr_observe_discover_gauges(const cr_observer *o, cr_page *p)
{
    if (o->dns) {
        cr_dns_stats st;
        cr_dns_watch_stats(o->dns, &st);
        results(p, "cacheroute_dns_resolutions_total",
                "Resolutions of --endpoints-dns: ok (an address or more), or failed (the set "
                "stays).",
                "result=\"ok\"", st.resolved, "result=\"failed\"", st.failed);
        results(p, "cacheroute_dns_sets_total",
                "Sets of --endpoints-dns that differed from the last: applied, or refused by "
                "the core (the set stays).",
                "result=\"applied\"", st.applied, "result=\"refused\"", st.refused);
        cr_page_family(p, "cacheroute_dns_endpoints", "gauge",
                       "Addresses in the last answer to --endpoints-dns.");
        cr_page_sample(p, "cacheroute_dns_endpoints", NULL, st.found);
    }
    if (o->k8s) {
        cr_k8s_stats st;
        cr_k8s_stats_read(o->k8s, &st);
        cr_observe_rows(p, k8s_rows, CR_OBSERVE_N(k8s_rows), &st);
    }
}
