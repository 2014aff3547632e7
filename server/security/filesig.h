/* What stat says about a file, to notice that it was replaced or rewritten
 * without reading it: a Kubernetes Secret update swaps a symlink (a new
 * inode behind the same path), an editor or cert-manager rewrites in place
 * (a new size or mtime). */
#ifndef CR_FILESIG_H
#define CR_FILESIG_H

#include <sys/types.h>
#include <time.h>

typedef struct cr_filesig {
    dev_t dev;
    ino_t ino;
    off_t size;
    struct timespec mtime;
    int missing; /* stat failed */
} cr_filesig;

/* path's signature now (following symlinks); all zero for a NULL path. */
void cr_filesig_read(const char *path, cr_filesig *out);
/* 1 when a and b are the same signature. */
int cr_filesig_same(const cr_filesig *a, const cr_filesig *b);

#endif
