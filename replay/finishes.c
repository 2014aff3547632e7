/* The finish heap (internal.h): a binary min-heap by finish time, so the
 * cacheroute policy can tell the core, in virtual time, which requests
 * are done. */
#include <stdlib.h>

#include "internal.h"

static void swap(cr_replay_finish *a, cr_replay_finish *b)
{
    cr_replay_finish t = *a;
    *a = *b;
    *b = t;
}

int cr_replay_finishes_push(cr_replay_finishes *f, cr_replay_finish x)
{
    if (f->n == f->cap) {
        size_t cap = f->cap ? 2 * f->cap : 256;
        cr_replay_finish *heap = realloc(f->heap, cap * sizeof *heap);
        if (!heap)
            return -1;
        f->heap = heap;
        f->cap = cap;
    }
    size_t i = f->n++;
    f->heap[i] = x;
    for (; i > 0 && f->heap[(i - 1) / 2].at_s > f->heap[i].at_s; i = (i - 1) / 2)
        swap(&f->heap[(i - 1) / 2], &f->heap[i]);
    return 0;
}

int cr_replay_finishes_pop_due(cr_replay_finishes *f, double now_s, cr_replay_finish *out)
{
    if (!f->n || f->heap[0].at_s > now_s)
        return 0;
    *out = f->heap[0];
    f->heap[0] = f->heap[--f->n];
    for (size_t i = 0;;) {
        size_t least = i, l = 2 * i + 1, r = l + 1;
        if (l < f->n && f->heap[l].at_s < f->heap[least].at_s)
            least = l;
        if (r < f->n && f->heap[r].at_s < f->heap[least].at_s)
            least = r;
        if (least == i)
            return 1;
        swap(&f->heap[i], &f->heap[least]);
        i = least;
    }
}

void cr_replay_finishes_free(cr_replay_finishes *f)
{
    free(f->heap);
    *f = (cr_replay_finishes){0};
}
