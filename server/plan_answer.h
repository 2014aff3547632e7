/* A plan's PlanResponse, encoded straight from its cr_table: the same bytes
 * protobuf-c packs (field order, proto3's omitted zeros), without a
 * Placement message per admitted session. protobuf-c would need 56 bytes
 * of message and a pointer per placement, and walks a nested repeated field
 * three times (sizing the whole, then each entry again as it packs it);
 * here one pass over the placements sizes them and one more writes them,
 * neither with a branch on an owner's width (a hash: 9 or 10 bytes at
 * random). */
#ifndef CR_PLAN_ANSWER_H
#define CR_PLAN_ANSWER_H

#include <stddef.h>
#include <stdint.h>

#include "cacheroute/v1/cacheroute.pb-c.h"
#include "planner.h"

/* Bytes a buffer holds past the answer for cr_plan_answer_pack, which
 * stores an owner's 10 possible bytes at once and moves on by its width. */
#define CR_PLAN_ANSWER_SLACK 16

typedef struct cr_plan_answer {
    const cr_table *table;
    size_t placements; /* bytes of the placements field, every entry framed */
    /* The rest, for the caller to fill in (generation, churn) before sizing
     * and again before packing: the table's other fields are set here. */
    Cacheroute__V1__RoutingTable rest; /* every field but placements */
    Cacheroute__V1__PlanChurn churn;
} cr_plan_answer;

/* Points a at t (which must outlive it), sizes every placement and fills
 * rest from t; churn and generation are 0. O(placements), no allocation. */
void cr_plan_answer_init(cr_plan_answer *a, const cr_table *t);

/* The PlanResponse's packed size with a's rest and churn as they are now. */
size_t cr_plan_answer_size(const cr_plan_answer *a);

/* Writes the PlanResponse into buf, which holds at least
 * cr_plan_answer_size(a) + CR_PLAN_ANSWER_SLACK bytes, or that of one
 * whose rest and churn numbers were each at least as large; returns the
 * bytes written (the answer's; the slack past them holds garbage). */
size_t cr_plan_answer_pack(const cr_plan_answer *a, uint8_t *buf);

#endif
