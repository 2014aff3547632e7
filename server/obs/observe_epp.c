/* The endpoint picker's figures at scrape time (cr_epp_stats_read); its
 * decision-time histogram is counted as it happens (metrics.c). */
#include <stdio.h>

#include "observe.h"

#define ROW(field, name, type, help) CR_OBSERVE_ROW(cr_epp_stats, field, name, type, help)
static const cr_observe_row epp_rows[] = {
    ROW(streams_open, "cacheroute_epp_streams_open", "gauge",
        "ext_proc streams (HTTP requests through the gateway) open now."),
    ROW(streams, "cacheroute_epp_streams_total", "counter", "ext_proc streams opened."),
    ROW(routed, "cacheroute_epp_routed_total", "counter",
        "Requests given a destination (x-gateway-destination-endpoint)."),
    ROW(outcomes, "cacheroute_epp_outcomes_total", "counter",
        "Outcomes the picker reported to the core from the response phase (or a stream's "
        "early end), each releasing its route's outstanding work."),
    ROW(bad_addresses, "cacheroute_epp_bad_addresses_total", "counter",
        "Endpoints left out of a destination because their address is not ip:port."),
};
#undef ROW

void cr_observe_epp_gauges(cr_epp *e, cr_page *p)
{
    cr_epp_stats st;
    char label[64];
    cr_epp_stats_read(e, &st);
    cr_observe_rows(p, epp_rows, CR_OBSERVE_N(epp_rows), &st);
    const char *bytes = "cacheroute_epp_body_bytes_total";
    cr_page_family(p, bytes, "counter",
                   "HTTP body bytes through the picker: in (request and response bodies seen) "
                   "and out (echoed back).");
    cr_page_sample(p, bytes, "direction=\"in\"", (double)st.bytes_in);
    cr_page_sample(p, bytes, "direction=\"out\"", (double)st.bytes_out);
    const char *errors = "cacheroute_epp_errors_total";
    cr_page_family(p, errors, "counter",
                   "Requests answered with an error, streams ended by one, and fallbacks, by "
                   "reason (docs/operating.md).");
    for (int r = 0; r < CR_EPP_N_ERRORS; r++) {
        snprintf(label, sizeof label, "reason=\"%s\"", cr_epp_error_name((cr_epp_error)r));
        cr_page_sample(p, errors, label, (double)st.errors[r]);
    }
    const char *fallbacks = "cacheroute_epp_tokenize_fallbacks_total";
    cr_page_family(p, fallbacks, "counter",
                   "--epp-tokens engine: requests whose /tokenize failed or passed "
                   "--epp-tokenize-timeout, keyed by estimate instead.");
    cr_page_sample(p, fallbacks, NULL, (double)st.errors[CR_EPP_ERR_TOKENIZE]);
}
