/* The prober's option rows: each setting's flag, default, bounds and help,
 * once. */
#include <stddef.h>

#include "options.h"
#include "probe.h"

#define AT(field) offsetof(cr_probe_config, field)

static const cr_option ROWS[] = {
    /* At most 1e9 s keeps re-probe deadlines inside time_t. */
    {.name = "probe-interval", .key = "interval_s", .type = CR_OPT_DOUBLE, .offset = AT(interval_s),
     .def = 300, .min = 0, .max = 1e9, .help = "seconds between GPU/NIC probes; 0 = start-up only"},
    {.name = "nic", .key = "nic_names", .type = CR_OPT_LIST, .offset = AT(nic_names),
     .count_offset = AT(n_nic_names), .def_text = "every physical NIC and RDMA port", .min = 1,
     .max = CR_NIC_NAME_LEN - 1, .flags = CR_OPT_REPEATABLE,
     .help = "probe exactly this interface (rdma:<device>/<port> for an RDMA port)"},
    {.name = "sysfs-root", .key = "sysfs_root", .type = CR_OPT_STRING, .offset = AT(sysfs_root),
     .def_text = "/sys", .min = 1, .max = CR_PROBE_PATH_MAX, .help = "where sysfs is mounted"},
};

static void defaults(void *cfg) { cr_probe_config_default(cfg); }
static cr_status check(const void *cfg, cr_error *err) { return cr_probe_config_check(cfg, err); }

const cr_option_table cr_probe_options = CR_OPTION_TABLE_HOOKED("probe", ROWS, defaults, check);
