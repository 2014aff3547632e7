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
}
