/* Decisions and their outcomes: report (ReportOutcome from JSON lines, in
 * batches), decision (GetDecision), watch (WatchDecisions, one JSON line per
 * receipt) and stats (GetStats). */
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "cacheroute/v1/cacheroute.pb-c.h"
#include "cli.h"
#include "json.h"
#include "wire.h"

/* ReportOutcome's limit per call (the sidecar's CR_LOOP_MAX_OUTCOMES). */
#define REPORT_BATCH 10000

typedef Cacheroute__V1__Outcome Outcome;
typedef Cacheroute__V1__ReportOutcomeResponse ReportResponse;

typedef struct report {
    cr_client *c;
    Outcome **batch;      /* REPORT_BATCH slots */
    size_t *lines;        /* each entry's input line */
    size_t n;             /* in the batch */
    size_t applied;       /* entries of batches sent before */
    ReportResponse total; /* summed over batches */
    char first_rejection[512];
} report;

/* " (line L)" when the sidecar's message names an entry "outcomes[K]". */
static void entry_line(const report *r, const char *msg, char *out, size_t len)
{
    size_t k;
    *out = '\0';
    if (sscanf(msg, "outcomes[%zu]", &k) == 1 && k < r->n)
        snprintf(out, len, " (line %zu)", r->lines[k]);
}

/* Sends the batch and adds its counts to the total; the exit code. */
static int send_batch(report *r)
{
    Cacheroute__V1__ReportOutcomeRequest req = CACHEROUTE__V1__REPORT_OUTCOME_REQUEST__INIT;
    req.n_outcomes = r->n;
    req.outcomes = r->batch;
    ProtobufCMessage *m;
    cr_error err;
    char where[64], before[96] = "";
    grpc_status_code st =
        cr_client_call(r->c, SERVICE "ReportOutcome", &req.base,
                       &cacheroute__v1__report_outcome_response__descriptor, &m, &err);
    if (st != GRPC_STATUS_OK) {
        entry_line(r, err.msg, where, sizeof where);
        if (r->applied)
            snprintf(before, sizeof before, "; the %zu outcomes before line %zu were applied",
                     r->applied, r->lines[0]);
        fprintf(stderr, "cacheroute: %s: %s%s%s\n", cr_wire_status_name(st), err.msg, where,
                before);
        return EXIT_RPC;
    }
    const ReportResponse *resp = (const ReportResponse *)m;
    r->total.accepted += resp->accepted;
    r->total.matched += resp->matched;
    r->total.rejected += resp->rejected;
    if (!*r->first_rejection && *resp->first_rejection)
        snprintf(r->first_rejection, sizeof r->first_rejection, "%s", resp->first_rejection);
    protobuf_c_message_free_unpacked(m, NULL);
    r->applied += r->n;
    return 0;
}

static void clear_batch(report *r)
{
    for (size_t i = 0; i < r->n; i++)
        protobuf_c_message_free_unpacked(&r->batch[i]->base, NULL);
    r->n = 0;
}

/* One JSON line as the batch's next Outcome; the exit code. */
static int add_line(report *r, const char *text, size_t lineno)
{
    json_error_t je;
    cr_error err;
    json_t *j = json_loads(text, JSON_REJECT_DUPLICATES, &je);
    if (!j) {
        fprintf(stderr, "cacheroute: line %zu: not JSON: %s\n", lineno, je.text);
        return EXIT_USAGE;
    }
    ProtobufCMessage *m = cr_message_from_json(j, &cacheroute__v1__outcome__descriptor, &err);
    json_decref(j);
    if (!m) {
        fprintf(stderr, "cacheroute: line %zu: %s\n", lineno, err.msg);
        return EXIT_USAGE;
    }
    r->lines[r->n] = lineno;
    r->batch[r->n++] = (Outcome *)m;
    return 0;
}

int cr_cli_report(cr_client *c, const char *file)
{
    FILE *in = cr_cli_open_input(file);
    if (!in)
        return EXIT_USAGE;
    report r = {.c = c, .total = CACHEROUTE__V1__REPORT_OUTCOME_RESPONSE__INIT};
    r.batch = malloc(REPORT_BATCH * sizeof *r.batch);
    r.lines = malloc(REPORT_BATCH * sizeof *r.lines);
    int rc = r.batch && r.lines ? 0 : EXIT_RPC, sent = 0;
    char *line = NULL;
    size_t cap = 0, lineno = 0;
    while (!rc && getline(&line, &cap, in) >= 0) {
        lineno++;
        char *p = line + strspn(line, " \t\r\n");
        if (!*p)
            continue;
        rc = add_line(&r, p, lineno);
        if (!rc && r.n == REPORT_BATCH) {
            rc = send_batch(&r);
            sent = 1;
            clear_batch(&r);
        }
    }
    if (!rc && (r.n || !sent)) /* the rest; an empty input reports nothing */
        rc = send_batch(&r);
    clear_batch(&r);
    free(line);
    free(r.batch);
    free(r.lines);
    if (in != stdin)
        fclose(in);
    r.total.first_rejection = r.first_rejection;
    return rc ? rc : cr_cli_print(&r.total.base, JSON_INDENT(2));
}

int cr_cli_decision(cr_client *c, const char *request_id)
{
    Cacheroute__V1__GetDecisionRequest req = CACHEROUTE__V1__GET_DECISION_REQUEST__INIT;
    req.request_id = (char *)request_id;
    return cr_cli_call_and_print(c, SERVICE "GetDecision", &req.base,
                                 &cacheroute__v1__decision_receipt__descriptor, NULL);
}

int cr_cli_stats(cr_client *c)
{
    Cacheroute__V1__GetStatsRequest req = CACHEROUTE__V1__GET_STATS_REQUEST__INIT;
    return cr_cli_call_and_print(c, SERVICE "GetStats", &req.base,
                                 &cacheroute__v1__get_stats_response__descriptor, NULL);
}

/* ---- watch ---- */

static volatile sig_atomic_t interrupted;

static void on_interrupt(int sig)
{
    (void)sig;
    interrupted = 1;
}

typedef struct watching {
    uint64_t count, printed;
    int failed;
} watching;

/* Prints one receipt as a JSON line; nonzero once count are out. */
static int print_receipt(void *ctx, ProtobufCMessage *m)
{
    watching *w = ctx;
    w->failed = cr_cli_print(m, JSON_COMPACT);
    protobuf_c_message_free_unpacked(m, NULL);
    w->printed++;
    return w->failed || (w->count && w->printed >= w->count);
}

int cr_cli_watch(cr_client *c, uint64_t count)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_interrupt; /* no SA_RESTART: Ctrl-C ends the watch, exit 0 */
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    Cacheroute__V1__WatchDecisionsRequest req = CACHEROUTE__V1__WATCH_DECISIONS_REQUEST__INIT;
    watching w = {count, 0, 0};
    cr_error err;
    grpc_status_code st = cr_client_stream(c, SERVICE "WatchDecisions", &req.base,
                                           &cacheroute__v1__decision_receipt__descriptor,
                                           print_receipt, &w, &interrupted, &err);
    if (st != GRPC_STATUS_OK) {
        fprintf(stderr, "cacheroute: %s: %s\n", cr_wire_status_name(st), err.msg);
        return EXIT_RPC;
    }
    return w.failed;
}
