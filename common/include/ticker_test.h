/* Test hooks of cr_ticker (common/ticker.c): let a test wait until a
 * ticker's thread has reached a given wait, instead of sleeping and hoping.
 * For tests and test hooks of other components only; production code has
 * no use for them.
 *
 * The ticker's thread counts every wait it begins, under the ticker's lock,
 * just before it blocks: so once a count reaches n, the n-th such wait has
 * begun, and the thread is in it (blocked, or about to find its deadline
 * passed) or past it. A stop cuts any of them short as usual.
 */
#ifndef CR_TICKER_TEST_H
#define CR_TICKER_TEST_H

#include <stdint.h>

#include "common.h"

typedef enum cr_ticker_wait_kind {
    /* The interval before each call (the first one before the first call):
     * count k means the thread has finished k - 1 calls of fn and begun
     * waiting for the next. */
    CR_TICKER_BETWEEN_CALLS = 0,
    /* A cr_ticker_sleep_until on this ticker from inside fn (or from any
     * other thread) that had not been stopped. */
    CR_TICKER_IN_CALL = 1
} cr_ticker_wait_kind;

/* The number of waits of kind begun so far. Thread-safe; not concurrently
 * with cr_ticker_stop. */
uint64_t cr_ticker_test_waits(cr_ticker *t, cr_ticker_wait_kind kind);

/* Blocks until at least n waits of kind have begun (returns 0); returns -1
 * when timeout_s seconds pass, or the ticker starts stopping, first. The
 * timeout only keeps a broken test from hanging: pass a generous one.
 * Thread-safe; not concurrently with cr_ticker_stop. */
int cr_ticker_test_await(cr_ticker *t, cr_ticker_wait_kind kind, uint64_t n, double timeout_s);

#endif
