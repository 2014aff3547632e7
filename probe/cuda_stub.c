/* The CUDA probe of a build that found no cuda.h: the node reports no CUDA
 * and the cost model runs on its configured defaults. */
#include "internal.h"

#include <stdio.h>

int cr_cuda_probe(const char *library, int measure_h2d, cr_gpu_info *gpus, size_t *n, char *reason,
                  size_t reason_len)
{
    (void)library;
    (void)measure_h2d;
    (void)gpus;
    *n = 0;
    snprintf(reason, reason_len, "built without CUDA headers");
    return 0;
}
