/* The open-addressing index (htable.h): resizing, insertion and
 * backward-shift deletion, the parts that move entries. */
#include "htable.h"

#include <stdlib.h>
#include <string.h>

/* n_slots empty slots, or NULL when out of memory or out of range. */
static uint32_t *new_slots(uint64_t n_slots)
{
    if (n_slots < 2 || (n_slots & (n_slots - 1)))
        return NULL;
    return calloc(n_slots, sizeof(uint32_t));
}

int cr_htable_resize(cr_htable *t, uint64_t n_slots, cr_htable_keys keys)
{
    uint32_t *slots = n_slots > t->used ? new_slots(n_slots) : NULL;
    if (!slots)
        return -1;
    cr_htable old = *t;
    *t = (cr_htable){slots, n_slots - 1, 0};
    for (uint64_t i = 0; old.slots && i <= old.mask; i++)
        if (old.slots[i])
            cr_htable_insert(t, keys.hash(keys.ctx, old.slots[i] - 1), old.slots[i] - 1);
    free(old.slots);
    return 0;
}

int cr_htable_reset(cr_htable *t, uint64_t n_slots)
{
    uint32_t *slots = new_slots(n_slots);
    if (!slots)
        return -1;
    free(t->slots);
    *t = (cr_htable){slots, n_slots - 1, 0};
    return 0;
}

void cr_htable_free(cr_htable *t)
{
    free(t->slots);
    *t = CR_HTABLE_EMPTY;
}

void cr_htable_clear(cr_htable *t)
{
    if (t->slots)
        memset(t->slots, 0, (t->mask + 1) * sizeof *t->slots);
    t->used = 0;
}

void cr_htable_insert(cr_htable *t, uint64_t hash, uint32_t e)
{
    uint64_t i = hash & t->mask;
    while (t->slots[i])
        i = (i + 1) & t->mask;
    cr_htable_put(t, i, e);
}

void cr_htable_remove(cr_htable *t, uint64_t hash, uint32_t e, cr_htable_keys keys)
{
    uint64_t i = hash & t->mask;
    while (t->slots[i] != e + 1)
        i = (i + 1) & t->mask;
    cr_htable_delete(t, i, keys);
}

void cr_htable_delete(cr_htable *t, uint64_t i, cr_htable_keys keys)
{
    for (uint64_t j = (i + 1) & t->mask; t->slots[j]; j = (j + 1) & t->mask) {
        uint64_t home = keys.hash(keys.ctx, t->slots[j] - 1) & t->mask;
        /* j's entry may fill the gap at i unless its home lies in (i, j]:
         * its distance from home is at least the gap's, counted round the
         * end of the array, the one wrap-around test */
        if (((j - home) & t->mask) >= ((j - i) & t->mask)) {
            t->slots[i] = t->slots[j];
            i = j;
        }
    }
    t->slots[i] = 0;
    t->used--;
}
