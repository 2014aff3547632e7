/* Private to the core: the owners recorded since the last take, for a
 * replica's push (core.h, "replicas": cr_core_track_touched,
 * cr_core_touched_take). On the hot path an add only appends the owners to
 * its thread's stripe (one short lock per call, sequential writes, no
 * hashing: a set with an index cost a cache miss per owner and halved
 * cr_core_record's throughput); repeats are dropped at the take, on the
 * replica's thread. Bounded: at most max_entries owners (repeats counted)
 * between two takes, 8 B each; past that it only remembers that it
 * overflowed, and the taker pushes every owner instead. */
#ifndef CR_CORE_TOUCHED_H
#define CR_CORE_TOUCHED_H

#include <stddef.h>
#include <stdint.h>

typedef struct cr_touched cr_touched;

/* Room for max_entries (>= 1) owners, allocated here; NULL when out of
 * memory. */
cr_touched *cr_touched_new(size_t max_entries);
void cr_touched_free(cr_touched *t);

/* Appends the n owners. Thread-safe; one lock of the calling thread's
 * stripe, O(n). */
void cr_touched_add(cr_touched *t, const int64_t *owners, size_t n);

/* Empties the set into a malloc'd array of *n distinct owners, ascending
 * (the caller frees it; NULL with *n 0 when empty); *overflowed = 1 when
 * owners were lost since the last take (or memory ran out now). Thread-safe;
 * adds racing with it land in this take or the next. */
int64_t *cr_touched_take(cr_touched *t, size_t *n, int *overflowed);

#endif
