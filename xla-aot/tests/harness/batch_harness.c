/*
 * Batch-bucket harness for a compiled xla-aot model whose declared batch is 1, built with
 * -DMODEL=<name> and linked with lib<name>.a.
 *
 *   batch_harness ARENA_SIZE MAX_BATCH NIN NOUT IN_ITEM_BYTES... OUT_ITEM_BYTES...
 *
 * All inputs are f32. For every n in 1..MAX_BATCH it fills n items of each input with seeded
 * values, runs <name>_run_batch_ptrs(arena, n, ...), and checks every output item against
 * <name>_run_ptrs on that item alone (|a - b| <= 1e-5 * (1 + |b|): the batched kernels may
 * accumulate in another order). Each input ends at a PROT_NONE guard page after exactly n items,
 * so reading item n faults; each output has sentinel bytes after n items, which must survive.
 * Then n = 0, n = MAX_BATCH + 1 and null pointers must give negative statuses.
 * Exit status: 0 on success, 2 on a usage error, 3 on a mismatch or contract violation.
 */
#define _GNU_SOURCE
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define CAT2(a, b) a##b
#define CAT(a, b) CAT2(a, b)
#define RUN_PTRS CAT(MODEL, _run_ptrs)
#define RUN_BATCH CAT(MODEL, _run_batch_ptrs)

int RUN_PTRS(void *arena, const void *const *inputs, void *const *outputs);
int RUN_BATCH(void *arena, int32_t n, const void *const *inputs, void *const *outputs);

#define MAX_TENSORS 32
#define SENTINEL 0xA5

static void *guarded(size_t size) {
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    size_t rounded = (size + 63) / 64 * 64;
    size_t span = (rounded + page - 1) / page * page;
    uint8_t *base = mmap(NULL, span + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (base == MAP_FAILED) { perror("mmap"); exit(2); }
    if (mprotect(base + span, page, PROT_NONE) != 0) { perror("mprotect"); exit(2); }
    /* The buffer ends exactly at the guard page (item sizes are multiples of 4 bytes). */
    return base + span - size;
}

static float value(uint32_t seed) {
    seed = seed * 2654435761u + 12345u;
    seed ^= seed >> 13;
    return (float)((int32_t)(seed % 2001u) - 1000) / 250.0f;
}

int main(int argc, char **argv) {
    if (argc < 5) { fprintf(stderr, "usage: see the comment\n"); return 2; }
    size_t arena_size = strtoul(argv[1], NULL, 10);
    int max_batch = atoi(argv[2]), nin = atoi(argv[3]), nout = atoi(argv[4]);
    if (nin > MAX_TENSORS || nout > MAX_TENSORS || argc != 5 + nin + nout) { fprintf(stderr, "bad arguments\n"); return 2; }
    size_t in_item[MAX_TENSORS], out_item[MAX_TENSORS];
    for (int i = 0; i < nin; i++) in_item[i] = strtoul(argv[5 + i], NULL, 10);
    for (int i = 0; i < nout; i++) out_item[i] = strtoul(argv[5 + nin + i], NULL, 10);
    void *arena = guarded(arena_size ? arena_size : 64);
    arena = (void *)((uintptr_t)arena & ~(uintptr_t)63);
    for (int n = 1; n <= max_batch; n++) {
        const void *ins[MAX_TENSORS];
        void *outs[MAX_TENSORS];
        for (int i = 0; i < nin; i++) {
            float *p = guarded(in_item[i] * n);
            for (size_t k = 0; k < in_item[i] * n / 4; k++) p[k] = value((uint32_t)(k * 31 + i * 7 + n * 1000));
            ins[i] = p;
        }
        for (int j = 0; j < nout; j++) {
            uint8_t *p = malloc(out_item[j] * (n + 1));
            memset(p, SENTINEL, out_item[j] * (n + 1));
            outs[j] = p;
        }
        int s = RUN_BATCH(arena, n, ins, outs);
        if (s != 0) { fprintf(stderr, "n=%d: run_batch returned %d\n", n, s); return 3; }
        for (int j = 0; j < nout; j++) {
            const uint8_t *p = outs[j];
            for (size_t b = out_item[j] * n; b < out_item[j] * (n + 1); b++)
                if (p[b] != SENTINEL) { fprintf(stderr, "n=%d: output %d written past item n\n", n, j); return 3; }
        }
        for (int item = 0; item < n; item++) {
            const void *one_in[MAX_TENSORS];
            void *one_out[MAX_TENSORS];
            for (int i = 0; i < nin; i++) one_in[i] = (const uint8_t *)ins[i] + in_item[i] * item;
            for (int j = 0; j < nout; j++) one_out[j] = malloc(out_item[j]);
            s = RUN_PTRS(arena, one_in, one_out);
            if (s != 0) { fprintf(stderr, "run returned %d\n", s); return 3; }
            for (int j = 0; j < nout; j++) {
                const float *a = (const float *)((const uint8_t *)outs[j] + out_item[j] * item);
                const float *b = one_out[j];
                for (size_t k = 0; k < out_item[j] / 4; k++) {
                    if (!(fabsf(a[k] - b[k]) <= 1e-5f * (1.0f + fabsf(b[k])))) {
                        fprintf(stderr, "n=%d item %d output %d element %zu: batched %g, alone %g\n", n, item, j, k, a[k], b[k]);
                        return 3;
                    }
                }
                free(one_out[j]);
            }
        }
        for (int j = 0; j < nout; j++) free(outs[j]);
    }
    const void *ins[MAX_TENSORS] = {0};
    void *outs[MAX_TENSORS] = {0};
    float dummy[1024];
    for (int i = 0; i < nin; i++) ins[i] = dummy;
    for (int j = 0; j < nout; j++) outs[j] = dummy;
    if (RUN_BATCH(arena, 0, ins, outs) != -3 || RUN_BATCH(arena, max_batch + 1, ins, outs) != -3) {
        fprintf(stderr, "n out of range must give XLA_AOT_STATUS_BAD_ARGUMENT\n");
        return 3;
    }
    if (RUN_BATCH(NULL, 1, ins, outs) != -1 || RUN_BATCH(arena, 1, NULL, outs) != -1) {
        fprintf(stderr, "null pointers must give XLA_AOT_STATUS_NULL_POINTER\n");
        return 3;
    }
    /* Every input and output on one buffer: refused before anything is read or written. */
    if (nout > 0 && out_item[0] > 0 && (nin > 0 || nout > 1) && RUN_BATCH(arena, 1, ins, outs) != -6) {
        fprintf(stderr, "outputs overlapping inputs or outputs must give XLA_AOT_STATUS_OVERLAP\n");
        return 3;
    }
    printf("run_batch matches the items run alone for n = 1..%d\n", max_batch);
    return 0;
}
