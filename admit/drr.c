/* The held requests: strict priority between flows of different
 * priorities, deficit round robin (Shreedhar and Varghese) between the
 * fairness ids of one. The round robin is computed, not stepped: for each
 * flow of the top priority, the turns until its credit covers its head's
 * cost follow from its deficit and the quantum, so a peek changes nothing
 * and the door can ask whether the chosen request may go before it goes
 * (a turn that serves nothing is a turn DRR would have given all the
 * same). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

int drr_init(drr *d, uint32_t cap, double quantum)
{
    memset(d, 0, sizeof *d);
    d->cap = cap ? cap : 1;
    d->quantum = quantum;
    d->nodes = calloc(d->cap, sizeof *d->nodes);
    d->flows = calloc(d->cap, sizeof *d->flows);
    d->ring = calloc(d->cap, sizeof *d->ring);
    if (!d->nodes || !d->flows || !d->ring) {
        drr_free(d);
        return -1;
    }
    for (uint32_t i = 0; i < d->cap; i++)
        d->nodes[i].next = i + 1 < d->cap ? i + 1 : DRR_NONE;
    d->free_head = 0;
    return 0;
}

void drr_free(drr *d)
{
    free(d->nodes);
    free(d->flows);
    free(d->ring);
    memset(d, 0, sizeof *d);
}

static uint32_t flow_of(const drr *d, int32_t priority, uint32_t slot)
{
    for (uint32_t f = 0; f < d->n_flows; f++)
        if (d->flows[f].priority == priority && d->flows[f].slot == slot)
            return f;
    return DRR_NONE;
}

int drr_push(drr *d, const cr_admit_item *it)
{
    if (d->free_head == DRR_NONE)
        return -1;
    uint32_t f = flow_of(d, it->priority, it->id);
    if (f == DRR_NONE) { /* a flow per held node at most: never past cap */
        f = d->n_flows++;
        d->flows[f] = (drr_flow){.priority = it->priority, .slot = it->id, .head = DRR_NONE,
                                 .tail = DRR_NONE};
    }
    uint32_t k = d->free_head;
    d->free_head = d->nodes[k].next;
    d->nodes[k] = (drr_node){.it = *it, .next = DRR_NONE};
    drr_flow *fl = &d->flows[f];
    if (fl->tail == DRR_NONE)
        fl->head = k;
    else
        d->nodes[fl->tail].next = k;
    fl->tail = k;
    fl->n++;
    d->held++;
    return 0;
}

int drr_top(const drr *d, int32_t *priority)
{
    for (uint32_t f = 0; f < d->n_flows; f++)
        if (f == 0 || d->flows[f].priority > *priority)
            *priority = d->flows[f].priority;
    return d->n_flows > 0;
}

/* The top priority's flows into d->ring, in order; their count, and where
 * the round robin stands among them: *start the ring position whose visit
 * comes first. */
static uint32_t ring_of(const drr *d, uint32_t *ring, uint32_t *start, int *cur_in_turn)
{
    int32_t top = 0;
    drr_top(d, &top);
    uint32_t m = 0, cur = DRR_NONE;
    for (uint32_t f = 0; f < d->n_flows; f++) {
        if (d->flows[f].priority != top)
            continue;
        if (d->has_cur && d->cur_priority == top && d->cur_slot == d->flows[f].slot)
            cur = m;
        ring[m++] = f;
    }
    *cur_in_turn = cur != DRR_NONE && d->in_turn;
    *start = cur == DRR_NONE ? 0 : d->in_turn ? (cur + 1) % m : cur;
    return m;
}

/* The visit (1-based, counted from start) at which the flow at ring
 * position p (1..m) can first pay its head. */
static double visit_for(const drr *d, const drr_flow *fl, uint32_t p, uint32_t m)
{
    double need = d->nodes[fl->head].it.cost - fl->deficit;
    double k = need <= 0 ? 1 : ceil(need / d->quantum);
    return p + (k < 1 ? 0 : k - 1) * m;
}

int drr_peek(const drr *d, uint32_t *flow, double *turns)
{
    if (!d->n_flows)
        return 0;
    uint32_t start;
    int in_turn;
    uint32_t m = ring_of(d, d->ring, &start, &in_turn); /* ring: scratch, not state */
    if (in_turn) {
        const drr_flow *cur = &d->flows[d->ring[(start + m - 1) % m]];
        if (d->nodes[cur->head].it.cost <= cur->deficit) {
            *flow = (uint32_t)(cur - d->flows);
            *turns = 0;
            return 1;
        }
    }
    double best = INFINITY;
    for (uint32_t j = 0; j < m; j++) {
        uint32_t f = d->ring[(start + j) % m];
        double t = visit_for(d, &d->flows[f], j + 1, m);
        if (t < best) {
            best = t;
            *flow = f;
        }
    }
    *turns = best;
    return 1;
}

/* Flow f leaves (empty): the next of its priority, in order, has the turn
 * next. */
static void flow_remove(drr *d, uint32_t f)
{
    int32_t prio = d->flows[f].priority;
    int was_cur = d->has_cur && d->cur_priority == prio && d->cur_slot == d->flows[f].slot;
    memmove(&d->flows[f], &d->flows[f + 1], (d->n_flows - f - 1) * sizeof *d->flows);
    d->n_flows--;
    if (!was_cur)
        return;
    d->has_cur = 0;
    for (uint32_t k = 0; k < d->n_flows; k++) { /* after f in order, else the first */
        uint32_t g = (f + k) % d->n_flows;
        if (d->flows[g].priority == prio) {
            d->has_cur = 1;
            d->in_turn = 0;
            d->cur_slot = d->flows[g].slot;
            d->cur_priority = prio;
            return;
        }
    }
}

/* The node k leaves flow f, whose node before it is prev (DRR_NONE: the
 * head); 1 when the flow left with it. */
static int unlink_node(drr *d, uint32_t f, uint32_t prev, uint32_t k)
{
    drr_flow *fl = &d->flows[f];
    uint32_t next = d->nodes[k].next;
    if (prev == DRR_NONE)
        fl->head = next;
    else
        d->nodes[prev].next = next;
    if (fl->tail == k)
        fl->tail = prev;
    fl->n--;
    d->held--;
    d->nodes[k].next = d->free_head;
    d->free_head = k;
    if (fl->n)
        return 0;
    flow_remove(d, f);
    return 1;
}

void drr_take(drr *d, uint32_t flow, double turns, cr_admit_item *out)
{
    uint32_t start, m;
    int in_turn;
    m = ring_of(d, d->ring, &start, &in_turn);
    for (uint32_t j = 0; turns > 0 && j < m; j++) { /* the credits of the visits passed */
        uint32_t p = j + 1;
        if (p <= turns)
            d->flows[d->ring[(start + j) % m]].deficit +=
                    (floor((turns - p) / m) + 1) * d->quantum;
    }
    drr_flow *fl = &d->flows[flow];
    uint32_t k = fl->head;
    *out = d->nodes[k].it;
    fl->deficit -= out->cost;
    d->has_cur = 1;
    d->in_turn = 1;
    d->cur_priority = fl->priority;
    d->cur_slot = fl->slot;
    unlink_node(d, flow, DRR_NONE, k); /* an emptied flow's credit goes with it */
}

size_t drr_take_if(drr *d, int (*match)(const void *ctx, const cr_admit_item *it),
                   const void *ctx, cr_admit_item *out, size_t max)
{
    size_t n = 0;
    for (uint32_t f = 0; f < d->n_flows && n < max;) {
        int gone = 0;
        for (uint32_t prev = DRR_NONE, k = d->flows[f].head; k != DRR_NONE && n < max;) {
            uint32_t next = d->nodes[k].next;
            if (match(ctx, &d->nodes[k].it)) {
                out[n++] = d->nodes[k].it;
                if ((gone = unlink_node(d, f, prev, k)))
                    break;
            } else {
                prev = k;
            }
            k = next;
        }
        f += !gone;
    }
    return n;
}
