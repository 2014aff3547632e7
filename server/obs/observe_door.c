/* The door's figures at scrape time (cr_admit_stats_read): what it held,
 * its bounds, and admitted, queued, shed and dropped per objective (the
 * table's names and "none") and per fairness id (--admit-tracked-ids of
 * them, the rest "other": the label sets stay bounded), with the SLO
 * attainment per objective from outcomes. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "observe.h"

#define REQUESTS "cacheroute_door_requests_total"
#define BY_ID "cacheroute_door_fairness_requests_total"

/* The four verdict counts of c under labels "<key>=..." (made once). */
static void verdicts(cr_page *p, const char *family, const char *label,
                     const cr_admit_counts *c)
{
    static const char *const WORD[] = {"admitted", "queued", "shed", "dropped"};
    const uint64_t v[] = {c->admitted, c->queued, c->shed, c->dropped};
    char labels[256 + 32]; /* a label (at most 255) and ",verdict=\"dropped\"" */
    for (int i = 0; i < 4; i++) {
        snprintf(labels, sizeof labels, "%s,verdict=\"%s\"", label, WORD[i]);
        cr_page_sample(p, family, labels, (double)v[i]);
    }
}

static void bounds(cr_page *p, const cr_admit_config *cfg)
{
    const char *name = "cacheroute_door_bound";
    cr_page_family(p, name, "gauge",
                   "The door's bounds (--admit-*): held requests in all and per fairness id, "
                   "held bytes, the longest wait in ms, the sheddable budget in ms, the "
                   "pressure bounds (shares: on above, off at or below) and their time "
                   "constant in s, fairness ids tracked.");
    cr_page_sample(p, name, "bound=\"max_queued\"", cfg->max_queued);
    cr_page_sample(p, name, "bound=\"max_per_id\"", cfg->max_per_id);
    cr_page_sample(p, name, "bound=\"max_held_bytes\"", (double)cfg->max_bytes);
    cr_page_sample(p, name, "bound=\"max_wait_ms\"", cfg->max_wait_ms);
    cr_page_sample(p, name, "bound=\"budget_ms\"", cfg->budget_ms);
    cr_page_sample(p, name, "bound=\"pressure\"", cfg->pressure);
    cr_page_sample(p, name, "bound=\"pressure_off\"", cfg->pressure_off);
    cr_page_sample(p, name, "bound=\"pressure_tau_s\"", cfg->pressure_tau_s);
    cr_page_sample(p, name, "bound=\"tracked_ids\"", cfg->tracked_ids);
}

static void held(cr_page *p, const cr_admit_stats *st)
{
    cr_page_family(p, "cacheroute_door_pressure", "gauge",
                   "The share of critical requests predicted to miss their SLO for the queues, "
                   "averaged (the door acts from when it rises above bound=\"pressure\" "
                   "until it falls to bound=\"pressure_off\").");
    cr_page_sample(p, "cacheroute_door_pressure", NULL, st->pressure);
    cr_page_family(p, "cacheroute_door_pressed", "gauge",
                   "1 while the door acts (sheddable requests held or shed), 0 while every "
                   "request is routed as without a door.");
    cr_page_sample(p, "cacheroute_door_pressed", NULL, st->pressed);
    cr_page_family(p, "cacheroute_door_held", "gauge", "Requests the door holds now.");
    cr_page_sample(p, "cacheroute_door_held", NULL, st->held);
    cr_page_family(p, "cacheroute_door_held_bytes", "gauge", "Bytes its held requests take.");
    cr_page_sample(p, "cacheroute_door_held_bytes", NULL, (double)st->held_bytes);
    cr_page_family(p, "cacheroute_door_oldest_held_seconds", "gauge",
                   "The longest any held request has waited.");
    cr_page_sample(p, "cacheroute_door_oldest_held_seconds", NULL, st->oldest_s);
}

/* Per objective: the verdicts, and outcomes with an SLO, met and the
 * attainment (met / outcomes; NaN before any). */
static void objectives(cr_page *p, cr_admit *door, const cr_admit_stats *st)
{
    size_t n;
    const cr_admit_objective *t = cr_admit_objectives(door, &n);
    cr_page_family(p, REQUESTS, "counter",
                   "Requests that met the door, by objective (\"none\": no objective of the "
                   "table) and verdict: admitted (routed at once or dispatched), queued (held), "
                   "shed (refused at once, 429), dropped (held past its deadline, 429).");
    char label[128];
    for (size_t i = 0; i <= st->n_objectives; i++) {
        cr_page_label(label, sizeof label, "objective", i < n ? t[i].name : "none");
        verdicts(p, REQUESTS, label, &st->objective[i]);
    }
    static const char *const FAMILY[] = {"cacheroute_door_slo_outcomes_total",
                                         "cacheroute_door_slo_met_total",
                                         "cacheroute_door_slo_attainment_ratio"};
    static const char *const TYPE[] = {"counter", "counter", "gauge"};
    static const char *const HELP[] = {
        "Outcomes with a TTFT and an SLO, by objective.",
        "Of them, those whose measured TTFT was within the SLO.",
        "SLO attainment per objective: met over outcomes with an SLO (NaN before any)."};
    for (int f = 0; f < 3; f++) {
        cr_page_family(p, FAMILY[f], TYPE[f], HELP[f]);
        for (size_t i = 0; i <= st->n_objectives; i++) {
            const cr_admit_counts *c = &st->objective[i];
            double v = f == 0   ? (double)c->outcomes
                       : f == 1 ? (double)c->met
                       : c->outcomes ? (double)c->met / (double)c->outcomes
                                     : NAN;
            cr_page_label(label, sizeof label, "objective", i < n ? t[i].name : "none");
            cr_page_sample(p, FAMILY[f], label, v);
        }
    }
}

void cr_observe_door_gauges(cr_core *core, cr_page *p)
{
    cr_admit *door = cr_core_door(core);
    if (!door)
        return;
    const cr_admit_config *cfg = cr_admit_config_of(door);
    size_t max_ids = (size_t)cfg->tracked_ids + 1, n_ids = 0;
    cr_admit_stats st;
    cr_admit_id_counts *ids = malloc(max_ids * sizeof *ids);
    cr_admit_stats_read(door, cr_core_now(core), &st, ids, ids ? max_ids : 0, &n_ids);
    bounds(p, cfg);
    held(p, &st);
    objectives(p, door, &st);
    cr_page_family(p, BY_ID, "counter",
                   "Requests that met the door by fairness id (the first --admit-tracked-ids "
                   "seen; the rest \"other\") and verdict, as by objective.");
    char label[256];
    for (size_t i = 0; i < n_ids; i++) {
        cr_page_label(label, sizeof label, "fairness_id", ids[i].name);
        verdicts(p, BY_ID, label, &ids[i].c);
    }
    free(ids);
}
