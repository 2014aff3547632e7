#include "arena.h"

#include <pthread.h>
#include <stdalign.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>

#define ALIGN alignof(max_align_t)
#define FIRST_CHUNK (16u << 10) /* bytes of an arena's first chunk */
#define HUGE_PAGE ((size_t)2 << 20)

struct cr_arena_chunk {
    cr_arena_chunk *next; /* the chunk allocated before this one */
    size_t size;          /* bytes of data */
    size_t mapped;        /* bytes mmap'd for it (huge_chunk), or 0: malloc'd */
    size_t charged;       /* bytes counted against the budget for it */
    alignas(max_align_t) unsigned char data[];
};

/* A chunk of a huge page or more is mapped on its own, aligned, and marked
 * for transparent huge pages: a 1M-session Plan touches ~150 MB of fresh
 * scratch per call, and 4 KiB faults on it cost more than the planner's
 * own work (measured by `bench/plan_wire.py PLANNER_BENCH SIDECAR`; bench/HISTORY.md). */
static cr_arena_chunk *huge_chunk(size_t size)
{
    if (size > SIZE_MAX - sizeof(cr_arena_chunk) - 2 * HUGE_PAGE)
        return NULL; /* len below, and len + HUGE_PAGE, would wrap */
    size_t len = (sizeof(cr_arena_chunk) + size + HUGE_PAGE - 1) & ~(HUGE_PAGE - 1);
    unsigned char *p = mmap(NULL, len + HUGE_PAGE, PROT_READ | PROT_WRITE,
                            MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return NULL;
    size_t lead = (HUGE_PAGE - (uintptr_t)p % HUGE_PAGE) % HUGE_PAGE;
    if (lead)
        munmap(p, lead);
    munmap(p + lead + len, HUGE_PAGE - lead);
    cr_arena_chunk *c = (cr_arena_chunk *)(void *)(p + lead);
#ifdef MADV_HUGEPAGE
    madvise(c, len, MADV_HUGEPAGE); /* advice only: 4 KiB pages if refused */
#endif
    c->mapped = len;
    c->size = len - sizeof *c;
    return c;
}

/* The process's one spare huge chunk (or NULL): the last big call's,
 * lazily freed (park), for the next big call on any thread (unpark). One
 * for the whole process, so what it holds does not grow with the threads. */
static _Atomic(cr_arena_chunk *) spare;

static void free_chunk(cr_arena_chunk *c);

/* Every arena's chunks and the spare, against one budget: the decode
 * memory of all calls in flight together (cr_arena_set_budget). */
static atomic_size_t held_all;
static atomic_size_t budget = SIZE_MAX;

void cr_arena_set_budget(size_t bytes) { atomic_store(&budget, bytes ? bytes : SIZE_MAX); }
size_t cr_arena_budget(void) { return atomic_load(&budget); }
size_t cr_arena_held_all(void) { return atomic_load(&held_all); }

/* Counts n more bytes: 0, or -1 (nothing counted) past the budget even
 * without the spare, which goes first: calls in flight come before it.
 * Compare-and-swap, never add-then-undo: held_all is never over the
 * budget, not even for a moment another thread could read. */
static int charge(size_t n)
{
    int spare_gone = 0;
    size_t was = atomic_load(&held_all);
    for (;;) {
        if (was <= SIZE_MAX - n && was + n <= atomic_load(&budget)) {
            if (atomic_compare_exchange_weak(&held_all, &was, was + n))
                return 0;
            continue; /* was reloaded by the failed exchange */
        }
        if (spare_gone)
            return -1;
        free_chunk(atomic_exchange(&spare, NULL));
        spare_gone = 1;
        was = atomic_load(&held_all);
    }
}

static void park(cr_arena_chunk *c)
{
#ifdef MADV_FREE
    /* Its pages past the first huge page (which holds its header) are the
     * kernel's to reclaim whenever it needs memory; until it does, the next
     * big call reuses them without a fault or zeroing. */
    madvise((unsigned char *)c + HUGE_PAGE, c->mapped - HUGE_PAGE, MADV_FREE);
    free_chunk(atomic_exchange(&spare, c));
#else
    free_chunk(c);
#endif
}

static cr_arena_chunk *unpark(size_t size)
{
    cr_arena_chunk *c = atomic_exchange(&spare, NULL);
    if (c && c->size >= size)
        return c;
    if (c)
        park(c); /* too small for this call: left for the next */
    return NULL;
}

/* A chunk of at least size bytes, counted against the budget (the spare
 * is counted already); NULL past the budget (*refused set) or when out of
 * memory. */
static cr_arena_chunk *new_chunk(size_t size, int *refused)
{
    if (size > SIZE_MAX - sizeof(cr_arena_chunk) - 2 * HUGE_PAGE)
        return NULL;
    cr_arena_chunk *c = size >= HUGE_PAGE ? unpark(size) : NULL;
    if (c)
        return c;
    /* what huge_chunk maps (rounded up to huge pages), or what malloc gets */
    size_t cost = size >= HUGE_PAGE
                      ? (sizeof *c + size + HUGE_PAGE - 1) & ~(HUGE_PAGE - 1)
                      : sizeof *c + size;
    if (charge(cost) != 0) {
        *refused = 1;
        return NULL;
    }
    if (size >= HUGE_PAGE) {
        c = huge_chunk(size);
    } else if ((c = malloc(sizeof *c + size))) {
        c->mapped = 0;
        c->size = size;
    }
    if (!c) {
        atomic_fetch_sub(&held_all, cost);
        return NULL;
    }
    c->charged = cost;
    return c;
}

static void free_chunk(cr_arena_chunk *c)
{
    if (!c)
        return;
    atomic_fetch_sub(&held_all, c->charged);
    if (c->mapped)
        munmap(c, c->mapped);
    else
        free(c);
}

static void *pc_alloc(void *a, size_t n) { return cr_arena_alloc(a, n); }
static void pc_free(void *a, void *p)
{
    (void)a; /* given back by cr_arena_reset, all at once */
    (void)p;
}

void cr_arena_init(cr_arena *a)
{
    *a = (cr_arena){{pc_alloc, pc_free, a}, NULL, 0, 0, 0};
}

/* A new head of at least n bytes: twice the last chunk's size, so a call
 * that needs B bytes makes O(log B) chunks and holds under 2B + FIRST_CHUNK. */
static int grow(cr_arena *a, size_t n)
{
    size_t size = a->head ? a->head->size * 2 : FIRST_CHUNK;
    if (size < n)
        size = n;
    cr_arena_chunk *c = new_chunk(size, &a->refused);
    if (!c)
        return -1;
    c->next = a->head;
    a->head = c;
    a->used = 0;
    return 0;
}

void *cr_arena_alloc(cr_arena *a, size_t n)
{
    if (n > SIZE_MAX - ALIGN)
        return NULL;
    n = (n + ALIGN - 1) & ~(ALIGN - 1);
    if (!n)
        n = ALIGN; /* distinct pointers for empty arrays */
    if ((!a->head || a->head->size - a->used < n) && grow(a, n) != 0)
        return NULL;
    void *p = a->head->data + a->used;
    a->used += n;
    return p;
}

/* The arena keeps its largest small chunk; its largest mapped one (up to
 * CR_ARENA_KEEP_LAZY) becomes the process's spare; the rest is freed. */
void cr_arena_reset(cr_arena *a)
{
    cr_arena_chunk *keep = NULL, *big = NULL;
    for (cr_arena_chunk *c = a->head, *next; c; c = next) {
        next = c->next;
        cr_arena_chunk **slot = c->mapped ? &big : &keep;
        size_t cap = c->mapped ? CR_ARENA_KEEP_LAZY : CR_ARENA_KEEP;
        if (c->size <= cap && (!*slot || c->size > (*slot)->size)) {
            free_chunk(*slot);
            *slot = c;
        } else {
            free_chunk(c);
        }
    }
    if (big)
        park(big);
    if (keep)
        keep->next = NULL;
    a->head = keep;
    a->used = 0;
    a->refused = 0;
}

size_t cr_arena_held(const cr_arena *a)
{
    size_t n = 0;
    for (const cr_arena_chunk *c = a->head; c; c = c->next)
        n += c->size;
    return n;
}

int cr_arena_owns(const cr_arena *a, const void *p)
{
    const unsigned char *q = p;
    for (const cr_arena_chunk *c = a->head; c; c = c->next) {
        size_t used = c == a->head ? a->used : c->size;
        /* compared as integers: p may point into another object entirely */
        if ((uintptr_t)q >= (uintptr_t)c->data && (uintptr_t)q < (uintptr_t)c->data + used)
            return 1;
    }
    return 0;
}

void cr_arena_destroy(cr_arena *a)
{
    for (cr_arena_chunk *c = a->head, *next; c; c = next) {
        next = c->next;
        free_chunk(c);
    }
    a->head = NULL;
    a->used = 0;
}

/* ---- the thread's own ---- */

static pthread_key_t thread_key;
static pthread_once_t thread_once = PTHREAD_ONCE_INIT;
static int thread_key_ok;

static void thread_exit(void *p)
{
    cr_arena_destroy(p);
    free(p);
}

static void make_key(void) { thread_key_ok = pthread_key_create(&thread_key, thread_exit) == 0; }

cr_arena *cr_arena_take(void)
{
    pthread_once(&thread_once, make_key);
    if (!thread_key_ok)
        return NULL;
    cr_arena *a = pthread_getspecific(thread_key);
    if (!a) {
        if (!(a = malloc(sizeof *a)))
            return NULL;
        cr_arena_init(a);
        if (pthread_setspecific(thread_key, a) != 0) {
            free(a);
            return NULL;
        }
    }
    if (a->busy)
        return NULL;
    a->busy = 1;
    return a;
}

void cr_arena_put(cr_arena *a)
{
    cr_arena_reset(a);
    a->busy = 0;
}
