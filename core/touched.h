/* Internal to the core: the owners recorded since the last take, for a
 * replica's push (core.h, "replicas"). A bounded set in lock-striped open
 * addressing tables; past its bound it only remembers that it overflowed,
 * and the taker pushes every owner instead. */
#ifndef CR_CORE_TOUCHED_H
#define CR_CORE_TOUCHED_H

#include <stddef.h>
#include <stdint.h>

typedef struct cr_touched cr_touched;

/* A set of at most max_owners (>= 1) owners; NULL when out of memory. */
cr_touched *cr_touched_new(size_t max_owners);
void cr_touched_free(cr_touched *t);

/* Adds the n owners (repeats are kept once). Thread-safe; one stripe lock
 * per owner, O(1) expected each. */
void cr_touched_add(cr_touched *t, const int64_t *owners, size_t n);

/* Empties the set into a malloc'd array of *n owners (the caller frees it;
 * NULL with *n 0 when empty or out of memory, which also counts as an
 * overflow); *overflowed = 1 when owners were lost since the last take.
 * Thread-safe; adds racing with it land in this take or the next. */
int64_t *cr_touched_take(cr_touched *t, size_t *n, int *overflowed);

#endif
