/* Per-device derivations from raw driver values: the dense BF16 peak and the
 * UUID text. No driver calls here, so tests cover them on any machine. */
#include "internal.h"

#include <stdio.h>

/* Dense (no 2:4 sparsity) BF16 tensor-core FLOP per clock per SM, with FP32
 * accumulate. One entry per compute capability whose every shipping part
 * runs at the same per-SM rate; anything else is "unknown" rather than a
 * guess, and the operator sets --peak-tflops or --prefill-coeffs.
 *
 * Sources are NVIDIA's whitepapers and datasheets, cross-checked as
 * peak / (SMs * boost clock):
 *   8.0  A100: 4 tensor cores x 256 FMA x 2 = 2048; 312 TFLOPS =
 *        108 SMs x 1.41 GHz x 2048 (A100 whitepaper).
 *   9.0  H100/H200/GH200: 4096, twice Ampere per SM; 989.4 TFLOPS =
 *        132 SMs x 1.83 GHz x 4096 (H100 whitepaper). Known exception: the
 *        export-limited H20 is also 9.0 but runs far slower (~148 TFLOPS on
 *        78 SMs); set --prefill-coeffs there.
 *   10.0 B200/GB200: 8192, twice Hopper per SM; 2.25 PFLOPS dense = 148 SMs
 *        x ~1.86 GHz x 8192 (B200 datasheet; 4096 would need 3.7 GHz).
 * Deliberately unknown:
 *   7.x  Volta and Turing have no BF16 tensor path.
 *   8.6  A10/A40/RTX A6000 run 1024, but GeForce RTX 30 parts run 512 with
 *        FP32 accumulate: the capability alone does not say which.
 *   8.7  Jetson Orin: no datasheet figure we could check.
 *   8.9  Ada: L4/L40S run 1024, L40 and GeForce RTX 40 run 512.
 *   10.x other than 10.0, 11.x, 12.x: not verified.
 * CU_DEVICE_ATTRIBUTE_CLOCK_RATE is the maximum boost clock, so the computed
 * peak can exceed a datasheet figure quoted at a lower clock (an H100 SXM
 * reports 1.98 GHz: 1070 TFLOPS against the quoted 989). */
static const struct {
    uint32_t major, minor, flop_per_clock_sm;
} BF16_TABLE[] = {
    {8, 0, 2048},
    {9, 0, 4096},
    {10, 0, 8192},
};

uint32_t cr_gpu_bf16_flop_per_clock_sm(uint32_t cc_major, uint32_t cc_minor)
{
    for (size_t i = 0; i < sizeof BF16_TABLE / sizeof BF16_TABLE[0]; i++) {
        if (BF16_TABLE[i].major == cc_major && BF16_TABLE[i].minor == cc_minor)
            return BF16_TABLE[i].flop_per_clock_sm;
    }
    return 0;
}

void cr_gpu_set_peak(cr_gpu_info *info)
{
    uint32_t per_sm = cr_gpu_bf16_flop_per_clock_sm(info->cc_major, info->cc_minor);
    info->arch_known = per_sm != 0;
    info->peak_tflops = (double)info->sm_count * ((double)info->clock_khz * 1e3) * per_sm / 1e12;
}

void cr_gpu_format_uuid(const unsigned char b[16], char out[CR_GPU_UUID_LEN])
{
    snprintf(out, CR_GPU_UUID_LEN,
             "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1],
             b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14],
             b[15]);
}
