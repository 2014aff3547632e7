/* The consistent-hash ring: CR_RING_VNODES virtual nodes per shard at
 * cr_mix64 positions, sorted once. An owner's walk starts at the first
 * point at or after cr_mix64(owner) and goes round clockwise; adding or
 * removing a shard moves only the owners whose walk meets its points
 * first. The router's bounded and live routes walk it (route.h), and the
 * replay tool's sticky and chwbl baselines use the same ring, so a cold
 * owner's first shard is the same under all three.
 *
 * Memory: 16 bytes per point and 4 to 8 bytes of start index, at most
 * CR_RING_VNODES * 24 = 1.5 KB per shard (96 MB at 65,536 shards).
 * Immutable once built: any number of threads may read one ring. */
#ifndef CR_RING_H
#define CR_RING_H

#include <stddef.h>
#include <stdint.h>

#define CR_RING_VNODES 64

typedef struct cr_ring cr_ring;

/* The ring of shards 0..n_shards-1 (n_shards >= 1); NULL when out of
 * memory. O(n log n) in the n_shards * CR_RING_VNODES points. */
cr_ring *cr_ring_new(uint32_t n_shards);
void cr_ring_free(cr_ring *r); /* NULL is ignored */

uint32_t cr_ring_n_shards(const cr_ring *r);
size_t cr_ring_n_points(const cr_ring *r);
size_t cr_ring_bytes(const cr_ring *r); /* its allocation; 0 for NULL */

/* Where owner's walk starts: the index of the first point at or after
 * cr_mix64(owner), wrapping to 0 past the last. O(1) expected. */
size_t cr_ring_start(const cr_ring *r, int64_t owner);

/* The shard of point i, taken modulo the points (so a walk reads start,
 * start + 1, ... without wrapping itself). */
uint32_t cr_ring_shard(const cr_ring *r, size_t i);

#endif
