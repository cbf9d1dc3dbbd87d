/*
 * Runs one model compiled by xla-aot for a Cortex-M target on a bare-metal board (or QEMU's
 * mps2-an386 / mps3-an547) and prints its outputs over semihosting.
 *
 * The model is chosen at build time (see Makefile and README.md):
 *   -include <name>.h -DMODEL=<name> -DARENA_SIZE=<NAME>_ARENA_SIZE -DARENA_ALIGN=<NAME>_ARENA_ALIGN
 *   -DIN_SIZES={n0,n1,...} -DOUT_SIZES={m0,...}   (element counts of the f32 inputs and outputs)
 *
 * Input element k of input i is ((k * 7 + i * 13) % 17 - 8) / 8, exact in f32, so a host can
 * compute the same inputs (xla-aot/tests/mcu.rs does, for the interpreter). Each output element
 * is printed as the 8 hex digits of its f32 bits, one output per line prefixed `out<i>:`; the
 * last line is `status <code>`, after `stack_high_water <bytes>` (the deepest the stack went from
 * reset through the last inference, measured by start.c's stack painting; -1 when unknown).
 *
 * -DIO_INT8 is for a model whose inputs and outputs are all int8_t (a quantized TFLite model):
 * input element k of input i is then ((k * 7 + i * 13) % 17 - 8) * 15, and each output element is
 * printed as the f32 bits of its integer value, so the same reader parses both.
 *
 * -DREPEAT=<n> (default 1) runs the model n times on the same inputs before printing the outputs
 * (of the last run) and the status (the first non-zero one, else 0): bench/arm.sh counts
 * instructions for 1 and 1 + N runs and divides the difference by N.
 *
 * A library compiled with `--weights external` also needs -DWEIGHTS_BYTES=<NAME>_WEIGHTS_FILE_BYTES
 * -DWEIGHTS_PATH='"/path/<name>.weights"': the blob is read into RAM over semihosting (a product
 * keeps it in flash or external memory), checked once with <name>_check_weights and passed to
 * every run as its first argument; the program first shows that a null blob, a blob with a wrong
 * checksum field and a corrupted one are refused. The library itself needs nothing from the C
 * library: stdio is only for talking to you.
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#ifndef REPEAT
#define REPEAT 1
#endif

/* start.c: the stack's high-water mark in bytes, -1 when unknown. */
extern long mcu_stack_high_water(void);

#define CAT2(a, b) a##b
#define CAT(a, b) CAT2(a, b)

/* The header (-include'd) declares the model's functions. */

static const uint32_t in_sizes[] = IN_SIZES;
static const uint32_t out_sizes[] = OUT_SIZES;
#define N_IN (sizeof in_sizes / sizeof in_sizes[0])
#define N_OUT (sizeof out_sizes / sizeof out_sizes[0])

/* The one arena, in SRAM (.bss): static, aligned, sized at compile time. No malloc anywhere. */
static _Alignas(ARENA_ALIGN) unsigned char arena[ARENA_SIZE > 0 ? ARENA_SIZE : 1];
/* Inputs and outputs, also in SRAM; sized by the largest (IO_FLOATS, default 16384). */
#ifndef IO_FLOATS
#define IO_FLOATS 16384
#endif
static _Alignas(16) float io[IO_FLOATS];

#ifdef WEIGHTS_BYTES
static _Alignas(64) unsigned char weights[WEIGHTS_BYTES];
#define RUN_PTRS(inputs, outputs) CAT(MODEL, _run_ptrs)(weights, arena, inputs, outputs)

/* Reads the blob and checks it once; returns 0 or the exit code. */
static int load_weights(const void *const *inputs, void *const *outputs) {
    printf("null weights: %d\n", CAT(MODEL, _run_ptrs)(NULL, arena, inputs, outputs));
    FILE *f = fopen(WEIGHTS_PATH, "rb");
    if (!f || fread(weights, 1, sizeof weights, f) != sizeof weights) {
        printf("cannot read %u bytes from %s\n", (unsigned)sizeof weights, WEIGHTS_PATH);
        return 4;
    }
    fclose(f);
    weights[16] ^= 1; /* the checksum field: another compile's blob */
    printf("wrong checksum field: %d\n", RUN_PTRS(inputs, outputs));
    weights[16] ^= 1;
    weights[sizeof weights - 1] ^= 1; /* a corrupted weight */
    printf("corrupted weights: %d\n", CAT(MODEL, _check_weights)(weights));
    weights[sizeof weights - 1] ^= 1;
    int s = CAT(MODEL, _check_weights)(weights);
    printf("check_weights: %d\n", s);
    return s == 0 ? 0 : 5;
}
#else
#define RUN_PTRS(inputs, outputs) CAT(MODEL, _run_ptrs)(arena, inputs, outputs)
#endif

int main(void) {
    uint32_t total = 0;
    for (unsigned i = 0; i < N_IN; i++) total += in_sizes[i];
    for (unsigned i = 0; i < N_OUT; i++) total += out_sizes[i];
    if (total > IO_FLOATS) {
        printf("inputs and outputs need %lu floats; build with -DIO_FLOATS=%lu\n",
               (unsigned long)total, (unsigned long)total);
        return 3;
    }
    const void *inputs[N_IN];
    void *outputs[N_OUT];
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
#ifdef WEIGHTS_BYTES
    int loaded = load_weights(inputs, outputs);
    if (loaded) return loaded;
#endif
    /* Read from memory, not folded: the builds for 1 and for 1 + N runs then differ only in this
     * constant, so their instruction counts differ by exactly N inferences. */
    static volatile unsigned repeat = REPEAT;
    int status = 0;
    for (unsigned r = 0; r < repeat; r++) {
        int s = RUN_PTRS(inputs, outputs);
        if (status == 0) status = s;
    }
    long stack_used = mcu_stack_high_water(); /* before printf's own stack use */
    for (unsigned i = 0; i < N_OUT; i++) {
        printf("out%u:", i);
        for (uint32_t k = 0; k < out_sizes[i]; k++) {
#ifdef IO_INT8
            const float v = (float)((const int8_t *)outputs[i])[k];
#else
            const float v = ((const float *)outputs[i])[k];
#endif
            uint32_t bits;
            memcpy(&bits, &v, 4);
            printf(" %08lx", (unsigned long)bits);
        }
        printf("\n");
    }
    printf("stack_high_water %ld\n", stack_used);
    printf("status %d\n", status);
    return status == 0 ? 0 : 2;
}
