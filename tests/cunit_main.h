/* Shared main() for CUnit suites: a suite file defines CR_SUITES as an array
 * of {name, tests[]} and includes this. Exit status is non-zero when any
 * assertion failed, so ctest sees failures. */
#ifndef CR_CUNIT_MAIN_H
#define CR_CUNIT_MAIN_H

#include <CUnit/Basic.h>
#include <CUnit/CUnit.h>

typedef struct cr_test_case {
    const char *name;
    void (*fn)(void);
} cr_test_case;

typedef struct cr_test_suite {
    const char *name;
    const cr_test_case *tests; /* terminated by {NULL, NULL} */
} cr_test_suite;

static int cr_run_suites(const cr_test_suite *suites, int n)
{
    if (CU_initialize_registry() != CUE_SUCCESS)
        return 2;
    for (int i = 0; i < n; i++) {
        CU_pSuite s = CU_add_suite(suites[i].name, NULL, NULL);
        for (const cr_test_case *t = suites[i].tests; t->name; t++)
            CU_add_test(s, t->name, t->fn);
    }
    CU_basic_set_mode(CU_BRM_VERBOSE);
    CU_basic_run_tests();
    unsigned failed = CU_get_number_of_failures() + CU_get_number_of_tests_failed();
    CU_cleanup_registry();
    return failed ? 1 : 0;
}

#define CR_TEST_MAIN(suites)                                                                      \
    int main(void) { return cr_run_suites(suites, (int)(sizeof suites / sizeof suites[0])); }

#endif
