/* The core's own option rows: --replan-interval and --receipts, and the
 * state file's. */
#include <stddef.h>

#include "internal.h"

static const cr_option ROWS[] = {
    {.name = "replan-interval", .key = "replan_interval_s", .type = CR_OPT_DOUBLE,
     .offset = offsetof(cr_core_config, replan_interval_s), .def = 10, .min = 0, .max = 1e9,
     .help = "seconds between plans from the estimator, installed as the current table; 0 = off"},
    {.name = "receipts", .key = "receipts", .type = CR_OPT_U64,
     .offset = offsetof(cr_core_config, receipts), .def = 100000, .min = 0,
     .max = CR_LOOP_MAX_RECEIPTS,
     .help = "decision receipts kept for ReportOutcome and GetDecision, the oldest evicted "
             "first (about 0.8 KB each); 0 = off"},
};

const cr_option_table cr_core_options = CR_OPTION_TABLE("", ROWS);

/* The state file's rows (core.h, "state"). */
static const cr_option STATE_ROWS[] = {
    {.name = "state-file", .key = "state_file", .type = CR_OPT_STRING,
     .offset = offsetof(cr_core_config, state_file), .def_text = "", .min = 0, .max = 4095,
     .help = "file keeping the estimator's owners, the installed table and the calibration "
             "across restarts (written atomically; a bad one is moved to PATH.corrupt); "
             "empty = off"},
    {.name = "snapshot-interval", .key = "snapshot_interval_s", .type = CR_OPT_DOUBLE,
     .offset = offsetof(cr_core_config, snapshot_interval_s), .def = 30, .min = 0, .max = 86400,
     .help = "seconds between writes of --state-file; 0 = only at shutdown"},
};

const cr_option_table cr_core_state_options = CR_OPTION_TABLE("", STATE_ROWS);
