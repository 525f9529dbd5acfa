// A full disk for one file, for the crash-safety tests (tests/tools/test_crash_safety.cpp): preloaded
// into vitk (LD_PRELOAD), it makes every write(2) to the temporary file of a target whose name is
// $VITK_FULL_DISK (e.g. "last.h5", the temporary being last.h5.tmp-PID-N) fail with ENOSPC, as a
// full disk would. Everything else is written as usual. No code of vitk knows about it.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef ssize_t (*write_fn)(int, const void*, size_t);

// Whether fd is open on "<dir>/<target>.tmp-..." for the target named in the environment.
static int is_full(int fd) {
  const char* target = getenv("VITK_FULL_DISK");
  if (!target || !*target) return 0;
  char link[64], path[4096];
  snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
  const ssize_t n = readlink(link, path, sizeof path - 1);
  if (n <= 0) return 0;
  path[n] = '\0';
  const char* base = strrchr(path, '/');
  base = base ? base + 1 : path;
  const size_t len = strlen(target);
  return strncmp(base, target, len) == 0 && strncmp(base + len, ".tmp-", 5) == 0;
}

ssize_t write(int fd, const void* data, size_t size) {
  static write_fn real = NULL;
  if (!real) real = (write_fn)dlsym(RTLD_NEXT, "write");
  if (is_full(fd)) {
    errno = ENOSPC;
    return -1;
  }
  return real(fd, data, size);
}
