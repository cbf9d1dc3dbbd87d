/*
 * The aarch64 driver of bench/arm.sh: runs one xla-aot model a given number of times, for
 * counting instructions under qemu-aarch64 with scripts/qemu_insn_count.c.
 *
 *   arm_driver RUNS        (built with the same macros as examples/mcu-app/main.c:
 *                           -include <name>.h -DMODEL=<name> -DARENA_SIZE=... -DARENA_ALIGN=...
 *                           -DIN_SIZES={n0,...} -DOUT_SIZES={m0,...} [-DIO_FLOATS=n]
 *                           [-DIO_INT8])
 *
 * Contract: the inputs are those of examples/mcu-app/main.c (element k of f32 input i is
 * ((k * 7 + i * 13) % 17 - 8) / 8; with -DIO_INT8, for a model whose inputs and outputs are all
 * int8_t, element k of input i is ((k * 7 + i * 13) % 17 - 8) * 15), every buffer is static
 * (fixed addresses in a static, non-PIE executable, so each run executes the same instructions),
 * the model runs RUNS times, and the
 * program prints `checksum <hex>` (an FNV-1a hash of the output bytes of the last run: 4 per
 * element, 1 with -DIO_INT8) and
 * `status <code>` (the first non-zero status, else 0). Exit status 0 on success, 2 on a model
 * error, 3 on a usage error. Nothing else runs between inferences, so the instructions of RUNS
 * = 1 + N less those of RUNS = 1 are N inferences.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define CAT2(a, b) a##b
#define CAT(a, b) CAT2(a, b)

static const uint32_t in_sizes[] = IN_SIZES;
static const uint32_t out_sizes[] = OUT_SIZES;
#define N_IN (sizeof in_sizes / sizeof in_sizes[0])
#define N_OUT (sizeof out_sizes / sizeof out_sizes[0])

#ifndef IO_FLOATS
#define IO_FLOATS (1u << 20)
#endif

static _Alignas(ARENA_ALIGN) unsigned char arena[ARENA_SIZE > 0 ? ARENA_SIZE : 1];
static _Alignas(64) float io[IO_FLOATS];

int main(int argc, char **argv) {
    if (argc != 2 || atoi(argv[1]) < 1) {
        fprintf(stderr, "usage: %s RUNS\n", argv[0]);
        return 3;
    }
    unsigned runs = (unsigned)atoi(argv[1]);
    uint64_t total = 0;
    for (unsigned i = 0; i < N_IN; i++) total += in_sizes[i];
    for (unsigned i = 0; i < N_OUT; i++) total += out_sizes[i];
    if (total > IO_FLOATS) {
        fprintf(stderr, "inputs and outputs need %llu floats; build with -DIO_FLOATS=%llu\n",
                (unsigned long long)total, (unsigned long long)total);
        return 3;
    }
    static const void *inputs[N_IN];
    static void *outputs[N_OUT];
    float *p = io;
    for (unsigned i = 0; i < N_IN; i++) {
#ifdef IO_INT8
        int8_t *q = (int8_t *)p;
        for (uint32_t k = 0; k < in_sizes[i]; k++)
            q[k] = (int8_t)(((int)((k * 7u + i * 13u) % 17u) - 8) * 15);
#else
        for (uint32_t k = 0; k < in_sizes[i]; k++)
            p[k] = (float)((int)((k * 7u + i * 13u) % 17u) - 8) / 8.0f;
#endif
        inputs[i] = p;
        p += in_sizes[i];
    }
    for (unsigned i = 0; i < N_OUT; i++) {
        outputs[i] = p;
        p += out_sizes[i];
    }
    int status = 0;
    for (unsigned r = 0; r < runs; r++) {
        int s = CAT(MODEL, _run_ptrs)(arena, inputs, outputs);
        if (status == 0) status = s;
    }
    uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a offset basis */
    for (unsigned i = 0; i < N_OUT; i++) {
        const unsigned char *b = outputs[i];
#ifdef IO_INT8
        const uint64_t bytes = out_sizes[i];
#else
        const uint64_t bytes = 4ull * out_sizes[i];
#endif
        for (uint64_t k = 0; k < bytes; k++) h = (h ^ b[k]) * 0x100000001b3ull;
    }
    printf("checksum %016llx\nstatus %d\n", (unsigned long long)h, status);
    return status == 0 ? 0 : 2;
}
