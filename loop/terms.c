/* The names of the terms and paths a prediction is made of: stable metric
 * labels and answer fields. */
#include "loop.h"

const char *cr_loop_term_name(cr_loop_term t)
{
    static const char *const names[CR_N_TERMS] = {"queue_wait", "prefill", "transfer", "load",
                                                  "total"};
    return (unsigned)t < CR_N_TERMS ? names[t] : "unknown";
}

const char *cr_loop_path_name(cr_loop_path p)
{
    static const char *const names[CR_N_PATHS] = {"text", "kv"};
    return (unsigned)p < CR_N_PATHS ? names[p] : "unknown";
}
