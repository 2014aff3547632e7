/* Internal to the planner: a stable replan's state, shared by replan.c
 * (S1-S3, S7) and replan_place.c (S4-S6). Rules: replan.c. */
#ifndef CR_PLANNER_REPLAN_H
#define CR_PLANNER_REPLAN_H

#include "internal.h"

#define CR_REPLAN_TOP_BIT (UINT64_C(1) << 63)

/* One replan's state. adm[i] is placement i's item: an incumbent's key has
 * the top bit clear and .prev set; anyone else's has it set and .owner. */
typedef struct cr_replan_state {
    const cr_table *prev;
    cr_table *t;
    cr_plan_item *adm;
    uint8_t *moving;  /* per placement: TO_PLACE and NEWCOMER bits */
    uint32_t *newpos; /* per previous placement: its new position + 1, or 0 */
    double start;     /* rule 5's spread */
    double bound;     /* S5's B */
    double max_share; /* (c - 1) * mean */
} cr_replan_state;

/* moving[i]: 0 = kept (S4); TO_PLACE = S6 places it; NEWCOMER = not an
 * incumbent (so the owner index gets it by insertion). */
enum { TO_PLACE = 1, NEWCOMER = 2 };

static inline int cr_replan_incumbent(const cr_plan_item *it)
{
    return !(it->key & CR_REPLAN_TOP_BIT);
}

/* S4 over the placements not moving; with copy, also their shards from the
 * previous table, the moving flags and newpos, else only the loads. */
void cr_replan_keep(cr_replan_state *rp, int copy);
/* S5; -1 when out of memory. */
int cr_replan_balance(cr_replan_state *rp);
/* S6; -1 when out of memory. */
int cr_replan_place(cr_replan_state *rp, const cr_replan_prev *from);

#endif
