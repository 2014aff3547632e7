/* Building a trace: the parser and the generator append requests and
 * their blocks here, arrays grown geometrically (so a stream of any length
 * costs amortized O(1) per item and no per-request allocation), then sort
 * once. */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* Grows *p (of *cap items of size bytes) to hold need items. */
static int grow_to(void **p, size_t *cap, size_t need, size_t size)
{
    if (need <= *cap)
        return 0;
    size_t n = *cap ? *cap : 1024;
    while (n < need) {
        if (n > SIZE_MAX / 2 / size)
            return -1;
        n *= 2;
    }
    void *q = realloc(*p, n * size);
    if (!q)
        return -1;
    *p = q;
    *cap = n;
    return 0;
}

int cr_replay_builder_reserve(cr_replay_builder *b, size_t n)
{
    if (n > SIZE_MAX - b->t.n_blocks)
        return -1;
    return grow_to((void **)&b->t.blocks, &b->cap_blocks, b->t.n_blocks + n,
                   sizeof *b->t.blocks);
}

int cr_replay_builder_add(cr_replay_builder *b, const cr_replay_request *r, const uint64_t *ids,
                          uint32_t n)
{
    if (cr_replay_builder_reserve(b, n) != 0 ||
        grow_to((void **)&b->t.reqs, &b->cap_reqs, b->t.n + 1, sizeof *b->t.reqs) != 0)
        return -1;
    cr_replay_request *x = &b->t.reqs[b->t.n++];
    *x = *r;
    x->n_blocks = n;
    x->first_block = b->t.n_blocks;
    if (ids)
        memcpy(b->t.blocks + b->t.n_blocks, ids, (size_t)n * sizeof *ids);
    b->t.n_blocks += n;
    return 0;
}

/* first_block grows in the order requests were added, so it breaks ties
 * the way a stable sort would. */
static int by_time(const void *pa, const void *pb)
{
    const cr_replay_request *a = pa, *b = pb;
    if (a->t_ms != b->t_ms)
        return a->t_ms < b->t_ms ? -1 : 1;
    return (a->first_block > b->first_block) - (a->first_block < b->first_block);
}

void cr_replay_builder_finish(cr_replay_builder *b, cr_replay_trace *out)
{
    cr_replay_trace *t = &b->t;
    size_t i = 1;
    while (i < t->n && t->reqs[i - 1].t_ms <= t->reqs[i].t_ms)
        i++;
    if (i < t->n) /* traces are usually in order already */
        qsort(t->reqs, t->n, sizeof *t->reqs, by_time);
    *out = *t;
    memset(b, 0, sizeof *b);
}
