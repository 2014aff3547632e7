/* A stable replan's placement: S4 (keep), S5 (the bound) and S6 (home,
 * then LPT). The rules are in replan.c. */
#include "replan.h"

#include <stdlib.h>
#include <string.h>

static double share_of(const cr_replan_state *rp, size_t i)
{
    return cr_plan_item_rate(&rp->adm[i]) / rp->t->placements[i].kb;
}

/* S4. */
void cr_replan_keep(cr_replan_state *rp, int copy)
{
    cr_table *t = rp->t;
    for (uint32_t s = 0; s < t->n_shards; s++)
        t->load[s] = rp->start;
    for (size_t i = 0; i < t->n_placements; i++) {
        const cr_placement *p = &t->placements[i];
        uint32_t *mine = t->shards + p->first;
        if (copy) {
            const cr_plan_item *it = &rp->adm[i];
            const cr_placement *q =
                cr_replan_incumbent(it) ? &rp->prev->placements[it->prev] : NULL;
            rp->moving[i] = !q ? TO_PLACE | NEWCOMER : q->kb != p->kb ? TO_PLACE : 0;
            if (q)
                rp->newpos[it->prev] = (uint32_t)(i + 1);
            if (q && !rp->moving[i])
                memcpy(mine, rp->prev->shards + q->first, p->kb * sizeof *mine);
        }
        if (rp->moving[i])
            continue;
        double share = share_of(rp, i);
        for (uint32_t j = 0; j < p->kb; j++)
            t->load[mine[j]] += share;
    }
}

typedef struct ranked {
    double share;
    size_t i;
} ranked;

static int cmp_ranked(const void *a, const void *b)
{
    const ranked *x = a, *y = b;
    if (x->share != y->share)
        return x->share > y->share ? -1 : 1;
    return (x->i > y->i) - (x->i < y->i);
}

/* S5 for shard s, whose kept sessions are list[0..n): gives up the largest
 * movable first while s is over the bound, if giving up every movable one
 * would bring it within. Returns how many it gave up. */
static size_t relieve(cr_replan_state *rp, uint32_t s, const uint32_t *list, size_t n, ranked *buf)
{
    cr_table *t = rp->t;
    size_t k = 0, given = 0;
    double rest = t->load[s];
    for (size_t x = 0; x < n; x++) {
        double share = rp->moving[list[x]] ? 0 : share_of(rp, list[x]);
        if (share > 0 && share <= rp->max_share) {
            buf[k++] = (ranked){share, list[x]};
            rest -= share;
        }
    }
    if (rest > rp->bound)
        return 0; /* moving them all would not do: move none */
    qsort(buf, k, sizeof *buf, cmp_ranked);
    for (size_t x = 0; x < k && t->load[s] > rp->bound; x++) {
        const cr_placement *p = &t->placements[buf[x].i];
        rp->moving[buf[x].i] = TO_PLACE;
        for (uint32_t j = 0; j < p->kb; j++)
            t->load[t->shards[p->first + j]] -= buf[x].share;
        given++;
    }
    return given;
}

/* S5's per-shard lists of kept sessions (CSR: shard s's are
 * list[off[s]..off[s+1])). Returns -1 when out of memory. */
static int kept_lists(const cr_replan_state *rp, size_t *off, uint32_t **list)
{
    const cr_table *t = rp->t;
    memset(off, 0, (t->n_shards + 1) * sizeof *off);
    for (size_t i = 0; i < t->n_placements; i++)
        for (uint32_t j = 0; !rp->moving[i] && j < t->placements[i].kb; j++)
            off[t->shards[t->placements[i].first + j] + 1]++;
    for (uint32_t s = 0; s < t->n_shards; s++)
        off[s + 1] += off[s];
    *list = malloc((off[t->n_shards] ? off[t->n_shards] : 1) * sizeof **list);
    size_t *fill = malloc(t->n_shards * sizeof *fill);
    if (!*list || !fill) {
        free(*list);
        free(fill);
        return -1;
    }
    memcpy(fill, off, t->n_shards * sizeof *fill);
    for (size_t i = 0; i < t->n_placements; i++)
        for (uint32_t j = 0; !rp->moving[i] && j < t->placements[i].kb; j++)
            (*list)[fill[t->shards[t->placements[i].first + j]]++] = (uint32_t)i;
    free(fill);
    return 0;
}

/* S5. */
int cr_replan_balance(cr_replan_state *rp)
{
    cr_table *t = rp->t;
    uint32_t over = 0;
    for (uint32_t s = 0; s < t->n_shards; s++)
        over += t->load[s] > rp->bound;
    if (!over)
        return 0;
    size_t *off = malloc((t->n_shards + 1) * sizeof *off), given = 0, widest = 0;
    uint32_t *list = NULL;
    if (!off || kept_lists(rp, off, &list) != 0) {
        free(off);
        return -1;
    }
    for (uint32_t s = 0; s < t->n_shards; s++)
        widest = off[s + 1] - off[s] > widest ? off[s + 1] - off[s] : widest;
    ranked *buf = malloc((widest ? widest : 1) * sizeof *buf);
    for (uint32_t s = 0; buf && s < t->n_shards; s++)
        if (t->load[s] > rp->bound)
            given += relieve(rp, s, list + off[s], off[s + 1] - off[s], buf);
    int ok = buf != NULL;
    free(buf);
    free(list);
    free(off);
    if (given)
        cr_replan_keep(rp, 0);
    return ok ? 0 : -1;
}

/* S6's first half: newcomers with kb 1 to their home shards. */
static void place_home(cr_replan_state *rp, const cr_replan_prev *from)
{
    cr_table *t = rp->t;
    for (size_t i = 0; from->home && i < t->n_placements; i++) {
        const cr_placement *p = &t->placements[i];
        if (rp->moving[i] != (TO_PLACE | NEWCOMER) || p->kb != 1)
            continue;
        uint32_t home = from->home(from->ctx, p->owner, t->n_shards);
        double share = share_of(rp, i);
        if (home < t->n_shards && t->load[home] + share <= rp->bound) {
            t->shards[p->first] = home;
            t->load[home] += share;
            rp->moving[i] = NEWCOMER;
        }
    }
}

/* S6. */
int cr_replan_place(cr_replan_state *rp, const cr_replan_prev *from)
{
    cr_table *t = rp->t;
    uint32_t *ids = malloc(t->n_shards * sizeof *ids);
    if (!ids)
        return -1;
    place_home(rp, from);
    cr_shard_heap h = {ids, 0, t->load};
    for (uint32_t s = 0; s < t->n_shards; s++)
        cr_shard_heap_push(&h, s);
    for (size_t i = 0; i < t->n_placements; i++) {
        const cr_placement *p = &t->placements[i];
        if (rp->moving[i] & TO_PLACE)
            cr_plan_lpt(&h, t->load, t->shards + p->first, p->kb, share_of(rp, i));
    }
    free(ids);
    return 0;
}
