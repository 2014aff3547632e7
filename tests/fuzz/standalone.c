/* main() for a fuzz target built without libFuzzer (CR_FUZZ off: gcc, the
 * ASan build): runs LLVMFuzzerTestOneInput once on each file named, or on
 * each file in a folder named, as libFuzzer does with file arguments, so
 * the ordinary test run checks the seed corpus. Arguments starting with '-'
 * (libFuzzer's flags) are ignored. Exits 0 after the last input; a failed
 * invariant aborts. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fuzz.h"

static int run_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        perror(path);
        return -1;
    }
    uint8_t *data = NULL;
    size_t len = 0, cap = 0, got;
    do {
        if (len == cap) {
            cap = cap ? 2 * cap : 4096;
            uint8_t *grown = realloc(data, cap);
            if (!grown) {
                fprintf(stderr, "%s: out of memory\n", path);
                free(data);
                fclose(f);
                return -1;
            }
            data = grown;
        }
        got = fread(data + len, 1, cap - len, f);
        len += got;
    } while (got > 0);
    fclose(f);
    /* A copy of exactly len bytes, so ASan sees a read past the input. */
    uint8_t *exact = malloc(len ? len : 1);
    if (exact)
        memcpy(exact, data, len);
    free(data);
    if (!exact)
        return -1;
    LLVMFuzzerTestOneInput(exact, len);
    free(exact);
    return 0;
}

static int run_path(const char *path, size_t *ran)
{
    struct stat st;
    if (stat(path, &st) != 0) {
        perror(path);
        return -1;
    }
    if (!S_ISDIR(st.st_mode)) {
        (*ran)++;
        return run_file(path);
    }
    DIR *d = opendir(path);
    if (!d) {
        perror(path);
        return -1;
    }
    int rc = 0;
    for (struct dirent *e; rc == 0 && (e = readdir(d));) {
        if (e->d_name[0] == '.')
            continue;
        char child[4096];
        snprintf(child, sizeof child, "%s/%s", path, e->d_name);
        rc = run_path(child, ran);
    }
    closedir(d);
    return rc;
}

int main(int argc, char **argv)
{
    size_t ran = 0;
    for (int i = 1; i < argc; i++)
        if (argv[i][0] != '-' && run_path(argv[i], &ran) != 0)
            return 1;
    printf("%s: %zu inputs, every invariant held\n", argv[0], ran);
    return 0;
}
