/*
 * Timing harness for a compiled xla-aot model, built with -DMODEL=<name> and linked with
 * lib<name>.a. Used by bench/run.py; not a test.
 *
 *   bench_harness THREADS SECONDS ARENA_SIZE NIN NOUT IN_0 BYTES_0 ... OUT_0 BYTES_0 ...
 *
 * Reads the inputs, runs the model a few times to warm caches, then calls it back to back until
 * SECONDS have passed (at least 10 calls, at most 200000), timing every call with
 * CLOCK_MONOTONIC. Prints one JSON line: {"median_ns": ..., "min_ns": ..., "iters": ...} and
 * writes the outputs of the last call.
 *
 * THREADS > 1 registers a parallel-for hook (<name>_set_parallel_for) backed by a small pool of
 * THREADS - 1 pthreads plus the calling thread; THREADS = 1 registers nothing (the library runs
 * single-threaded, as it does for every app that registers no hook).
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "xla_aot_runtime.h"

#define CAT2(a, b) a##b
#define CAT(a, b) CAT2(a, b)
#define RUN_PTRS CAT(MODEL, _run_ptrs)
#define SET_PARALLEL_FOR CAT(MODEL, _set_parallel_for)

int RUN_PTRS(void *arena, const void *const *inputs, void *const *outputs);
void SET_PARALLEL_FOR(XlaAotParallelFor hook, void *hook_ctx, uint32_t threads);

#define MAX_TENSORS 64
#if defined(__x86_64__)
#define CPU_RELAX() __builtin_ia32_pause()
#else
#define CPU_RELAX() ((void)0)
#endif
#define MAX_THREADS 64

/* ---- a minimal pool: workers spin on a generation counter, tasks are claimed atomically ---- */
static struct {
    int nthreads;
    _Atomic unsigned generation;
    _Atomic unsigned next, done;
    unsigned n;
    void (*task)(void *, uint32_t);
    void *task_ctx;
} pool;

static void drain(void) {
    unsigned i;
    while ((i = atomic_fetch_add(&pool.next, 1)) < pool.n) {
        pool.task(pool.task_ctx, i);
        atomic_fetch_add(&pool.done, 1);
    }
}

static void *worker(void *arg) {
    (void)arg;
    unsigned seen = 0;
    for (;;) {
        unsigned g;
        while ((g = atomic_load(&pool.generation)) == seen) {
            CPU_RELAX();
        }
        seen = g;
        drain();
    }
    return NULL;
}

static void parallel_for(void *ctx, uint32_t n, void (*task)(void *, uint32_t), void *task_ctx) {
    (void)ctx;
    pool.n = n;
    pool.task = task;
    pool.task_ctx = task_ctx;
    atomic_store(&pool.done, 0);
    atomic_store(&pool.next, 0);
    atomic_fetch_add(&pool.generation, 1);
    drain();
    while (atomic_load(&pool.done) < n) {
        CPU_RELAX();
    }
}

static double now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    if (argc < 6) { fprintf(stderr, "usage: see bench/harness.c\n"); return 2; }
    int threads = atoi(argv[1]);
    double seconds = atof(argv[2]);
    size_t arena_size = strtoull(argv[3], NULL, 10);
    int nin = atoi(argv[4]), nout = atoi(argv[5]);
    if (threads < 1 || threads > MAX_THREADS || nin > MAX_TENSORS || nout > MAX_TENSORS ||
        argc != 6 + 2 * (nin + nout)) {
        fprintf(stderr, "usage: see bench/harness.c\n");
        return 2;
    }
    const void *inputs[MAX_TENSORS];
    void *outputs[MAX_TENSORS];
    size_t out_bytes[MAX_TENSORS];
    for (int i = 0; i < nin; i++) {
        size_t n = strtoull(argv[7 + 2 * i], NULL, 10);
        void *buf = aligned_alloc(64, (n + 63) / 64 * 64 + 64);
        FILE *f = fopen(argv[6 + 2 * i], "rb");
        if (!buf || !f || fread(buf, 1, n, f) != n) { fprintf(stderr, "cannot read %s\n", argv[6 + 2 * i]); return 2; }
        fclose(f);
        inputs[i] = buf;
    }
    for (int i = 0; i < nout; i++) {
        out_bytes[i] = strtoull(argv[7 + 2 * (nin + i)], NULL, 10);
        outputs[i] = aligned_alloc(64, (out_bytes[i] + 63) / 64 * 64 + 64);
    }
    void *arena = aligned_alloc(64, arena_size / 64 * 64 + 64);
    if (threads > 1) {
        pool.nthreads = threads;
        for (int t = 1; t < threads; t++) {
            pthread_t th;
            if (pthread_create(&th, NULL, worker, NULL)) { perror("pthread_create"); return 2; }
        }
        SET_PARALLEL_FOR(parallel_for, NULL, (uint32_t)threads);
    }
    for (int i = 0; i < 10; i++) {
        int s = RUN_PTRS(arena, inputs, (void *const *)outputs);
        if (s != 0) { fprintf(stderr, "run failed with status %d\n", s); return 3; }
    }
    enum { MAX_ITERS = 200000 };
    static double t[MAX_ITERS];
    int iters = 0;
    double start = now_ns();
    while (iters < MAX_ITERS && (iters < 10 || now_ns() - start < seconds * 1e9)) {
        double a = now_ns();
        RUN_PTRS(arena, inputs, (void *const *)outputs);
        t[iters++] = now_ns() - a;
    }
    qsort(t, (size_t)iters, sizeof t[0], cmp);
    printf("{\"median_ns\": %.0f, \"min_ns\": %.0f, \"iters\": %d}\n", t[iters / 2], t[0], iters);
    for (int i = 0; i < nout; i++) {
        FILE *f = fopen(argv[6 + 2 * (nin + i)], "wb");
        if (!f || fwrite(outputs[i], 1, out_bytes[i], f) != out_bytes[i]) { fprintf(stderr, "cannot write\n"); return 2; }
        fclose(f);
    }
    return 0;
}
