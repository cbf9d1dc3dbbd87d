/*
 * Thread-hook harness for a compiled xla-aot model, built with -DMODEL=<name> and linked with
 * lib<name>.a and -lpthread.
 *
 *   parallel THREADS ARENA_SIZE NIN NOUT IN_0 BYTES_0 ... OUT_0 BYTES_0 ...
 *
 * Runs the model single-threaded, then registers a parallel-for hook that runs the tasks of each
 * call on THREADS pthreads (started per call, task i on thread i mod THREADS), runs it again and
 * checks: the outputs are bit-identical, the hook was called, it never got more tasks than
 * THREADS, and every task ran exactly once. Then unregisters the hook and checks a third run is
 * identical and makes no call. Writes the outputs; prints "hook calls: N".
 * Exit status: 0 on success, 2 on a usage or I/O error, 3 on a violated contract.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CAT2(a, b) a##b
#define CAT(a, b) CAT2(a, b)
#define RUN_PTRS CAT(MODEL, _run_ptrs)
#define SET_PARALLEL_FOR CAT(MODEL, _set_parallel_for)

typedef void (*Task)(void *task_ctx, uint32_t i);
typedef void (*ParallelFor)(void *hook_ctx, uint32_t n, Task task, void *task_ctx);
int RUN_PTRS(void *arena, const void *const *inputs, void *const *outputs);
void SET_PARALLEL_FOR(ParallelFor hook, void *hook_ctx, uint32_t threads);

#define MAX_TENSORS 64
#define MAX_THREADS 16
#define MAX_TASKS 1024

struct pool {
    int threads;
    int calls;
    int bad;
};

struct worker {
    uint32_t first, n, step;
    Task task;
    void *task_ctx;
    int *ran;
};

static void *work(void *p) {
    struct worker *w = p;
    for (uint32_t i = w->first; i < w->n; i += w->step) {
        w->task(w->task_ctx, i);
        __atomic_fetch_add(&w->ran[i], 1, __ATOMIC_SEQ_CST);
    }
    return NULL;
}

static void hook(void *ctx, uint32_t n, Task task, void *task_ctx) {
    struct pool *p = ctx;
    p->calls++;
    if (n == 0 || n > (uint32_t)p->threads || n > MAX_TASKS) {
        p->bad = 1;
        return;
    }
    int ran[MAX_TASKS] = {0};
    pthread_t th[MAX_THREADS];
    struct worker w[MAX_THREADS];
    for (int t = 0; t < p->threads; t++) {
        w[t] = (struct worker){(uint32_t)t, n, (uint32_t)p->threads, task, task_ctx, ran};
        if (pthread_create(&th[t], NULL, work, &w[t])) { perror("pthread_create"); exit(2); }
    }
    for (int t = 0; t < p->threads; t++) pthread_join(th[t], NULL);
    for (uint32_t i = 0; i < n; i++) {
        if (ran[i] != 1) p->bad = 1;
    }
}

#define EXPECT(cond, what) do { if (!(cond)) { fprintf(stderr, "contract violated: %s\n", what); return 3; } } while (0)

int main(int argc, char **argv) {
    if (argc < 5) { fprintf(stderr, "usage\n"); return 2; }
    int threads = atoi(argv[1]);
    size_t arena_size = strtoull(argv[2], NULL, 10);
    int nin = atoi(argv[3]), nout = atoi(argv[4]);
    if (threads < 2 || threads > MAX_THREADS || nin > MAX_TENSORS || nout > MAX_TENSORS ||
        argc != 5 + 2 * (nin + nout)) {
        fprintf(stderr, "usage\n");
        return 2;
    }
    const void *inputs[MAX_TENSORS];
    void *one[MAX_TENSORS], *many[MAX_TENSORS];
    size_t bytes[MAX_TENSORS];
    for (int i = 0; i < nin; i++) {
        size_t n = strtoull(argv[6 + 2 * i], NULL, 10);
        void *buf = malloc(n + 1);
        FILE *f = fopen(argv[5 + 2 * i], "rb");
        if (!buf || !f || fread(buf, 1, n, f) != n) { fprintf(stderr, "cannot read input\n"); return 2; }
        fclose(f);
        inputs[i] = buf;
    }
    for (int i = 0; i < nout; i++) {
        bytes[i] = strtoull(argv[6 + 2 * (nin + i)], NULL, 10);
        one[i] = malloc(bytes[i] + 1);
        many[i] = malloc(bytes[i] + 1);
        memset(one[i], 0x11, bytes[i]);
        memset(many[i], 0x22, bytes[i]);
    }
    void *arena = aligned_alloc(64, arena_size / 64 * 64 + 64);
    EXPECT(RUN_PTRS(arena, inputs, (void *const *)one) == 0, "single-threaded run succeeds");
    struct pool p = {threads, 0, 0};
    SET_PARALLEL_FOR(hook, &p, (uint32_t)threads);
    EXPECT(RUN_PTRS(arena, inputs, (void *const *)many) == 0, "run with the hook succeeds");
    EXPECT(p.calls > 0, "the hook is called");
    EXPECT(!p.bad, "at most THREADS tasks per call, each run exactly once");
    for (int i = 0; i < nout; i++) {
        EXPECT(memcmp(one[i], many[i], bytes[i]) == 0, "threads give bit-identical outputs");
    }
    int calls = p.calls;
    SET_PARALLEL_FOR(NULL, NULL, 0);
    memset(many[0], 0x33, bytes[0]);
    EXPECT(RUN_PTRS(arena, inputs, (void *const *)many) == 0, "run after unregistering");
    EXPECT(p.calls == calls, "no hook call after unregistering");
    EXPECT(memcmp(one[0], many[0], bytes[0]) == 0, "identical after unregistering");
    for (int i = 0; i < nout; i++) {
        FILE *f = fopen(argv[5 + 2 * (nin + i)], "wb");
        if (!f || fwrite(many[i], 1, bytes[i], f) != bytes[i]) { fprintf(stderr, "cannot write\n"); return 2; }
        fclose(f);
    }
    printf("hook calls: %d\n", calls);
    return 0;
}
