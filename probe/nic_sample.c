/* NIC utilization from two counter samples. Counters are cumulative bytes
 * (or IB's octets / 4); a counter that went backwards was reset (driver
 * reload, 32-bit wrap on old HCAs), so that interval reads as unknown. */
#include "internal.h"

#include <stdlib.h>
#include <string.h>

void cr_nic_counter_read(struct cr_nic_counter *c)
{
    c->valid = cr_read_u64(c->rx_path, &c->rx) == 0 && cr_read_u64(c->tx_path, &c->tx) == 0;
}

static double utilization(double speed_gbps, const struct cr_nic_counter *before,
                          const struct cr_nic_counter *after, double dt_s)
{
    if (speed_gbps <= 0 || !(dt_s > 0) || !before->valid || !after->valid ||
        after->rx < before->rx || after->tx < before->tx)
        return 0;
    uint64_t rx = after->rx - before->rx, tx = after->tx - before->tx;
    double bits = (double)(rx > tx ? rx : tx) * after->unit_bytes * 8;
    double u = bits / dt_s / (speed_gbps * 1e9);
    return u > 1 ? 1 : u;
}

void cr_nic_sample(cr_nic_set *set, double now_s)
{
    double dt_s = now_s - set->sampled_at_s;
    for (size_t i = 0; i < set->n; i++) {
        struct cr_nic_counter before = set->counters[i];
        cr_nic_counter_read(&set->counters[i]);
        set->nics[i].utilization =
            utilization(set->nics[i].speed_gbps, &before, &set->counters[i], dt_s);
    }
    set->sampled_at_s = now_s;
}

void cr_nic_set_free(cr_nic_set *set)
{
    for (size_t i = 0; i < set->n; i++) {
        free(set->counters[i].rx_path);
        free(set->counters[i].tx_path);
    }
    free(set->nics);
    free(set->counters);
    memset(set, 0, sizeof *set);
}
