/*
 * Per-call cost of a multi-ISA library's dispatch (issue 21), built with -DMODEL=<name> (and
 * -DMULTI_ISA for an x86_64-multi library) and linked with lib<name>.a. Used by
 * bench/isa_dispatch.py; not a test.
 *
 *   isa_dispatch ARENA_SIZE CALLS ROUNDS IN_BYTES OUT_BYTES
 *
 * Runs the model (one input, one output, zero-filled) CALLS times back to back per round and
 * prints one JSON line: {"ns_per_call": best round's mean, "isa": the selected variant or ""}.
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CAT2(a, b) a##b
#define CAT(a, b) CAT2(a, b)
#define RUN_PTRS CAT(MODEL, _run_ptrs)

int RUN_PTRS(void *arena, const void *const *inputs, void *const *outputs);
#ifdef MULTI_ISA
const char *CAT(MODEL, _isa)(void);
#endif

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e9 + t.tv_nsec;
}

int main(int argc, char **argv) {
    if (argc != 6) { fprintf(stderr, "usage\n"); return 2; }
    size_t arena_size = strtoull(argv[1], NULL, 10);
    long calls = atol(argv[2]), rounds = atol(argv[3]);
    size_t in_bytes = strtoull(argv[4], NULL, 10), out_bytes = strtoull(argv[5], NULL, 10);
    void *arena = aligned_alloc(64, (arena_size + 64) / 64 * 64);
    void *in = aligned_alloc(64, (in_bytes + 64) / 64 * 64);
    void *out = aligned_alloc(64, (out_bytes + 64) / 64 * 64);
    if (!arena || !in || !out) return 2;
    memset(in, 0, in_bytes);
    const void *inputs[1] = {in};
    void *outputs[1] = {out};
    for (int i = 0; i < 1000; i++) {
        if (RUN_PTRS(arena, inputs, outputs) != 0) { fprintf(stderr, "run failed\n"); return 3; }
    }
    double best = 1e300;
    for (long r = 0; r < rounds; r++) {
        double t0 = now();
        for (long i = 0; i < calls; i++) RUN_PTRS(arena, inputs, outputs);
        double t = (now() - t0) / calls;
        if (t < best) best = t;
    }
    const char *isa = "";
#ifdef MULTI_ISA
    isa = CAT(MODEL, _isa)();
#endif
    printf("{\"ns_per_call\": %.3f, \"isa\": \"%s\"}\n", best, isa);
    return 0;
}
