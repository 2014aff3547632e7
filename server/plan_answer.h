/* A plan's PlanResponse, encoded straight from its cr_table: the same bytes
 * protobuf-c packs (field order, proto3's omitted zeros), without a
 * Placement message per admitted session. protobuf-c would need 56 bytes
 * of message and a pointer per placement, and walks a nested repeated field
 * three times (sizing the whole, then each entry again as it packs it);
 * here one pass over the placements writes them, sizing each as it goes,
 * with no branch on an owner's width (a hash: 9 or 10 bytes at random).
 *
 * The buffer is sized from a sample of the placements (a quarter over,
 * plus 4 KiB), at most the caller's max_first bytes at first (the message
 * limit: the core refuses a plan whose answer could pass it before it is
 * placed), and grown by half whenever short; the answer finished holds at
 * most twice its size and 4 KiB. */
#ifndef CR_PLAN_ANSWER_H
#define CR_PLAN_ANSWER_H

#include <stddef.h>
#include <stdint.h>

#include "cacheroute/v1/cacheroute.pb-c.h"
#include "planner.h"

typedef struct cr_plan_answer {
    const cr_table *table;
    uint8_t *buf;      /* malloc'd: the answer as written so far, or NULL */
    size_t cap;        /* bytes of buf */
    size_t head;       /* where the placements start: room left for the table's key and length */
    size_t placements; /* bytes of the placements field, every entry framed */
    /* The rest, for the caller to fill in (generation, churn) before sizing
     * and before finishing: the table's other fields are set here. */
    Cacheroute__V1__RoutingTable rest; /* every field but placements */
    Cacheroute__V1__PlanChurn churn;
} cr_plan_answer;

/* Points a at t (which must outlive it), writes t's placements into a new
 * buffer and fills rest from t; churn and generation are 0. The buffer's
 * first size is estimated from a sample of the placements, at most
 * max_first bytes past the table's key and length (a test passes a small
 * one to make it grow). O(placements). Returns 0, or -1 out of memory (a
 * then holds nothing). */
int cr_plan_answer_init(cr_plan_answer *a, const cr_table *t, size_t max_first);

/* The PlanResponse's packed size with a's rest and churn as they are now. */
size_t cr_plan_answer_size(const cr_plan_answer *a);

/* The whole PlanResponse, with a's rest and churn as they are now, in a
 * malloc'd buffer for the caller to free, *len bytes; NULL when out of
 * memory. Either way a holds nothing after (as cr_plan_answer_free). */
uint8_t *cr_plan_answer_finish(cr_plan_answer *a, size_t *len);

/* Frees what a holds (an unfinished answer); a may be freed again. */
void cr_plan_answer_free(cr_plan_answer *a);

#endif
