/* The door's settings (admit.h): its option rows, group "admit", and the
 * door they make. The table of objectives is admit's parser's text; each
 * of the door's bounds has a row here and a metric (server/obs/). */
#include <stddef.h>
#include <stdint.h>

#include "config.h"

#define AT(field) offsetof(cr_admit_server_config, field)

/* --objectives: what cr_admit_objectives_parse takes. */
static cr_status valid_objectives(const char *value, cr_error *err)
{
    cr_admit_objective t[CR_ADMIT_MAX_OBJECTIVES];
    size_t n;
    cr_error why;
    if (cr_admit_objectives_parse(value, t, &n, &why) == CR_OK)
        return CR_OK;
    return cr_fail(err, CR_EINVAL, "--objectives: %s", why.msg);
}

/* the index is cr_admit_config.meet_slo (CR_ADMIT_MEET_*) */
static const char *const MEET[] = {"off", "pressed", "always", NULL};

static const cr_option ADMIT_ROWS[] = {
    {.name = "objectives", .key = "objectives", .type = CR_OPT_STRING,
     .offset = AT(objectives), .def_text = "", .valid = valid_objectives,
     .help = "the door's objectives, \"name:priority[:ttft_slo_ms],...\" (e.g. "
             "\"interactive:0:2000,batch:-1:30000\"): priority in -1000..1000, negative = "
             "sheddable; a request naming one, or giving a priority or TTFT SLO, meets the "
             "door; empty = no door"},
    {.name = "admit-meet-slo", .key = "meet_slo", .type = CR_OPT_CHOICE,
     .offset = AT(meet_slo), .def_text = "pressed", .choices = MEET,
     .help = "under --route-by ttft, when a request with an SLO whose pick is predicted to "
             "miss it goes to the cheapest shard predicted to meet it, when one is (the cache "
             "preferred among those): pressed = while the door acts (pressed, or "
             "--admit-pressure 0), so an idle door changes no route; always = an idle door "
             "too; off = never, the rule's pick whatever its SLO"},
    {.name = "admit-budget-ms", .key = "budget_ms", .type = CR_OPT_DOUBLE,
     .offset = AT(budget_ms), .def = 0, .min = 0, .max = CR_ADMIT_MAX_SLO_MS,
     .help = "the longest predicted queue wait, ms, held work is dispatched to and, with "
             "--admit-pressure 0, a sheddable request is routed into (its predicted TTFT "
             "within its own SLO too): what keeps room for critical traffic; while the door "
             "is pressed, also the last stretch before its deadline in which a held request "
             "may still go; 0 = half the tightest critical SLO of --objectives (none: only "
             "its own SLO)"},
    {.name = "admit-pressure", .key = "pressure", .type = CR_OPT_DOUBLE,
     .offset = AT(pressure), .def = 0.1, .min = 0, .max = 1,
     .help = "the share of critical requests predicted to miss their SLO for the queues "
             "(their prefill alone would meet it; with a shard idle no miss counts), "
             "averaged over --admit-pressure-tau-s, "
             "above which the door acts: every sheddable request is then held or shed; "
             "below it every request is routed as without a door (but for "
             "--admit-meet-slo always's moves); 0 = the door always "
             "acts, by --admit-budget-ms"},
    {.name = "admit-pressure-off", .key = "pressure_off", .type = CR_OPT_DOUBLE,
     .offset = AT(pressure_off), .def = 0, .min = 0, .max = 1,
     .help = "the share the door, once acting, must fall back to before it stops, at most "
             "--admit-pressure; 0 = half of --admit-pressure"},
    {.name = "admit-pressure-tau-s", .key = "pressure_tau_s", .type = CR_OPT_DOUBLE,
     .offset = AT(pressure_tau_s), .def = 120, .min = 0.001, .max = 3600,
     .help = "the time constant, seconds, of the share --admit-pressure bounds"},
    {.name = "admit-max-queued", .key = "max_queued", .type = CR_OPT_U32,
     .offset = AT(max_queued), .def = 0, .min = 0, .max = 1u << 20,
     .help = "sheddable requests the door may hold at once: the endpoint picker leaves "
             "their ext_proc streams unanswered until a dispatch (their destination) or the "
             "deadline (429); Route never waits and sheds what it would hold; 0 = no queue, "
             "the door sheds"},
    {.name = "admit-max-per-id", .key = "max_per_id", .type = CR_OPT_U32,
     .offset = AT(max_per_id), .def = 0, .min = 0, .max = 1u << 20,
     .help = "held requests per fairness id, at most --admit-max-queued; 0 = "
             "--admit-max-queued"},
    {.name = "admit-max-held-bytes", .key = "max_held_bytes", .type = CR_OPT_U64,
     .offset = AT(max_held_bytes), .def = 67108864, .min = 0, .max = CR_OPT_U64_MAX,
     .help = "bytes the door's held requests may take, their copies"},
    {.name = "admit-max-wait-ms", .key = "max_wait_ms", .type = CR_OPT_DOUBLE,
     .offset = AT(max_wait_ms), .def = 30000, .min = 0, .max = CR_ADMIT_MAX_SLO_MS,
     .help = "the longest a held request waits, ms, then dropped (429); its own SLO when "
             "shorter; the gateway's ext_proc max_message_timeout must allow it, and "
             "--stream-idle-timeout must be longer"},
    {.name = "admit-tracked-ids", .key = "tracked_ids", .type = CR_OPT_U32,
     .offset = AT(tracked_ids), .def = 64, .min = 1, .max = 4096,
     .help = "fairness ids counted apart (metrics, receipts); the rest count as \"other\""},
};

const cr_option_table cr_admit_server_options = CR_OPTION_TABLE("admit", ADMIT_ROWS);

/* The budget when none is given: half the tightest critical SLO of
 * t[0..n), so a critical request behind sheddable work keeps half its SLO
 * (the setting bench/README.md measured); 0 (none) when no critical
 * objective has one. */
static double tightest_critical(const cr_admit_objective *t, size_t n)
{
    double least = 0;
    for (size_t i = 0; i < n; i++)
        if (t[i].priority >= 0 && t[i].slo_ms > 0 && (least == 0 || t[i].slo_ms < least))
            least = t[i].slo_ms;
    return least;
}

int cr_config_door(const cr_admit_server_config *a, cr_admit_config *cfg, cr_admit_objective *t,
                   size_t *n, cr_error *err)
{
    *n = 0;
    if (!a->objectives || !*a->objectives)
        return 0;
    if (cr_admit_objectives_parse(a->objectives, t, n, err) != CR_OK)
        return -1;
    cr_admit_config_default(cfg);
    cfg->max_queued = a->max_queued;
    cfg->max_per_id = a->max_per_id ? a->max_per_id : a->max_queued;
    cfg->max_bytes = a->max_held_bytes;
    cfg->max_wait_ms = a->max_wait_ms;
    cfg->budget_ms = a->budget_ms > 0 ? a->budget_ms : tightest_critical(t, *n) / 2;
    cfg->tracked_ids = a->tracked_ids;
    cfg->pressure = a->pressure;
    cfg->pressure_off = a->pressure_off;
    cfg->pressure_tau_s = a->pressure_tau_s;
    cfg->meet_slo = a->meet_slo;
    return cr_admit_config_check(cfg, err) == CR_OK ? 1 : -1;
}
