/* Stable replans: start from the table being replaced and move only what
 * must move, so sessions keep the shards that hold their cached prefixes.
 *
 * Rules. The fresh plan's rules 1-7 are in planner.c; here c is
 * max_imbalance, h admit_hysteresis, R the number of shards, an incumbent
 * a session the previous table admits, and a newcomer any other.
 *   S1. The planner config, the replan config, then rule 1's checks with
 *       its messages. With mode fresh the plan is the fresh plan, bit for
 *       bit. A previous table over another R counts as none; with none,
 *       every session is a newcomer, so without a home function (S6)
 *       these rules give the fresh plan, and it is made as such.
 *   S2. Zero rates are ignored (rule 2), an incumbent's too: it leaves.
 *   S3. Admission order: incumbents, and the others, each by decreasing
 *       rate with ties in input order (rule 3), merged so that a newcomer
 *       comes before an incumbent only when its rate exceeds the
 *       incumbent's times (1 + h) (equal: the incumbent first). Admission
 *       walks that order with rule 4's budget and kb, so a newcomer takes
 *       an incumbent's slots only by beating it by more than h.
 *   S4. An admitted incumbent with its previous kb keeps its previous
 *       shards. Loads start at rule 5's even spread of the unadmitted rate;
 *       each kept session adds rate / kb to each of its shards, in
 *       admission order.
 *   S5. Bound B = c * mean, where mean = (admitted + unadmitted rate) / R
 *       is the final mean load. Each shard in id order whose load exceeds
 *       B gives up kept sessions, the largest rate / kb first (ties: the
 *       earlier admitted), until its load is within B. Only a session
 *       whose rate / kb is at most (c - 1) * mean is given up (any shard at
 *       or below the mean takes it within B), and only when giving up all
 *       such sessions would bring the shard within B (else none: the moves
 *       would not meet the bound). A session given up leaves all its
 *       shards. If any was given up, the loads are S4's again without
 *       them.
 *   S6. Every other admitted session (a newcomer, another kb, given up) is
 *       placed, in admission order: first each newcomer with kb 1 and a
 *       home shard (where the caller sent it while unadmitted, so its
 *       prefix is cached there) goes home when that keeps the home's load
 *       within B; then the rest by rule 6 (LPT, ties by id) on the loads
 *       left. So a shard ends above B only where S5 could not relieve it
 *       or LPT put a session on it (as rule 6 would: LPT takes the least
 *       loaded shards, so only a session large against (c - 1) * mean
 *       lifts one above B).
 *   S7. Rule 7: imbalance and preferred shards.
 * The arithmetic is in doubles in a fixed order, so the same previous
 * table, rates, home function and configs give a bit-identical table.
 *
 * Memory, per entry of rates: the sorted items (16 B), the spare buffer
 * that becomes the admitted copy (16 B) and the placements (24 B) are the
 * peak, 56 B, during admission; before it the duplicate check adds a bit
 * per previous placement and at most 8 B per newcomer to the items, and
 * after it come the shard ids (4 B per slot), a byte per placement and
 * 4 B per previous placement (newpos). S5's per-shard lists (4 B per kept
 * shard slot) exist only when a shard is over B, after the sorted items
 * are freed. Time: against the fresh plan, one (prefetched) lookup per
 * entry in the previous table's index replaces the duplicate check's own
 * index, kept sessions skip the heap, and the owner index is the previous
 * one's slots remapped in one pass (measured by `planner_bench 1000000 64 3`). */
#include "replan.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

cr_status cr_replan_config_check(const cr_replan_config *cfg, cr_error *err)
{
    return cr_options_check(&cr_replan_options, cfg, "replan.", err);
}

/* S1 and S2's items, one per entry, item i for rates[i]: an incumbent's
 * key has the top bit clear (so incumbents sort first) and .prev set; a
 * zero rate keys last in its run and is never admitted. The lookups are
 * the one random access per entry, so they are prefetched ahead. */
static cr_plan_item *make_items(const cr_table *prev, const cr_session_rate *rates, size_t n,
                                size_t *n_inc)
{
    cr_plan_item *a = malloc((n ? n : 1) * sizeof *a);
    size_t inc = 0;
    for (size_t i = 0; a && i < n; i++) {
        if (prev && i + 16 < n)
            cr_owner_index_prefetch(&prev->index, rates[i + 16].owner, 0);
        if (prev && i + 8 < n)
            cr_owner_index_prefetch(&prev->index, rates[i + 8].owner, 1);
        uint64_t bits = 0; /* -0.0 too */
        if (rates[i].rate > 0)
            memcpy(&bits, &rates[i].rate, sizeof bits);
        size_t pos = prev ? cr_owner_index_find(&prev->index, rates[i].owner) : SIZE_MAX;
        if (pos != SIZE_MAX)
            a[i] = (cr_plan_item){.key = ~bits & ~CR_REPLAN_TOP_BIT, .prev = pos}, inc++;
        else
            a[i] = (cr_plan_item){.key = ~bits, .owner = rates[i].owner};
    }
    *n_inc = inc;
    return a;
}

/* S1's owner check without an index over every entry: incumbents are
 * distinct when their previous positions are (a bitmap), the others go in
 * an index of their own. 1 when some owner repeats, -1 out of memory. */
static int has_duplicates(const cr_table *prev, const cr_plan_item *a, size_t n, size_t n_inc)
{
    uint64_t *seen = calloc((prev ? prev->n_placements : 0) / 64 + 1, sizeof *seen);
    cr_owner_index ix;
    const char *owners = (const char *)a + offsetof(cr_plan_item, owner);
    if (!seen || cr_owner_index_init(&ix, n - n_inc, n, owners, sizeof *a) != CR_OK) {
        free(seen);
        return -1;
    }
    int dup = 0;
    for (size_t i = 0; i < n && !dup; i++) {
        if (cr_replan_incumbent(&a[i])) {
            uint64_t bit = UINT64_C(1) << (a[i].prev % 64), *word = &seen[a[i].prev / 64];
            dup = (*word & bit) != 0;
            *word |= bit;
        } else {
            dup = cr_owner_index_insert(&ix, i) != i;
        }
    }
    cr_owner_index_free(&ix);
    free(seen);
    return dup;
}

/* S1 and S3's two orders: the items sorted, in *sorted, and the spare
 * buffer in *spare. CR_EINVAL with rule 1's message for a repeated owner. */
static cr_status order_items(const cr_table *prev, const cr_session_rate *rates, size_t n,
                             size_t *n_inc, cr_plan_item **sorted, cr_plan_item **spare,
                             cr_error *err)
{
    cr_plan_item *a = make_items(prev, rates, n, n_inc), *tmp = NULL;
    int dup = a ? has_duplicates(prev, a, n, *n_inc) : -1;
    if (dup == 0 && (tmp = malloc((n ? n : 1) * sizeof *tmp)) != NULL)
        *sorted = n ? cr_sort_records(a, tmp, n) : a;
    if (dup == 0 && tmp && *sorted) {
        *spare = *sorted == a ? tmp : a;
        return CR_OK;
    }
    free(a);
    free(tmp);
    if (dup != 1)
        return CR_ENOMEM;
    cr_status st = cr_plan_validate(rates, n, err); /* the first repeat, named */
    return st != CR_OK ? st : cr_fail(err, CR_EINVAL, "rates: an owner repeats");
}

/* S3: merges the two runs of sorted into admission order, admitting with
 * rule 4's budget; the admitted items go to rp->adm (room for m). Returns
 * the shard slots they hold. */
static uint64_t admit(cr_replan_state *rp, const cr_planner_config *cfg, double grow,
                      const cr_plan_item *sorted, size_t n_inc, size_t m)
{
    cr_table *t = rp->t;
    double budget = (double)cfg->n_shards * cfg->warm_slots_per_shard;
    uint64_t used = 0;
    size_t i = 0, j = n_inc, k = 0;
    while (i < n_inc || j < m) {
        int take_inc = j == m || (i < n_inc && cr_plan_item_rate(&sorted[i]) * grow >=
                                                   cr_plan_item_rate(&sorted[j]));
        const cr_plan_item *it = take_inc ? &sorted[i++] : &sorted[j++];
        double rate = cr_plan_item_rate(it);
        if (rate == 0)
            continue; /* rule 2 */
        uint32_t kb = cr_plan_kb(rate, cfg->qcap, cfg->n_shards);
        if ((double)(used + kb) > budget) {
            t->unadmitted_rate_total += rate;
            continue;
        }
        int64_t owner = take_inc ? rp->prev->placements[it->prev].owner : it->owner;
        t->placements[k] = (cr_placement){owner, used, kb, 0};
        rp->adm[k++] = *it;
        used += kb;
        t->admitted_rate_total += rate;
    }
    t->n_placements = k;
    return used;
}

/* The owner index, from the previous table's when the capacities match:
 * the new table holds mostly the same owners, so one pass over the slots
 * replaces a random access per session. */
static cr_status index_owners(cr_replan_state *rp)
{
    cr_table *t = rp->t;
    if (cr_plan_index_init(t) != CR_OK)
        return CR_ENOMEM;
    int remapped = rp->prev && cr_owner_index_remap(&t->index, &rp->prev->index, rp->newpos) == 0;
    for (size_t i = 0; i < t->n_placements; i++)
        if (!remapped || (rp->moving[i] & NEWCOMER))
            cr_owner_index_insert(&t->index, i);
    return CR_OK;
}

/* S3 to S7 over the sorted items (freed here); the table, or NULL. */
static cr_table *build(const cr_planner_config *cfg, const cr_replan_config *rc,
                       const cr_table *prev, const cr_replan_prev *from, cr_plan_item *sorted,
                       cr_plan_item *spare, size_t n_inc, size_t m)
{
    cr_replan_state rp = {.prev = prev, .adm = spare, .t = cr_plan_table_alloc(cfg->n_shards, m)};
    uint64_t used = rp.t ? admit(&rp, cfg, 1 + rc->admit_hysteresis, sorted, n_inc, m) : 0;
    free(sorted);
    if (!rp.t || used > SIZE_MAX / sizeof *rp.t->shards)
        goto fail;
    rp.t->shards = malloc((used ? used : 1) * sizeof *rp.t->shards);
    rp.moving = malloc(rp.t->n_placements ? rp.t->n_placements : 1);
    rp.newpos = calloc(prev && prev->n_placements ? prev->n_placements : 1, sizeof *rp.newpos);
    if (!rp.t->shards || !rp.moving || !rp.newpos)
        goto fail;
    double unadmitted = rp.t->unadmitted_rate_total, r = cfg->n_shards;
    double mean = (rp.t->admitted_rate_total + unadmitted) / r;
    rp.start = unadmitted > 0 ? unadmitted / r : 0.0;
    rp.bound = rc->max_imbalance * mean;
    rp.max_share = (rc->max_imbalance - 1) * mean;
    cr_replan_keep(&rp, 1);
    if (cr_replan_balance(&rp) != 0 || cr_replan_place(&rp, from) != 0)
        goto fail;
    free(spare); /* before the owner index: it bounds the peak */
    spare = NULL;
    cr_plan_rule7(rp.t);
    if (index_owners(&rp) != CR_OK)
        goto fail;
    free(rp.moving);
    free(rp.newpos);
    return rp.t;
fail:
    free(rp.moving);
    free(rp.newpos);
    free(spare);
    cr_table_free(rp.t);
    return NULL;
}

cr_status cr_planner_replan(const cr_planner_config *cfg, const cr_replan_config *replan,
                            const cr_replan_prev *from, const cr_session_rate *rates, size_t n,
                            cr_table **out, cr_error *err)
{
    const cr_table *prev = from ? from->table : NULL;
    if (prev && prev->n_shards != cfg->n_shards)
        prev = NULL; /* its placements are on other shards */
    *out = NULL;
    err->msg[0] = '\0';
    cr_status st = cr_planner_config_check(cfg, err);
    if (st != CR_OK || (st = cr_replan_config_check(replan, err)) != CR_OK)
        return st;
    if (replan->mode == CR_REPLAN_FRESH || (!prev && !(from && from->home)))
        return cr_planner_plan(cfg, rates, n, out, err); /* S1: what S2-S7 would give */
    size_t n_inc = 0;
    cr_plan_item *sorted = NULL, *spare = NULL;
    if ((st = cr_plan_check_rates(rates, n, err)) != CR_OK ||
        ((st = order_items(prev, rates, n, &n_inc, &sorted, &spare, err)) != CR_OK &&
         st != CR_ENOMEM))
        return st;
    cr_table *t = st == CR_OK ? build(cfg, replan, prev, from, sorted, spare, n_inc, n) : NULL;
    if (!t) {
        snprintf(err->msg, sizeof err->msg, "out of memory planning %zu sessions", n);
        return CR_ENOMEM;
    }
    *out = t;
    return CR_OK;
}
