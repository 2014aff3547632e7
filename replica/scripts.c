/* The lease and the fence, as Lua run inside Redis, so each check and its
 * write are one atomic step: a leader whose lease expired (a pause, a
 * partition) finds another ID in the lease and writes nothing. */
#include <stdio.h>
#include <string.h>

#include "internal.h"

/* KEYS[1] lease; ARGV[1] id, ARGV[2] ttl ms. */
static const char RENEW[] = "if redis.call('GET', KEYS[1]) == ARGV[1] then "
                            "return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end return 0";
static const char RELEASE[] = "if redis.call('GET', KEYS[1]) == ARGV[1] then "
                              "return redis.call('DEL', KEYS[1]) end return 0";
/* KEYS[1] lease, KEYS[2] table; ARGV[1] id, ARGV[2] blob, ARGV[3] channel,
 * ARGV[4] the generation installed here: the next one is above both it and
 * Redis's, so a Redis that came back empty never sends generations back. */
static const char PUBLISH[] =
    "if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end "
    "local g = redis.call('HINCRBY', KEYS[2], 'generation', 1) "
    "if g <= tonumber(ARGV[4]) then g = tonumber(ARGV[4]) + 1 "
    "redis.call('HSET', KEYS[2], 'generation', g) end "
    "redis.call('HSET', KEYS[2], 'blob', ARGV[2], 'leader', ARGV[1]) "
    "redis.call('PUBLISH', ARGV[3], g) return g";

/* 1 for an integer reply of 1 (or an OK status), 0 for anything else but
 * a failed link (-1). */
static int yes(redisReply *r)
{
    if (!r)
        return -1;
    int ok = (r->type == REDIS_REPLY_INTEGER && r->integer == 1) ||
             (r->type == REDIS_REPLY_STATUS && !strcmp(r->str, "OK"));
    freeReplyObject(r);
    return ok;
}

int cr_script_lease(cr_link *l, const char *key, const char *id, int held, double ttl_s)
{
    long long ms = (long long)(ttl_s * 1e3);
    if (held)
        return yes(cr_link_cmd(l, "EVAL %s 1 %s %s %lld", RENEW, key, id, ms));
    return yes(cr_link_cmd(l, "SET %s %s NX PX %lld", key, id, ms));
}

void cr_script_release(cr_link *l, const char *key, const char *id)
{
    freeReplyObject(cr_link_cmd(l, "EVAL %s 1 %s %s", RELEASE, key, id));
}

long long cr_script_publish(cr_link *l, const cr_publish_keys *k, const uint8_t *blob,
                            size_t len, uint64_t above)
{
    char min[24];
    snprintf(min, sizeof min, "%llu", (unsigned long long)above);
    const char *argv[] = {"EVAL", PUBLISH, "2", k->lease, k->table, k->id, (const char *)blob,
                          k->channel, min};
    size_t lens[] = {4, strlen(PUBLISH), 1, strlen(k->lease), strlen(k->table), strlen(k->id),
                     len, strlen(k->channel), strlen(min)};
    redisReply *r = cr_link_argv(l, 9, argv, lens);
    if (!r)
        return -1;
    long long g = r->type == REDIS_REPLY_INTEGER ? r->integer : 0;
    freeReplyObject(r);
    return g;
}
