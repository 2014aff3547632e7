/* admit's private parts: the held requests as flows, one per (priority,
 * fairness id), served by strict priority and deficit round robin
 * (drr.c); the door around them (door.c) keeps the lock and the counts. */
#ifndef CR_ADMIT_INTERNAL_H
#define CR_ADMIT_INTERNAL_H

#include "admit.h"

#define DRR_NONE UINT32_MAX

/* One held request, linked in its flow's FIFO or in the free list. */
typedef struct drr_node {
    cr_admit_item it;
    uint32_t next;
} drr_node;

/* A flow: the held requests of one priority and fairness id slot, oldest
 * first, and its credit. Exists only while it holds some. */
typedef struct drr_flow {
    int32_t priority;
    uint32_t slot;
    uint32_t head, tail, n;
    double deficit;
} drr_flow;

/* The held requests: at most cap of them in cap nodes (allocated once),
 * the flows in the order they became active (each priority's ring is its
 * flows in that order). cur is the flow whose turn it is: in_turn 1 when
 * its credit for this turn was given, 0 when its turn starts next. */
typedef struct drr {
    drr_node *nodes;
    uint32_t cap, free_head, held;
    drr_flow *flows;
    uint32_t n_flows;
    uint32_t *ring; /* scratch: one priority's flows */
    double quantum;
    int has_cur, in_turn;
    int32_t cur_priority;
    uint32_t cur_slot;
} drr;

/* cap held at most (>= 1); -1 when out of memory. */
int drr_init(drr *d, uint32_t cap, double quantum);
void drr_free(drr *d);

/* Appends it to its flow (it->priority, it->id); -1 when full. */
int drr_push(drr *d, const cr_admit_item *it);

/* The request the round robin serves next, without serving it: its flow's
 * index into *flow and the turns the choice takes into *turns; 0 when
 * none is held. */
int drr_peek(const drr *d, uint32_t *flow, double *turns);

/* Serves flow's head as drr_peek chose it (credits given, cost taken),
 * into *out. */
void drr_take(drr *d, uint32_t flow, double turns, cr_admit_item *out);

/* Takes out up to max held requests that match(ctx, item) says 1 of
 * into out[] (flow by flow, each oldest first); how many. */
size_t drr_take_if(drr *d, int (*match)(const void *ctx, const cr_admit_item *it),
                   const void *ctx, cr_admit_item *out, size_t max);

/* The highest priority held; 0 with none held. */
int drr_top(const drr *d, int32_t *priority);

#endif
