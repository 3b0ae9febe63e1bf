/*
 * bench_launch: run one benchmark process and report its wall time and
 * resource usage (wait4 rusage: peak RSS, page faults, CPU time).
 *
 * Why not let Python wait4() the workload directly: Linux carries the
 * parent's peak RSS into a child across fork+exec (signal->maxrss is seeded
 * from the old mm at exec), so every child of the Python harness would
 * report at least Python's own ~10 MiB. Forking from this tiny (static)
 * launcher keeps that floor near zero.
 *
 * usage: bench_launch [--preload LIB] [--env NAME=VALUE]... --report FILE -- PROGRAM [ARGS...]
 * LD_PRELOAD and every --env variable are set for PROGRAM only, never for the
 * launcher itself (nor for the Python harness above it), so an allocator's
 * settings (e.g. MEMD_DISCARD) reach the measured process and nothing else.
 * The report is one line of key=value pairs. Exit status mirrors PROGRAM's
 * (128 + signal if it was killed).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static long long now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static long long tv_us(struct timeval tv) { return (long long)tv.tv_sec * 1000000LL + tv.tv_usec; }

static void usage(void) {
  fprintf(stderr, "usage: bench_launch [--preload LIB] [--env NAME=VALUE]... --report FILE -- PROGRAM [ARGS...]\n");
  exit(2);
}

int main(int argc, char** argv) {
  const char* preload = NULL;
  const char* report = NULL;
  int i = 1;
  for (; i < argc; ++i) {
    if (strcmp(argv[i], "--preload") == 0 && i + 1 < argc) {
      preload = argv[++i];
    } else if (strcmp(argv[i], "--env") == 0 && i + 1 < argc) {
      const char* eq = strchr(argv[++i], '=');
      if (eq == NULL || eq == argv[i]) usage();  /* applied in the child, below */
    } else if (strcmp(argv[i], "--report") == 0 && i + 1 < argc) {
      report = argv[++i];
    } else if (strcmp(argv[i], "--") == 0) {
      ++i;
      break;
    } else {
      usage();
    }
  }
  if (report == NULL || i >= argc) usage();

  long long start = now_ns();
  pid_t pid = fork();
  if (pid < 0) {
    perror("bench_launch: fork");
    return 125;
  }
  if (pid == 0) {
    if (preload != NULL) setenv("LD_PRELOAD", preload, 1);
    /* Walk the options again rather than collect them while parsing: no
     * array to size. putenv keeps the argv string itself (valid until exec);
     * an --env LD_PRELOAD=... would override --preload. */
    for (int k = 1; k < i; ++k) {
      if (strcmp(argv[k], "--env") == 0) putenv(argv[++k]);
      else if (strcmp(argv[k], "--preload") == 0 || strcmp(argv[k], "--report") == 0) ++k;
    }
    execvp(argv[i], &argv[i]);
    fprintf(stderr, "bench_launch: cannot run %s: %s\n", argv[i], strerror(errno));
    _exit(127);
  }

  int status = 0;
  struct rusage ru;
  while (wait4(pid, &status, 0, &ru) < 0) {
    if (errno != EINTR) {
      perror("bench_launch: wait4");
      return 125;
    }
  }
  long long wall = now_ns() - start;
  int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);

  FILE* out = fopen(report, "w");
  if (out == NULL) {
    perror("bench_launch: report");
    return 125;
  }
  fprintf(out, "wall_ns=%lld maxrss_kib=%ld minflt=%ld majflt=%ld utime_us=%lld stime_us=%lld status=%d\n", wall,
          ru.ru_maxrss, ru.ru_minflt, ru.ru_majflt, tv_us(ru.ru_utime), tv_us(ru.ru_stime), code);
  fclose(out);
  return code;
}
