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
 * last line is `status <code>`. The library itself needs nothing from the C library: stdio is
 * only for talking to you.
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define CAT2(a, b) a##b
#define CAT(a, b) CAT2(a, b)

int CAT(MODEL, _run_ptrs)(void *arena, const void *const *inputs, void *const *outputs);

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
        for (uint32_t k = 0; k < in_sizes[i]; k++)
            p[k] = (float)((int)((k * 7u + i * 13u) % 17u) - 8) / 8.0f;
        inputs[i] = p;
        p += in_sizes[i];
    }
    for (unsigned i = 0; i < N_OUT; i++) {
        outputs[i] = p;
        p += out_sizes[i];
    }
    int status = CAT(MODEL, _run_ptrs)(arena, inputs, outputs);
    for (unsigned i = 0; i < N_OUT; i++) {
        const float *o = outputs[i];
        printf("out%u:", i);
        for (uint32_t k = 0; k < out_sizes[i]; k++) {
            uint32_t bits;
            memcpy(&bits, &o[k], 4);
            printf(" %08lx", (unsigned long)bits);
        }
        printf("\n");
    }
    printf("status %d\n", status);
    return status == 0 ? 0 : 2;
}
