/* A bump allocator for one call: what its request decodes into (protobuf-c
 * takes it as a ProtobufCAllocator) and the handler's scratch, all given
 * back in one go when the call ends, so a request of a million sub-messages
 * costs a few chunk allocations instead of a million mallocs and frees.
 *
 * Bounded: an arena holds under twice what was asked of it, plus at most
 * CR_ARENA_KEEP_LAZY when it reuses the spare below; the requests that
 * decode into it are bounded by their size already (reply.h,
 * cr_decode_limit). Between calls a thread keeps one chunk of at most
 * CR_ARENA_KEEP bytes, so the next small call mallocs nothing; and the
 * process keeps one spare huge-page chunk of at most CR_ARENA_KEEP_LAZY
 * bytes, the last big call's (Linux, MADV_FREE), whose pages past the
 * first 2 MiB the kernel may reclaim whenever it needs memory: until it
 * does, the next big call on any thread (a 1M-session Plan decodes ~64 MB)
 * reuses them without faulting in and zeroing fresh pages. Those pages
 * count in the process's RSS until reclaimed. Everything else a call took
 * goes back when it ends. */
#ifndef CR_ARENA_H
#define CR_ARENA_H

#include <protobuf-c/protobuf-c.h>
#include <stddef.h>

#define CR_ARENA_KEEP (256u << 10)            /* bytes a thread keeps between calls */
#define CR_ARENA_KEEP_LAZY ((size_t)256 << 20) /* the process's spare, reclaimable */

typedef struct cr_arena_chunk cr_arena_chunk;

typedef struct cr_arena {
    ProtobufCAllocator pc; /* alloc: cr_arena_alloc; free: nothing (reset frees) */
    cr_arena_chunk *head;  /* the chunk bumped now, then the ones before it */
    size_t used;           /* bytes of head handed out */
    int busy;              /* a thread's own, in use (cr_arena_take) */
    int refused;           /* an allocation failed for the budget since the reset */
} cr_arena;

/* The decode memory of all calls in flight together: every arena's chunks
 * and the spare count against bytes (--max-decode-bytes; 0 = no bound),
 * and an allocation that would pass it fails (the arena's refused set),
 * after the spare, which goes first. Thread-safe. */
void cr_arena_set_budget(size_t bytes);
size_t cr_arena_budget(void);
/* Bytes every arena and the spare hold now. Thread-safe. */
size_t cr_arena_held_all(void);

/* An empty arena; allocates nothing until asked. */
void cr_arena_init(cr_arena *a);

/* n bytes aligned for any type, valid until cr_arena_reset; NULL when out of
 * memory (a, and what it handed out, stay valid). Not thread-safe: one
 * arena serves one thread at a time. */
void *cr_arena_alloc(cr_arena *a, size_t n);

/* Everything a handed out is gone; a keeps its largest chunk of at most
 * CR_ARENA_KEEP bytes for the next call, its largest huge one (up to
 * CR_ARENA_KEEP_LAZY) becomes the process's spare, the others are freed.
 * Thread-safe as to the spare. */
void cr_arena_reset(cr_arena *a);

/* Bytes a holds in its chunks now (what it handed out and the unused rest
 * of its chunks). */
size_t cr_arena_held(const cr_arena *a);

/* 1 when p points into memory a handed out since its last reset (what a
 * test checks a decoded message against), else 0. O(chunks). */
int cr_arena_owns(const cr_arena *a, const void *p);

/* Frees all of a (it may be initialised again). */
void cr_arena_destroy(cr_arena *a);

/* The calling thread's arena, reset, for one call: freed when the thread
 * exits. NULL when the thread's arena is taken already (a handler that
 * decodes inside another's call): use an arena of your own then. Give it
 * back with cr_arena_put, which resets it. */
cr_arena *cr_arena_take(void);
void cr_arena_put(cr_arena *a);

#endif
