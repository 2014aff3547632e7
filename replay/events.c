/* Membership events (replay.h): the --events file's parser. A line is
 * checked against the set it would change (which endpoints serve, which
 * ids were ever used), so every event the simulator is given is one it
 * can apply: it never has to refuse a change mid-run. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

static const char *const KINDS[] = {"join", "drain", "fail", "mark"}; /* cr_replay_member_kind's */

const char *cr_replay_member_kind_name(cr_replay_member_kind k)
{
    return (unsigned)k < sizeof KINDS / sizeof KINDS[0] ? KINDS[k] : "?";
}

int cr_replay_endpoint_id(const cr_replay_events *e, uint32_t slot, char *buf, size_t len)
{
    if (slot < e->shards)
        return snprintf(buf, len, "e%u", slot);
    for (size_t i = 0; i < e->n; i++)
        if (e->ev[i].kind == CR_REPLAY_JOIN && e->ev[i].slot == slot)
            return snprintf(buf, len, "%s", e->ev[i].id);
    return snprintf(buf, len, "?");
}

/* What the parse has seen so far: the events, and per slot whether its
 * endpoint serves. */
typedef struct parse {
    cr_replay_line at;
    cr_replay_events e;
    size_t cap;
    uint8_t *serving; /* per slot; grown with the joins */
    uint32_t n_serving;
} parse;

/* The slot whose endpoint is id (serving or not), or UINT32_MAX. An
 * initial id is "e" and its slot in decimal without leading zeros, so
 * "e01" is a new id, not e1. */
static uint32_t slot_of(const parse *p, const char *id)
{
    char own[16];
    for (size_t i = 0; i < p->e.n; i++)
        if (p->e.ev[i].kind == CR_REPLAY_JOIN && strcmp(p->e.ev[i].id, id) == 0)
            return p->e.ev[i].slot;
    char *end;
    if (id[0] != 'e' || id[1] < '0' || id[1] > '9')
        return UINT32_MAX;
    errno = 0;
    unsigned long k = strtoul(id + 1, &end, 10);
    if (*end || errno || k >= p->e.shards)
        return UINT32_MAX;
    snprintf(own, sizeof own, "e%lu", k);
    return strcmp(own, id) == 0 ? (uint32_t)k : UINT32_MAX;
}

/* Room for one more event and slot; -1 when out of memory. */
static int grow(parse *p)
{
    if (p->e.n < p->cap)
        return 0;
    size_t cap = p->cap ? 2 * p->cap : 16;
    cr_replay_member_event *ev = realloc(p->e.ev, cap * sizeof *ev);
    if (ev)
        p->e.ev = ev;
    uint8_t *serving = ev ? realloc(p->serving, (size_t)p->e.shards + cap) : NULL;
    if (!serving)
        return -1;
    p->serving = serving;
    p->cap = cap;
    return 0;
}

/* A mark at t labelled id (room grown by the caller). */
static cr_status mark(parse *p, double t, const char *id)
{
    cr_replay_member_event *ev = &p->e.ev[p->e.n++];
    *ev = (cr_replay_member_event){.at_s = t, .kind = CR_REPLAY_MARK, .slot = UINT32_MAX};
    memcpy(ev->id, id, strlen(id) + 1);
    return CR_OK;
}

/* The event of a line's three fields, checked against the set so far. */
static cr_status add(parse *p, const char *at, const char *kind, const char *id, cr_error *err)
{
    double t;
    size_t k = 0, n_kinds = sizeof KINDS / sizeof KINDS[0];
    if (cr_parse_double(at, &t) != 0 || !cr_replay_finite_ge0(t))
        return cr_replay_line_fail(&p->at, err,
                                   "time must be a finite number of seconds >= 0, got \"%s\"", at);
    if (p->e.n && t < p->e.ev[p->e.n - 1].at_s)
        return cr_replay_line_fail(&p->at, err, "time %g is before the previous event's %g", t,
                                   p->e.ev[p->e.n - 1].at_s);
    while (k < n_kinds && strcmp(kind, KINDS[k]) != 0)
        k++;
    if (k == n_kinds)
        return cr_replay_line_fail(&p->at, err, "unknown kind \"%s\" (join, drain, fail, mark)",
                                   kind);
    if (strlen(id) > CR_REPLAY_ENDPOINT_ID_MAX)
        return cr_replay_line_fail(&p->at, err, "endpoint id must be at most %d bytes, got %zu",
                                   CR_REPLAY_ENDPOINT_ID_MAX, strlen(id));
    if (p->e.n == CR_REPLAY_EVENTS_MAX)
        return cr_replay_line_fail(&p->at, err, "more than %d events", CR_REPLAY_EVENTS_MAX);
    if (k == CR_REPLAY_MARK) /* a label, no endpoint: nothing to check or change */
        return grow(p) != 0 ? cr_fail(err, CR_ENOMEM, "out of memory for %zu events", p->e.n + 1)
                            : mark(p, t, id);
    uint32_t slot = slot_of(p, id);
    if (k == CR_REPLAY_JOIN && slot != UINT32_MAX)
        return cr_replay_line_fail(&p->at, err, "join of endpoint \"%s\", which %s", id,
                                   p->serving[slot] ? "is already serving"
                                                    : "has left (ids are not reused)");
    if (k == CR_REPLAY_JOIN && p->e.slots == CR_MAX_SHARDS)
        return cr_replay_line_fail(&p->at, err, "a join past %u slots", CR_MAX_SHARDS);
    if (k != CR_REPLAY_JOIN && slot == UINT32_MAX)
        return cr_replay_line_fail(&p->at, err, "%s of unknown endpoint \"%s\"", kind, id);
    if (k != CR_REPLAY_JOIN && !p->serving[slot])
        return cr_replay_line_fail(&p->at, err, "%s of endpoint \"%s\", which is not serving",
                                   kind, id);
    if (k != CR_REPLAY_JOIN && p->n_serving == 1)
        return cr_replay_line_fail(&p->at, err, "%s of endpoint \"%s\" would leave none serving",
                                   kind, id);
    if (grow(p) != 0)
        return cr_fail(err, CR_ENOMEM, "out of memory for %zu events", p->e.n + 1);
    if (k == CR_REPLAY_JOIN)
        slot = p->e.slots++;
    p->serving[slot] = k == CR_REPLAY_JOIN;
    if (k == CR_REPLAY_JOIN)
        p->n_serving++;
    else
        p->n_serving--;
    cr_replay_member_event *ev = &p->e.ev[p->e.n++];
    *ev = (cr_replay_member_event){.at_s = t, .kind = (cr_replay_member_kind)k, .slot = slot};
    memcpy(ev->id, id, strlen(id) + 1);
    return CR_OK;
}

/* One line (len bytes, its newline gone): up to "#", three blank-separated
 * fields, or none. */
static cr_status line(parse *p, const char *text, size_t len, cr_error *err)
{
    char buf[256], *field[4], *save = NULL;
    const char *hash = memchr(text, '#', len);
    len = hash ? (size_t)(hash - text) : len;
    if (len >= sizeof buf)
        return cr_replay_line_fail(&p->at, err, "line is longer than %zu bytes", sizeof buf - 1);
    memcpy(buf, text, len);
    buf[len] = '\0';
    size_t n = 0;
    for (char *f = strtok_r(buf, " \t\r\v\f", &save); f && n < 4;
         f = strtok_r(NULL, " \t\r\v\f", &save))
        field[n++] = f;
    if (n == 0)
        return CR_OK;
    if (n != 3)
        return cr_replay_line_fail(&p->at, err, "want AT_S KIND ENDPOINT, got %s fields",
                                   n > 3 ? "more" : "fewer");
    return add(p, field[0], field[1], field[2], err);
}

cr_status cr_replay_events_parse(const char *name, const char *text, size_t len, uint32_t shards,
                                 cr_replay_events *out, cr_error *err)
{
    memset(out, 0, sizeof *out);
    if (shards < 1 || shards > CR_MAX_SHARDS)
        return cr_fail(err, CR_EINVAL, "shards must be in 1..%u, got %u", CR_MAX_SHARDS, shards);
    parse p = {.at = {name, 0}, .e = {.shards = shards, .slots = shards}, .n_serving = shards};
    p.serving = malloc(shards);
    cr_status st = p.serving ? CR_OK : cr_fail(err, CR_ENOMEM, "out of memory for %u shards", shards);
    if (p.serving)
        memset(p.serving, 1, shards);
    for (size_t at = 0; st == CR_OK && at < len;) {
        const char *nl = memchr(text + at, '\n', len - at);
        size_t end = nl ? (size_t)(nl - text) : len;
        p.at.line++;
        st = line(&p, text + at, end - at, err);
        at = end + 1;
    }
    free(p.serving);
    if (st != CR_OK) {
        cr_replay_events_free(&p.e);
        return st;
    }
    *out = p.e;
    return CR_OK;
}

cr_status cr_replay_events_load(const char *path, uint32_t shards, cr_replay_events *out,
                                cr_error *err)
{
    memset(out, 0, sizeof *out);
    FILE *f = fopen(path, "rb");
    if (!f)
        return cr_fail(err, CR_EINVAL, "%s: cannot read: %s", path, strerror(errno));
    char *text = malloc(CR_REPLAY_EVENTS_FILE_MAX + 1);
    size_t len = text ? fread(text, 1, CR_REPLAY_EVENTS_FILE_MAX + 1, f) : 0;
    cr_status st = CR_OK;
    if (!text)
        st = cr_fail(err, CR_ENOMEM, "out of memory reading %s", path);
    else if (ferror(f))
        st = cr_fail(err, CR_EINVAL, "%s: cannot read: %s", path, strerror(errno));
    else if (len > CR_REPLAY_EVENTS_FILE_MAX)
        st = cr_fail(err, CR_EINVAL, "%s: more than %u bytes", path, CR_REPLAY_EVENTS_FILE_MAX);
    fclose(f);
    if (st == CR_OK)
        st = cr_replay_events_parse(path, text, len, shards, out, err);
    free(text);
    return st;
}

void cr_replay_events_free(cr_replay_events *e)
{
    free(e->ev);
    memset(e, 0, sizeof *e);
}
