/* NIC discovery from sysfs: Ethernet-style interfaces under class/net and
 * RDMA ports under class/infiniband.
 *
 * An attribute that is missing or unreadable means "unknown", never an
 * error: a container may see a partial tree, and a down link's `speed`
 * fails with EINVAL. Only running out of memory fails a scan. */
#include "internal.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define ARPHRD_LOOPBACK 772 /* <linux/if_arp.h>, as class/net/<if>/type reads */

typedef struct nic_entry {
    cr_nic_info info;
    struct cr_nic_counter ctr;
} nic_entry;

typedef struct nic_list {
    nic_entry *v;
    size_t n, cap;
    int oom;
    const char *const *wanted;
    size_t n_wanted;
} nic_list;

int cr_nic_parse_rate(const char *text, double *gbps)
{
    char *end;
    double v = strtod(text, &end);
    *gbps = 0;
    if (end == text || !isfinite(v) || v < 0)
        return -1;
    while (*end == ' ')
        end++;
    if (strncmp(end, "Gb/sec", 6) != 0)
        return -1;
    *gbps = v;
    return 0;
}

/* With a wanted list, exactly those names; without, the default set. */
static int keep(const nic_list *l, const char *name, int in_default_set)
{
    if (strlen(name) >= CR_NIC_NAME_LEN)
        return 0;
    if (l->n_wanted == 0)
        return in_default_set;
    for (size_t i = 0; i < l->n_wanted; i++) {
        if (strcmp(l->wanted[i], name) == 0)
            return 1;
    }
    return 0;
}

static nic_entry *push(nic_list *l, const char *name)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 16;
        nic_entry *v = realloc(l->v, cap * sizeof *v);
        if (!v) {
            l->oom = 1;
            return NULL;
        }
        l->v = v;
        l->cap = cap;
    }
    nic_entry *e = &l->v[l->n];
    memset(e, 0, sizeof *e);
    strcpy(e->info.name, name); /* keep() bounded its length */
    return e;
}

/* Both counter paths are built before the entry counts, so a failure leaves
 * nothing half-made. */
static void set_counter_paths(nic_list *l, nic_entry *e, const char *rx, const char *tx,
                              double unit_bytes)
{
    e->ctr.rx_path = strdup(rx);
    e->ctr.tx_path = strdup(tx);
    e->ctr.unit_bytes = unit_bytes;
    if (!e->ctr.rx_path || !e->ctr.tx_path) {
        free(e->ctr.rx_path);
        free(e->ctr.tx_path);
        l->oom = 1;
        return;
    }
    cr_nic_counter_read(&e->ctr);
    l->n++;
}

/* Physical means a `device` link to a bus device; loopback and virtual
 * interfaces (bridges, veth, tun) have none. */
static int is_physical(const char *ifdir)
{
    char path[PATH_MAX];
    struct stat st;
    uint64_t type;
    if (cr_path_fmt(path, sizeof path, "%s/device", ifdir) || lstat(path, &st) != 0)
        return 0;
    if (cr_path_fmt(path, sizeof path, "%s/type", ifdir) == 0 && cr_read_u64(path, &type) == 0)
        return type != ARPHRD_LOOPBACK;
    return 1;
}

static double read_speed_gbps(const char *ifdir)
{
    char path[PATH_MAX], buf[32], *end;
    if (cr_path_fmt(path, sizeof path, "%s/speed", ifdir) || cr_read_text(path, buf, sizeof buf))
        return 0;
    long mbps = strtol(buf, &end, 10);
    return end == buf || *end || mbps <= 0 ? 0 : (double)mbps / 1000; /* -1 = SPEED_UNKNOWN */
}

static int attr_equals(const char *dir, const char *attr, const char *want)
{
    char path[PATH_MAX], buf[64];
    if (cr_path_fmt(path, sizeof path, "%s/%s", dir, attr) || cr_read_text(path, buf, sizeof buf))
        return 0;
    return strcmp(buf, want) == 0;
}

static void add_net(void *ctx, const char *dir, const char *name)
{
    nic_list *l = ctx;
    char ifdir[PATH_MAX], rx[PATH_MAX], tx[PATH_MAX];
    if (l->oom || cr_path_fmt(ifdir, sizeof ifdir, "%s/%s", dir, name) ||
        cr_path_fmt(rx, sizeof rx, "%s/statistics/rx_bytes", ifdir) ||
        cr_path_fmt(tx, sizeof tx, "%s/statistics/tx_bytes", ifdir))
        return;
    if (!keep(l, name, is_physical(ifdir)))
        return;
    nic_entry *e = push(l, name);
    if (!e)
        return;
    e->info.speed_gbps = read_speed_gbps(ifdir);
    e->info.up = attr_equals(ifdir, "operstate", "up");
    set_counter_paths(l, e, rx, tx, 1);
}

typedef struct rdma_dev {
    nic_list *l;
    const char *dev;
} rdma_dev;

/* IB port state reads like "4: ACTIVE"; the number is the IB spec's. */
static int port_active(const char *portdir)
{
    char path[PATH_MAX], buf[64];
    if (cr_path_fmt(path, sizeof path, "%s/state", portdir) || cr_read_text(path, buf, sizeof buf))
        return 0;
    return strtol(buf, NULL, 10) == 4 && strstr(buf, "ACTIVE") != NULL;
}

static void add_rdma_port(void *ctx, const char *dir, const char *port)
{
    rdma_dev *d = ctx;
    char name[CR_NIC_NAME_LEN + 1], pdir[PATH_MAX], path[PATH_MAX], rate[64];
    char rx[PATH_MAX], tx[PATH_MAX];
    if (d->l->oom || cr_path_fmt(name, sizeof name, "rdma:%s/%s", d->dev, port) ||
        cr_path_fmt(pdir, sizeof pdir, "%s/%s", dir, port) ||
        cr_path_fmt(rx, sizeof rx, "%s/counters/port_rcv_data", pdir) ||
        cr_path_fmt(tx, sizeof tx, "%s/counters/port_xmit_data", pdir) || !keep(d->l, name, 1))
        return;
    nic_entry *e = push(d->l, name);
    if (!e)
        return;
    if (cr_path_fmt(path, sizeof path, "%s/rate", pdir) == 0 &&
        cr_read_text(path, rate, sizeof rate) == 0)
        cr_nic_parse_rate(rate, &e->info.speed_gbps);
    e->info.up = port_active(pdir);
    e->info.is_rdma = 1;
    /* port_*_data count octets divided by 4 (IB spec PortCounters). */
    set_counter_paths(d->l, e, rx, tx, 4);
}

static void add_rdma_dev(void *ctx, const char *dir, const char *dev)
{
    char ports[PATH_MAX];
    rdma_dev d = {ctx, dev};
    if (cr_path_fmt(ports, sizeof ports, "%s/%s/ports", dir, dev) == 0)
        cr_for_each_entry(ports, add_rdma_port, &d);
}

static int by_name(const void *a, const void *b)
{
    return strcmp(((const nic_entry *)a)->info.name, ((const nic_entry *)b)->info.name);
}

/* Moves the sorted entries into the set's two arrays; on failure the entries
 * (and their paths) still belong to l. */
static cr_status split(nic_list *l, cr_nic_set *out)
{
    if (l->n) /* qsort's pointer must not be NULL even for 0 entries */
        qsort(l->v, l->n, sizeof *l->v, by_name);
    out->nics = calloc(l->n ? l->n : 1, sizeof *out->nics);
    out->counters = calloc(l->n ? l->n : 1, sizeof *out->counters);
    if (!out->nics || !out->counters)
        return CR_ENOMEM;
    for (size_t i = 0; i < l->n; i++) {
        out->nics[i] = l->v[i].info;
        out->counters[i] = l->v[i].ctr;
    }
    out->n = l->n;
    return CR_OK;
}

cr_status cr_nic_scan(const char *root, const char *const *wanted, size_t n_wanted, double now_s,
                      cr_nic_set *out, cr_error *err)
{
    nic_list l = {.wanted = wanted, .n_wanted = n_wanted};
    char dir[PATH_MAX];
    memset(out, 0, sizeof *out);
    out->sampled_at_s = now_s;
    if (cr_path_fmt(dir, sizeof dir, "%s/class/net", root) == 0)
        cr_for_each_entry(dir, add_net, &l);
    if (cr_path_fmt(dir, sizeof dir, "%s/class/infiniband", root) == 0)
        cr_for_each_entry(dir, add_rdma_dev, &l);
    cr_status st = l.oom ? CR_ENOMEM : split(&l, out);
    if (st != CR_OK) {
        for (size_t i = 0; i < l.n; i++) {
            free(l.v[i].ctr.rx_path);
            free(l.v[i].ctr.tx_path);
        }
        cr_nic_set_free(out);
        snprintf(err->msg, sizeof err->msg, "out of memory scanning NICs under %s", root);
    }
    free(l.v);
    return st;
}
