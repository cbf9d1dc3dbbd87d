/*
 * Test harness for a compiled xla-aot model, built with -DMODEL=<name> and linked with lib<name>.a.
 *
 *   harness ARENA_SIZE NIN NOUT IN_0 BYTES_0 ... OUT_0 BYTES_0 ...
 *
 * Reads each input file, runs the model and writes each output file. Every buffer (arena, inputs,
 * outputs) ends exactly at a PROT_NONE guard page, so a kernel that writes or reads past the end
 * of any buffer faults. Then it checks the C API contract:
 *   - null arena, misaligned arena, null input/output arrays or entries give negative statuses;
 *   - an output overlapping an input, another output or the arena gives -6 (OVERLAP);
 *   - two threads with two arenas give bit-identical outputs.
 * Built with -DMULTI_ISA for a multi-ISA library (x86_64-multi; aarch64-multi, which is first
 * given getauxval(AT_HWCAP) through <name>_set_hwcap): <name>_force_isa refuses an
 * unknown name, and when XLA_AOT_FORCE_ISA is set that variant is forced first (exit status 4
 * when the library refuses it: this CPU cannot run it) and must still be the selected one at the
 * end, after the two threads; the selected variant is printed on stderr as `isa: NAME`. With
 * XLA_AOT_ISA_ONLY set it stops after printing it, running nothing (for CPUs emulated by QEMU,
 * whose AVX masked loads touch the masked-off bytes and so fault on the guard pages).
 * Exit status: 0 on success, 2 on a usage or I/O error, 3 on a contract violation, 4 on a refused
 * XLA_AOT_FORCE_ISA.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define CAT2(a, b) a##b
#define CAT(a, b) CAT2(a, b)
#define RUN_PTRS CAT(MODEL, _run_ptrs)

int RUN_PTRS(void *arena, const void *const *inputs, void *const *outputs);
#ifdef MULTI_ISA
#define ISA CAT(MODEL, _isa)
#define FORCE_ISA CAT(MODEL, _force_isa)
const char *ISA(void);
int FORCE_ISA(const char *isa);
#ifdef __aarch64__
#include <sys/auxv.h>
void CAT(MODEL, _set_hwcap)(uint64_t hwcap, uint64_t hwcap2);
#endif
#endif

/* Inputs and outputs at most; -DMAX_TENSORS=N raises it (tests/quantize.rs' calibration probes
 * return every quantized value). */
#ifndef MAX_TENSORS
#define MAX_TENSORS 64
#endif

/* size bytes that end exactly at an inaccessible page; `align` must divide the page size. */
static void *guarded(size_t size, size_t align) {
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    size_t rounded = (size + align - 1) / align * align;
    size_t span = (rounded + page - 1) / page * page;
    uint8_t *base = mmap(NULL, span + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (base == MAP_FAILED) { perror("mmap"); exit(2); }
    if (mprotect(base + span, page, PROT_NONE) != 0) { perror("mprotect"); exit(2); }
    return base + span - rounded;
}

struct job {
    void *arena;
    const void *const *inputs;
    void **outputs;
    int status;
};

static void *run_job(void *p) {
    struct job *j = p;
    j->status = RUN_PTRS(j->arena, j->inputs, (void *const *)j->outputs);
    return NULL;
}

#define EXPECT(cond, what) do { if (!(cond)) { fprintf(stderr, "contract violated: %s\n", what); return 3; } } while (0)

int main(int argc, char **argv) {
    if (argc < 4) { fprintf(stderr, "usage\n"); return 2; }
    size_t arena_size = strtoull(argv[1], NULL, 10);
    int nin = atoi(argv[2]), nout = atoi(argv[3]);
    if (nin > MAX_TENSORS || nout > MAX_TENSORS || argc != 4 + 2 * (nin + nout)) { fprintf(stderr, "usage\n"); return 2; }
#ifdef MULTI_ISA
#ifdef __aarch64__
    /* What a freestanding library cannot read itself. */
    CAT(MODEL, _set_hwcap)(getauxval(AT_HWCAP), getauxval(AT_HWCAP2));
#endif
    EXPECT(FORCE_ISA("no-such-isa") == -3, "force_isa refuses an unknown name with -3");
    EXPECT(FORCE_ISA("avx") == -3 && FORCE_ISA("avx2x") == -3, "force_isa compares whole names");
    const char *want = getenv("XLA_AOT_FORCE_ISA");
    if (want) {
        if (FORCE_ISA(want) != 0) { fprintf(stderr, "force_isa(%s) refused\n", want); return 4; }
        EXPECT(strcmp(ISA(), want) == 0, "isa() names the forced variant");
    }
    if (getenv("XLA_AOT_ISA_ONLY")) { fprintf(stderr, "isa: %s\n", ISA()); return 0; }
#endif
    const void *inputs[MAX_TENSORS];
    void *outputs[MAX_TENSORS], *outputs2[MAX_TENSORS];
    size_t in_bytes[MAX_TENSORS], out_bytes[MAX_TENSORS];
    for (int i = 0; i < nin; i++) {
        size_t n = strtoull(argv[5 + 2 * i], NULL, 10);
        in_bytes[i] = n;
        uint8_t *buf = guarded(n, 4);
        FILE *f = fopen(argv[4 + 2 * i], "rb");
        if (!f || fread(buf, 1, n, f) != n) { fprintf(stderr, "cannot read %s\n", argv[4 + 2 * i]); return 2; }
        fclose(f);
        inputs[i] = buf;
    }
    for (int i = 0; i < nout; i++) {
        out_bytes[i] = strtoull(argv[5 + 2 * (nin + i)], NULL, 10);
        outputs[i] = guarded(out_bytes[i], 4);
        outputs2[i] = guarded(out_bytes[i], 4);
        memset(outputs[i], 0xff, out_bytes[i]);
        memset(outputs2[i], 0xee, out_bytes[i]);
    }
    void *arena = guarded(arena_size, 64);
    void *arena2 = guarded(arena_size, 64);

    /* Bad arguments: statuses, never a crash. */
    EXPECT(RUN_PTRS(NULL, inputs, (void *const *)outputs) == -1, "null arena gives -1");
    uint8_t *misaligned = (uint8_t *)guarded(arena_size + 64, 64) + 1;
    EXPECT(RUN_PTRS(misaligned, inputs, (void *const *)outputs) == -2, "misaligned arena gives -2");
    EXPECT(RUN_PTRS(arena, NULL, (void *const *)outputs) == -1, "null input array gives -1");
    EXPECT(RUN_PTRS(arena, inputs, NULL) == -1, "null output array gives -1");
    if (nin > 0) {
        const void *saved = inputs[0];
        inputs[0] = NULL;
        EXPECT(RUN_PTRS(arena, inputs, (void *const *)outputs) == -1, "null input gives -1");
        inputs[0] = saved;
    }
    if (nout > 0) {
        void *saved = outputs[0];
        outputs[0] = NULL;
        EXPECT(RUN_PTRS(arena, inputs, (void *const *)outputs) == -1, "null output gives -1");
        outputs[0] = saved;
    }

    /* Overlaps: an output sharing a byte with an input, another output or the arena gives -6
     * before the model touches anything. */
    if (nout > 0 && out_bytes[0] > 0) {
        void *saved = outputs[0];
        for (int i = 0; i < nin; i++) {
            if (in_bytes[i] == 0) continue;
            outputs[0] = (void *)inputs[i];
            EXPECT(RUN_PTRS(arena, inputs, (void *const *)outputs) == -6, "an output on an input gives -6");
            outputs[0] = (uint8_t *)inputs[i] + in_bytes[i] - 1;
            EXPECT(RUN_PTRS(arena, inputs, (void *const *)outputs) == -6, "an output on an input's last byte gives -6");
        }
        if (arena_size > 0) {
            outputs[0] = (uint8_t *)arena + arena_size - 1;
            EXPECT(RUN_PTRS(arena, inputs, (void *const *)outputs) == -6, "an output inside the arena gives -6");
        }
        if (nout > 1 && out_bytes[1] > 0) {
            outputs[0] = outputs[1];
            EXPECT(RUN_PTRS(arena, inputs, (void *const *)outputs) == -6, "two outputs on one buffer give -6");
        }
        outputs[0] = saved;
    }

    /* Two threads, two arenas. */
#ifdef MULTI_ISA
    /* Unforced: back to no selection, so that the two threads race through the first call's
     * detection. */
    if (!want) EXPECT(FORCE_ISA(NULL) == 0, "force_isa(NULL) returns to the automatic choice");
#endif
    struct job a = {arena, inputs, outputs, -100}, b = {arena2, inputs, outputs2, -100};
    pthread_t ta, tb;
    if (pthread_create(&ta, NULL, run_job, &a) || pthread_create(&tb, NULL, run_job, &b)) { perror("pthread"); return 2; }
    pthread_join(ta, NULL);
    pthread_join(tb, NULL);
    EXPECT(a.status == 0 && b.status == 0, "runs succeed");
    for (int i = 0; i < nout; i++) {
        EXPECT(memcmp(outputs[i], outputs2[i], out_bytes[i]) == 0, "two threads give identical outputs");
    }
#ifdef MULTI_ISA
    if (want) EXPECT(strcmp(ISA(), want) == 0, "the forced variant stays selected");
    fprintf(stderr, "isa: %s\n", ISA());
#endif
    for (int i = 0; i < nout; i++) {
        FILE *f = fopen(argv[4 + 2 * (nin + i)], "wb");
        if (!f || fwrite(outputs[i], 1, out_bytes[i], f) != out_bytes[i]) { fprintf(stderr, "cannot write\n"); return 2; }
        fclose(f);
    }
    return 0;
}
