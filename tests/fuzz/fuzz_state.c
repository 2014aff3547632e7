/* libFuzzer target for the state-file loader (core/state/format.c through
 * cr_core_state_check): any bytes must give CR_OK or a clean error, never
 * a crash, a sanitizer report or an allocation the bytes do not justify.
 *
 * Each input is tried twice: as it is (the frame: magic, version, size,
 * checksum), and with its last 32 bytes replaced by the SHA-256 of the
 * rest, so mutations get past the checksum into the sections' parsers.
 *
 * Built by tests/fuzz.cmake like every target. Seeds: tests/fuzz/corpus/state/, written by
 *   CR_STATE_SEED_DIR=tests/fuzz/corpus/state build-test/tests/test_state
 * (an empty state, four owners, and owners with a table and calibration,
 * all for the default configuration, so they pass the fingerprint). */
#include <openssl/evp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core.h"

static cr_core *core(void)
{
    static cr_core *c;
    if (!c) {
        cr_core_config cfg;
        cr_error err;
        cr_core_config_default(&cfg);
        cr_core_quiet_probe(&cfg.probe);
        cfg.replan_interval_s = 0;
        if (!(c = cr_core_new(&cfg, NULL, NULL, &err)))
            abort();
    }
    return c;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The loader's whole contract: OK, or CR_EINVAL saying why. */
static void check(const uint8_t *data, size_t size)
{
    cr_error err;
    err.msg[0] = 0;
    cr_status st = cr_core_state_check(core(), data, size, &err);
    if (st != CR_OK && (st != CR_EINVAL || !err.msg[0]))
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    check(data, size);
    if (size < 64)
        return 0;
    uint8_t *sealed = malloc(size);
    if (!sealed)
        return 0;
    memcpy(sealed, data, size);
    unsigned n;
    EVP_Digest(sealed, size - 32, sealed + size - 32, &n, EVP_sha256(), NULL);
    check(sealed, size);
    free(sealed);
    return 0;
}
