/* Sessions for the ttft rule (internal.h): where each owner's last request
 * went. Direct-mapped: a lookup is one probe, and an owner pushed out by
 * another only loses its stickiness (it is placed as a new session).
 * Not the shared table (htable.h): this one overwrites, never probes. */
#include <stdlib.h>

#include "internal.h"

int cr_sessions_init(cr_sessions *s, uint64_t n)
{
    uint64_t slots = 1;
    while (slots < n)
        slots *= 2;
    s->slots = malloc(slots * sizeof *s->slots);
    if (!s->slots)
        return -1;
    for (uint64_t i = 0; i < slots; i++)
        s->slots[i] = (cr_session){0, UINT32_MAX, 0};
    s->mask = slots - 1;
    return 0;
}

void cr_sessions_free(cr_sessions *s)
{
    free(s->slots);
    s->slots = NULL;
}

const cr_session *cr_sessions_find(const cr_sessions *s, int64_t owner)
{
    if (!s->slots)
        return NULL;
    const cr_session *x = &s->slots[cr_mix64((uint64_t)owner) & s->mask];
    return x->shard != UINT32_MAX && x->owner == owner ? x : NULL;
}

void cr_sessions_put(cr_sessions *s, int64_t owner, uint32_t shard, uint32_t tokens)
{
    if (s->slots)
        s->slots[cr_mix64((uint64_t)owner) & s->mask] = (cr_session){owner, shard, tokens};
}
