/* Disk I/O errors (EIO) on demand, for the files under one directory: an LD_PRELOAD library for the chaos suite.

   A process started with LD_PRELOAD naming this library and TIEREDCTL_EIO_ROOT naming a directory (absolute, no
   trailing slash: e.g. a local cluster's data/ directory) runs as usual until a switch file appears: for each
   entry E directly under the root (a broker's data directory, data/broker-1), the file ROOT/E.eio. While it exists
   every file operation on E or anything under it fails with EIO, as a failing disk answers: opening, reading,
   writing, syncing, truncating, allocating, listing, renaming, unlinking and making directories. Deleting the switch makes
   the disk whole again; what was written before stays (the library never touches data, it only refuses calls).

   Invariants:
   - Nothing outside the root is ever refused: sockets, pipes, the metadata store and the process's own files go
     through untouched. A descriptor is watched when it was opened under the root (looked up once, from
     /proc/self/fd, when it is opened); while a switch is on, each refusal first checks again that the
     descriptor still names a file under the root, so a descriptor number reused by a socket after a close this
     library did not see (close_range, a close inside the C library) is never refused.
   - With no switch on, a watched call costs one access(2) of the switch; an unwatched one, a table look-up.
   - Calls the C library makes internally (fopen's own open, readdir's getdents) and memory-mapped pages are not
     seen: the fault covers what Python's os and io modules call, which is what the brokers use.
*/
#define _GNU_SOURCE
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

#define MAX_FDS 65536
#define MAX_DISKS 64

static char root[PATH_MAX];
static size_t root_len;
static int configured; /* 0: not yet, 1: watching root, -1: no root given (inert) */
static pthread_once_t once = PTHREAD_ONCE_INIT;
static pthread_mutex_t disks_lock = PTHREAD_MUTEX_INITIALIZER;
static char switches[MAX_DISKS][PATH_MAX]; /* the switch file of each disk seen so far */
static int disk_count;
static unsigned char fd_disk[MAX_FDS]; /* 0: unwatched; k: watched, on disk k - 1 */

static void configure(void) {
    const char *r = getenv("TIEREDCTL_EIO_ROOT");
    size_t n = r ? strlen(r) : 0;
    if (n == 0 || n >= PATH_MAX - 16 || r[0] != '/') {
        configured = -1;
        return;
    }
    memcpy(root, r, n + 1);
    while (n > 1 && root[n - 1] == '/') root[--n] = '\0';
    root_len = n;
    configured = 1;
}

static int active(void) {
    pthread_once(&once, configure);
    return configured == 1;
}

/* The disk (index + 1) that an absolute path lies on, or 0 when it is not under the root. */
static int disk_of_path(const char *path) {
    if (strncmp(path, root, root_len) != 0 || path[root_len] != '/') return 0;
    const char *entry = path + root_len + 1;
    size_t len = strcspn(entry, "/");
    if (len == 0 || len > NAME_MAX) return 0;
    char sw[PATH_MAX];
    if (root_len + 1 + len + 5 >= sizeof sw) return 0;
    memcpy(sw, root, root_len);
    sw[root_len] = '/';
    memcpy(sw + root_len + 1, entry, len);
    memcpy(sw + root_len + 1 + len, ".eio", 5);
    pthread_mutex_lock(&disks_lock);
    int k = 0;
    for (int i = 0; i < disk_count; i++) {
        if (strcmp(switches[i], sw) == 0) {
            k = i + 1;
            break;
        }
    }
    if (k == 0 && disk_count < MAX_DISKS) {
        strcpy(switches[disk_count], sw);
        k = ++disk_count;
    }
    pthread_mutex_unlock(&disks_lock);
    return k;
}

static int fd_path(int fd, char *out) {
    char link[64];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, out, PATH_MAX - 1);
    if (n < 0) return -1;
    out[n] = '\0';
    return 0;
}

/* An absolute form of (dirfd, path) for the path-based calls; 0 on success. */
static int absolute(int dirfd, const char *path, char *out) {
    if (path == NULL) return -1;
    if (path[0] == '/') {
        if (strlen(path) >= PATH_MAX) return -1;
        strcpy(out, path);
        return 0;
    }
    char base[PATH_MAX];
    if (dirfd == AT_FDCWD) {
        if (getcwd(base, sizeof base) == NULL) return -1;
    } else if (fd_path(dirfd, base) != 0) {
        return -1;
    }
    size_t b = strlen(base), n = strlen(path);
    if (b + 1 + n >= PATH_MAX) return -1;
    memcpy(out, base, b);
    out[b] = '/';
    memcpy(out + b + 1, path, n + 1);
    return 0;
}

static int switched_on(int k) { return k > 0 && access(switches[k - 1], F_OK) == 0; }

static int path_fails(int dirfd, const char *path) {
    if (!active()) return 0;
    char abs[PATH_MAX];
    if (absolute(dirfd, path, abs) != 0) return 0;
    return switched_on(disk_of_path(abs));
}

static void watch(int fd) {
    if (fd < 0 || fd >= MAX_FDS || !active()) return;
    char p[PATH_MAX];
    fd_disk[fd] = fd_path(fd, p) == 0 ? (unsigned char)disk_of_path(p) : 0;
}

static int fd_fails(int fd) {
    if (fd < 0 || fd >= MAX_FDS || fd_disk[fd] == 0) return 0;
    if (!switched_on(fd_disk[fd])) return 0;
    char p[PATH_MAX];
    int k = fd_path(fd, p) == 0 ? disk_of_path(p) : 0; /* the number may name another file by now */
    fd_disk[fd] = (unsigned char)k;
    return switched_on(k);
}

/* The C library's own function, looked up once (a racing first look-up finds the same pointer). */
#define REAL(name)                                                                                        \
    (__extension__({                                                                                      \
        static __typeof__(&name) real_;                                                                   \
        if (real_ == NULL) real_ = (__typeof__(&name))dlsym(RTLD_NEXT, #name);                            \
        real_;                                                                                            \
    }))
#define FAIL_FD(fd, ret)      \
    if (fd_fails(fd)) {       \
        errno = EIO;          \
        return ret;           \
    }
#define FAIL_PATH(dirfd, path, ret) \
    if (path_fails(dirfd, path)) {  \
        errno = EIO;                \
        return ret;                 \
    }

static int opened(int fd) {
    watch(fd);
    return fd;
}

static mode_t mode_arg(int flags, va_list ap) {
    return (flags & O_CREAT) || (flags & __O_TMPFILE) == __O_TMPFILE ? va_arg(ap, mode_t) : 0;
}

/* open and openat, and their 64-bit names: a variadic mode, passed on when the flags create a file. */
#define DEFINE_OPEN(name)                                   \
    int name(const char *path, int flags, ...) {            \
        va_list ap;                                         \
        va_start(ap, flags);                                \
        mode_t mode = mode_arg(flags, ap);                  \
        va_end(ap);                                         \
        FAIL_PATH(AT_FDCWD, path, -1)                       \
        return opened(REAL(name)(path, flags, mode));       \
    }
#define DEFINE_OPENAT(name)                                          \
    int name(int dirfd, const char *path, int flags, ...) {          \
        va_list ap;                                                  \
        va_start(ap, flags);                                         \
        mode_t mode = mode_arg(flags, ap);                           \
        va_end(ap);                                                  \
        FAIL_PATH(dirfd, path, -1)                                   \
        return opened(REAL(name)(dirfd, path, flags, mode));         \
    }

DEFINE_OPEN(open)
DEFINE_OPEN(open64)
DEFINE_OPENAT(openat)
DEFINE_OPENAT(openat64)

DIR *opendir(const char *path) {
    FAIL_PATH(AT_FDCWD, path, NULL)
    return REAL(opendir)(path);
}

int close(int fd) {
    if (fd >= 0 && fd < MAX_FDS) fd_disk[fd] = 0;
    return REAL(close)(fd);
}

ssize_t read(int fd, void *buf, size_t n) {
    FAIL_FD(fd, -1)
    return REAL(read)(fd, buf, n);
}

ssize_t pread(int fd, void *buf, size_t n, off_t off) {
    FAIL_FD(fd, -1)
    return REAL(pread)(fd, buf, n, off);
}

ssize_t pread64(int fd, void *buf, size_t n, off64_t off) {
    FAIL_FD(fd, -1)
    return REAL(pread64)(fd, buf, n, off);
}

ssize_t readv(int fd, const struct iovec *iov, int count) {
    FAIL_FD(fd, -1)
    return REAL(readv)(fd, iov, count);
}

ssize_t write(int fd, const void *buf, size_t n) {
    FAIL_FD(fd, -1)
    return REAL(write)(fd, buf, n);
}

ssize_t pwrite(int fd, const void *buf, size_t n, off_t off) {
    FAIL_FD(fd, -1)
    return REAL(pwrite)(fd, buf, n, off);
}

ssize_t pwrite64(int fd, const void *buf, size_t n, off64_t off) {
    FAIL_FD(fd, -1)
    return REAL(pwrite64)(fd, buf, n, off);
}

ssize_t writev(int fd, const struct iovec *iov, int count) {
    FAIL_FD(fd, -1)
    return REAL(writev)(fd, iov, count);
}

int fsync(int fd) {
    FAIL_FD(fd, -1)
    return REAL(fsync)(fd);
}

int fdatasync(int fd) {
    FAIL_FD(fd, -1)
    return REAL(fdatasync)(fd);
}

int ftruncate(int fd, off_t len) {
    FAIL_FD(fd, -1)
    return REAL(ftruncate)(fd, len);
}

int ftruncate64(int fd, off64_t len) {
    FAIL_FD(fd, -1)
    return REAL(ftruncate64)(fd, len);
}

int posix_fallocate(int fd, off_t off, off_t len) {
    if (fd_fails(fd)) return EIO; /* posix_fallocate returns the error number */
    return REAL(posix_fallocate)(fd, off, len);
}

int posix_fallocate64(int fd, off64_t off, off64_t len) {
    if (fd_fails(fd)) return EIO;
    return REAL(posix_fallocate64)(fd, off, len);
}

int rename(const char *from, const char *to) {
    FAIL_PATH(AT_FDCWD, from, -1)
    FAIL_PATH(AT_FDCWD, to, -1)
    return REAL(rename)(from, to);
}

int renameat(int fromfd, const char *from, int tofd, const char *to) {
    FAIL_PATH(fromfd, from, -1)
    FAIL_PATH(tofd, to, -1)
    return REAL(renameat)(fromfd, from, tofd, to);
}

int unlink(const char *path) {
    FAIL_PATH(AT_FDCWD, path, -1)
    return REAL(unlink)(path);
}

int unlinkat(int dirfd, const char *path, int flags) {
    FAIL_PATH(dirfd, path, -1)
    return REAL(unlinkat)(dirfd, path, flags);
}

int mkdir(const char *path, mode_t mode) {
    FAIL_PATH(AT_FDCWD, path, -1)
    return REAL(mkdir)(path, mode);
}

int mkdirat(int dirfd, const char *path, mode_t mode) {
    FAIL_PATH(dirfd, path, -1)
    return REAL(mkdirat)(dirfd, path, mode);
}
