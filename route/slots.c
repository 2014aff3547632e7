/* Deletion from a linear-probing table by backward shift (internal.h). */
#include "internal.h"

void cr_slots_drop(uint32_t *slots, uint64_t mask, uint64_t i,
                   uint64_t (*home)(const void *ctx, uint32_t v), const void *ctx)
{
    for (uint64_t j = (i + 1) & mask; slots[j]; j = (j + 1) & mask) {
        uint64_t h = home(ctx, slots[j]);
        /* slot j's entry may move to i when its home is not in (i, j], cyclically */
        if ((j > i && (h <= i || h > j)) || (j < i && h <= i && h > j)) {
            slots[i] = slots[j];
            i = j;
        }
    }
    slots[i] = 0;
}
