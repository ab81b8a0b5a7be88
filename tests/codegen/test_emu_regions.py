"""emu_add_region watches a buffer (protects its pages while DMA is pending) only when it is ordinary read-write
memory off the registering thread's stack.  The emulator asks the kernel which mapping holds an address
(PROCMAP_QUERY) and works out the initial thread's stack from that mapping, instead of reading /proc/self/maps
twice per region (8 reads per accelerator call of a program, 0.5 ms each in a process with TVM loaded).  The
answer must be the one the file gave: a C harness compiles the emulator with the old reading (the file's lines,
glibc's pthread_getattr_np) beside it and compares the two on buffers of every kind, on the initial thread,
on another thread and in a child forked from that thread, under several stack limits."""

from __future__ import annotations

import subprocess

import pytest

from tileplan.codegen.emulator.build import EMU_HEADER, EMU_SOURCE, HEADER, PARAMS_HEADER, compiler

HARNESS = r"""
#include "gemmini_emu.c"

#include <fcntl.h>
#include <sys/wait.h>

/* the emulator's answers before PROCMAP_QUERY: /proc/self/maps read line by line, pthread_getattr_np */
static int old_plain_rw(uintptr_t lo, uintptr_t hi) {
  FILE *f = fopen("/proc/self/maps", "r");
  if (!f) return 0;
  char line[512];
  uintptr_t covered = lo;
  while (covered < hi && fgets(line, sizeof line, f)) {
    unsigned long a, b;
    char perms[8] = {0};
    if (sscanf(line, "%lx-%lx %7s", &a, &b, perms) != 3) continue;
    if (b <= covered || a > covered) continue;
    if (perms[0] != 'r' || perms[1] != 'w' || perms[2] == 'x') break;
    covered = b;
  }
  fclose(f);
  return covered >= hi;
}

static int old_on_my_stack(uintptr_t lo, uintptr_t hi) {
  pthread_attr_t attr;
  void *addr;
  size_t size;
  if (pthread_getattr_np(pthread_self(), &attr) != 0) return 1;
  int ok = pthread_attr_getstack(&attr, &addr, &size) == 0;
  pthread_attr_destroy(&attr);
  if (!ok) return 1;
  return lo < (uintptr_t)addr + size && (uintptr_t)addr < hi;
}

static uintptr_t PG;
static int checked, differ, watched;

static void compare(const char *what, const void *base, uint64_t size) {
  uintptr_t lo = (uintptr_t)base & ~(PG - 1), hi = (uintptr_t)base + size;
  int old = size > 0 && !old_on_my_stack(lo, hi) && old_plain_rw(lo, hi);
  int now = size > 0 && plain_rw_memory(lo, hi) && !on_my_stack(lo, hi);
  checked++;
  watched += now;
  if (old != now) {
    differ++;
    printf("DIFFER %s: [%lx, %lx) old %d new %d\n", what, (unsigned long)lo, (unsigned long)hi, old, now);
  }
}

static char rw_global[3 * 4096];
static const char ro_global[3 * 4096] = {1};
extern char **environ;

static void buffers(const char *where, const char *main_stack_buf) {
  char local[256];
  char name[64];
#define CMP(what, b, n) (snprintf(name, sizeof name, "%s %s", where, what), compare(name, b, n))
  CMP("stack buffer", local, sizeof local);
  CMP("main stack buffer", main_stack_buf, 64);
  CMP("environment string", environ[0], 8);
  CMP("global", rw_global, sizeof rw_global);
  CMP("const global", ro_global, sizeof ro_global);
  CMP("code", (const void *)&compare, 64);
  char *small = malloc(100), *big = malloc(1 << 22);
  CMP("malloc small", small, 100);
  CMP("malloc big", big, 1 << 22);
  char *m = mmap(NULL, 8 * PG, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  CMP("mmap", m + 10, 5 * PG);
  mprotect(m + 4 * PG, PG, PROT_READ);  /* rw | ro | rw */
  CMP("mmap rw part", m, 4 * PG);
  CMP("mmap over ro page", m + PG, 5 * PG);
  CMP("mmap ro page", m + 4 * PG, PG);
  mprotect(m + 4 * PG, PG, PROT_READ | PROT_WRITE | PROT_EXEC);
  CMP("mmap over rwx page", m + PG, 5 * PG);
  munmap(m + 4 * PG, PG);  /* a hole */
  CMP("mmap over hole", m + PG, 5 * PG);
  CMP("mmap after hole", m + 5 * PG, 3 * PG);
  char *s = mmap(NULL, 2 * PG, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  CMP("shared mmap", s, 2 * PG);
  CMP("zero bytes", small, 0);
  /* just below the initial thread's stack mapping (unmapped, or another mapping) and across its bottom */
  uintptr_t from, to;
  unsigned flags;
  int fd = open("/proc/self/maps", O_RDONLY);
  if (vma_at(fd, (uintptr_t)__libc_stack_end, &from, &to, &flags) == 1) {
    CMP("below stack", (void *)(from - 2 * PG), PG);
    CMP("across stack bottom", (void *)(from - PG), 2 * PG);
    CMP("stack bottom", (void *)from, PG);
    CMP("stack top", (void *)(to - PG), PG);
  }
  close(fd);
  munmap(m, 4 * PG);
  munmap(m + 5 * PG, 3 * PG);
  munmap(s, 2 * PG);
  free(small);
  free(big);
#undef CMP
}

static const char *g_main_buf;

static void *thread_main(void *arg) {
  buffers("thread", g_main_buf);
  pid_t child = fork();
  if (child == 0) {  /* the child's only thread runs on this thread's stack, not the initial one */
    checked = differ = 0;
    buffers("forked from thread", g_main_buf);
    _exit(differ ? 3 : 0);
  }
  int status = 0;
  waitpid(child, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    printf("DIFFER in the child forked from a thread (status %d)\n", status);
    differ++;
  }
  return NULL;
}

int main(void) {
  PG = (uintptr_t)sysconf(_SC_PAGESIZE);
  char main_buf[128];
  g_main_buf = main_buf;
  struct rlimit rl;
  getrlimit(RLIMIT_STACK, &rl);
  rlim_t limits[] = {rl.rlim_cur, 1 << 16, 1 << 20, 64 << 20, rl.rlim_max};
  for (int i = 0; i < 5; i++) {
    struct rlimit r = {limits[i] < rl.rlim_max ? limits[i] : rl.rlim_max, rl.rlim_max};
    if (setrlimit(RLIMIT_STACK, &r) != 0) continue;
    buffers("main", main_buf);
  }
  setrlimit(RLIMIT_STACK, &rl);
  pthread_t t;
  pthread_create(&t, NULL, thread_main, NULL);
  pthread_join(t, NULL);
  struct emu_procmap_query q = {.size = sizeof q};
  int fd = open("/proc/self/maps", O_RDONLY);
  int fast = ioctl(fd, EMU_PROCMAP_QUERY, &q) == 0 || errno == ENOENT;
  printf("checked %d watched %d differ %d procmap_query %d\n", checked, watched, differ, fast);
  return differ != 0;
}
"""


@pytest.mark.parametrize("procmap_query", [True, False], ids=["procmap_query", "maps_file"])
def test_watched_regions_are_the_ones_proc_maps_gave(tmp_path, procmap_query):
    """The same regions watched with the kernel's answers and, as on a kernel without PROCMAP_QUERY (before 6.11),
    with the file's."""
    for f in (EMU_SOURCE, HEADER, PARAMS_HEADER, EMU_HEADER):
        (tmp_path / f.name).write_bytes(f.read_bytes())
    (tmp_path / "harness.c").write_text(HARNESS)
    exe = tmp_path / "harness"
    subprocess.run([compiler(), "-O1", "-std=gnu11", "-Wall", "-pthread", "-I", str(tmp_path),
                    *([] if procmap_query else ["-DEMU_NO_PROCMAP_QUERY"]), str(tmp_path / "harness.c"),
                    "-o", str(exe), "-lm"], check=True, capture_output=True, text=True)
    run = subprocess.run([str(exe)], capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr
    checked, watched = (int(w) for w in run.stdout.split()[1:4:2])
    assert checked >= 5 * 20 and 0 < watched < checked, run.stdout  # both answers occur
