/* The table of named objectives: its text form parsed, an entry found by
 * name. Pure: the config's row hands the text here and keeps the table. */
#include <math.h>
#include <string.h>

#include "admit.h"

#define PRIORITY_MAX 1000

static int name_char(char ch)
{
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
           ch == '_' || ch == '.' || ch == '-';
}

/* [*s, *e) with the spaces at either end left out. */
static void trim(const char **s, const char **e)
{
    while (*s < *e && (**s == ' ' || **s == '\t'))
        (*s)++;
    while (*e > *s && ((*e)[-1] == ' ' || (*e)[-1] == '\t'))
        (*e)--;
}

/* The part [s, e) as a NUL-terminated copy in buf (cap bytes); -1 when it
 * does not fit. */
static int copy_part(const char *s, const char *e, char *buf, size_t cap)
{
    size_t n = (size_t)(e - s);
    if (n >= cap)
        return -1;
    memcpy(buf, s, n);
    buf[n] = 0;
    return 0;
}

/* One entry [s, e) as objectives[i] into *o. */
static cr_status parse_entry(const char *s, const char *e, size_t i, cr_admit_objective *o,
                             cr_error *err)
{
    const char *part[3], *end[3];
    int n = 0;
    for (const char *p = s;; p++) {
        if (p == e || *p == ':') {
            if (n == 3)
                return cr_fail(err, CR_EINVAL,
                               "objectives[%zu]: must be name:priority[:slo_ms], got \"%.*s\"", i,
                               (int)(e - s), s);
            part[n] = n ? end[n - 1] + 1 : s;
            end[n++] = p;
            if (p == e)
                break;
        }
    }
    for (int k = 0; k < n; k++)
        trim(&part[k], &end[k]);
    size_t len = (size_t)(end[0] - part[0]);
    int good = len >= 1 && len <= CR_ADMIT_NAME_MAX;
    for (size_t k = 0; good && k < len; k++)
        good = name_char(part[0][k]);
    if (!good)
        return cr_fail(err, CR_EINVAL,
                       "objectives[%zu]: name must be 1 to %d of [A-Za-z0-9_.-], got \"%.*s\"", i,
                       CR_ADMIT_NAME_MAX, (int)(len < 80 ? len : 80), part[0]);
    memcpy(o->name, part[0], len);
    o->name[len] = 0;
    char buf[64];
    int64_t prio;
    if (n < 2 || copy_part(part[1], end[1], buf, sizeof buf) != 0 || cr_parse_i64(buf, &prio) != 0 ||
        prio < -PRIORITY_MAX || prio > PRIORITY_MAX)
        return cr_fail(err, CR_EINVAL,
                       "objectives[%zu] (%s): priority must be an integer in [-%d, %d], got "
                       "\"%.*s\"",
                       i, o->name, PRIORITY_MAX, PRIORITY_MAX,
                       n < 2 ? 0 : (int)(end[1] - part[1] < 40 ? end[1] - part[1] : 40),
                       n < 2 ? "" : part[1]);
    o->priority = (int32_t)prio;
    o->slo_ms = 0;
    if (n == 3 && (copy_part(part[2], end[2], buf, sizeof buf) != 0 ||
                   cr_parse_double(buf, &o->slo_ms) != 0 || !isfinite(o->slo_ms) ||
                   o->slo_ms < 0 || o->slo_ms > CR_ADMIT_MAX_SLO_MS))
        return cr_fail(err, CR_EINVAL,
                       "objectives[%zu] (%s): slo_ms must be a number in [0, %.0f], got \"%.*s\"",
                       i, o->name, CR_ADMIT_MAX_SLO_MS,
                       (int)(end[2] - part[2] < 40 ? end[2] - part[2] : 40), part[2]);
    return CR_OK;
}

cr_status cr_admit_objectives_parse(const char *text, cr_admit_objective *out, size_t *n,
                                    cr_error *err)
{
    *n = 0;
    const char *s = text ? text : "", *e = s + strlen(s);
    trim(&s, &e);
    if (s == e)
        return CR_OK;
    size_t k = 0;
    for (const char *at = s; at <= e; k++) {
        const char *stop = memchr(at, ',', (size_t)(e - at));
        stop = stop ? stop : e;
        if (k == CR_ADMIT_MAX_OBJECTIVES)
            return cr_fail(err, CR_EINVAL, "objectives: at most %d entries", CR_ADMIT_MAX_OBJECTIVES);
        cr_status st = parse_entry(at, stop, k, &out[k], err);
        if (st != CR_OK)
            return st;
        uint32_t was = cr_admit_objective_find(out, k, out[k].name, strlen(out[k].name));
        if (was != CR_ADMIT_NO_OBJECTIVE)
            return cr_fail(err, CR_EINVAL, "objectives[%zu] (%s): name repeats objectives[%u]", k,
                           out[k].name, was);
        at = stop + 1;
    }
    *n = k;
    return CR_OK;
}

uint32_t cr_admit_objective_find(const cr_admit_objective *t, size_t n, const char *name,
                                 size_t len)
{
    for (size_t i = 0; name && i < n; i++)
        if (strlen(t[i].name) == len && memcmp(t[i].name, name, len) == 0)
            return (uint32_t)i;
    return CR_ADMIT_NO_OBJECTIVE;
}
