/* File signatures (filesig.h). */
#include "filesig.h"

#include <string.h>
#include <sys/stat.h>

void cr_filesig_read(const char *path, cr_filesig *out)
{
    struct stat st;
    memset(out, 0, sizeof *out);
    if (!path)
        return;
    if (stat(path, &st) != 0) {
        out->missing = 1;
        return;
    }
    out->dev = st.st_dev;
    out->ino = st.st_ino;
    out->size = st.st_size;
    out->mtime = st.st_mtim;
}

int cr_filesig_same(const cr_filesig *a, const cr_filesig *b)
{
    return a->dev == b->dev && a->ino == b->ino && a->size == b->size &&
           a->mtime.tv_sec == b->mtime.tv_sec && a->mtime.tv_nsec == b->mtime.tv_nsec &&
           a->missing == b->missing;
}
