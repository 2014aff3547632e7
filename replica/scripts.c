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

/* KEYS[1] lease, KEYS[2] the endpoints hash; ARGV[1] id, ARGV[2] blob,
 * ARGV[3] channel, ARGV[4] the set's version: written only above the one
 * there, so followers never see a version go back. */
static const char PUBLISH_MEMBERS[] =
    "if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end "
    "local have = tonumber(redis.call('HGET', KEYS[2], 'version') or '0') or 0 "
    "if tonumber(ARGV[4]) <= have then return -have end "
    "redis.call('HSET', KEYS[2], 'version', ARGV[4], 'blob', ARGV[2], 'leader', ARGV[1]) "
    "redis.call('PUBLISH', ARGV[3], 'endpoints ' .. ARGV[4]) return tonumber(ARGV[4])";
/* KEYS[1] lease, KEYS[2] the forward list; ARGV[1] id. */
static const char TAKE[] = "if redis.call('GET', KEYS[1]) ~= ARGV[1] then return false end "
                           "local l = redis.call('LRANGE', KEYS[2], 0, -1) "
                           "redis.call('DEL', KEYS[2]) return l";

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

/* EVAL script over the lease and one more key with ARGV id, blob,
 * channel and a number: what both publishes send. */
static redisReply *eval_publish(cr_link *l, const char *script, const cr_publish_keys *k,
                                const uint8_t *blob, size_t len, uint64_t number)
{
    char num[24];
    snprintf(num, sizeof num, "%llu", (unsigned long long)number);
    const char *argv[] = {"EVAL", script, "2", k->lease, k->table, k->id, (const char *)blob,
                          k->channel, num};
    size_t lens[] = {4, strlen(script), 1, strlen(k->lease), strlen(k->table), strlen(k->id),
                     len, strlen(k->channel), strlen(num)};
    return cr_link_argv(l, 9, argv, lens);
}

/* An integer reply's value (0 for any other reply), freed; fail when the
 * link failed. */
static long long integer_of(redisReply *r, long long fail)
{
    if (!r)
        return fail;
    long long v = r->type == REDIS_REPLY_INTEGER ? r->integer : 0;
    freeReplyObject(r);
    return v;
}

long long cr_script_publish(cr_link *l, const cr_publish_keys *k, const uint8_t *blob,
                            size_t len, uint64_t above)
{
    return integer_of(eval_publish(l, PUBLISH, k, blob, len, above), -1);
}

long long cr_script_publish_members(cr_link *l, const cr_publish_keys *k, const uint8_t *blob,
                                    size_t len, uint64_t version)
{
    return integer_of(eval_publish(l, PUBLISH_MEMBERS, k, blob, len, version),
                      CR_SCRIPT_LINK_FAILED);
}

redisReply *cr_script_take(cr_link *l, const char *lease, const char *list, const char *id)
{
    return cr_link_cmd(l, "EVAL %s 2 %s %s %s", TAKE, lease, list, id);
}
