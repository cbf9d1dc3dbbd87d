/*
 * Runs simplenet (conv 3->16 3x3 + batch_norm + relu) compiled by xla-aot.
 *
 *   app                      runs on a deterministic test pattern and prints a summary
 *   app INPUT.bin OUTPUT.bin reads the raw float32 input, writes the raw float32 output
 *
 * The library needs nothing from the C library; this program uses stdio only to talk to you.
 */
#include <stdio.h>
#include <stdlib.h>

#include "simplenet.h"
#include "xla_aot_runtime.h" /* after the model header on purpose: both orders work */

/* The one arena: static, aligned, sized at compile time. No malloc anywhere. (A fully fused model
 * may need 0 bytes; C has no zero-length arrays, and the pointer must still be non-null.) */
static _Alignas(SIMPLENET_ARENA_ALIGN) unsigned char arena[SIMPLENET_ARENA_SIZE > 0 ? SIMPLENET_ARENA_SIZE : 1];
static float x[SIMPLENET_INPUT_X_SIZE];
static float y[SIMPLENET_OUTPUT_Y_SIZE];

int main(int argc, char **argv) {
    if (argc == 3) {
        FILE *f = fopen(argv[1], "rb");
        if (!f || fread(x, sizeof x, 1, f) != 1) {
            fprintf(stderr, "cannot read %zu bytes from %s\n", sizeof x, argv[1]);
            return 1;
        }
        fclose(f);
    } else {
        for (int i = 0; i < SIMPLENET_INPUT_X_SIZE; i++) {
            x[i] = (float)(i % 17 - 8) / 8.0f;
        }
    }

    int status = simplenet_run(arena, x, y);
    if (status != XLA_AOT_STATUS_OK) {
        fprintf(stderr, "simplenet_run failed with status %d\n", status);
        return 1;
    }

    if (argc == 3) {
        FILE *f = fopen(argv[2], "wb");
        if (!f || fwrite(y, sizeof y, 1, f) != 1) {
            fprintf(stderr, "cannot write %s\n", argv[2]);
            return 1;
        }
        fclose(f);
        return 0;
    }
    float lo = y[0], hi = y[0];
    double sum = 0.0;
    for (int i = 0; i < SIMPLENET_OUTPUT_Y_SIZE; i++) {
        lo = y[i] < lo ? y[i] : lo;
        hi = y[i] > hi ? y[i] : hi;
        sum += y[i];
    }
    static const int shape[] = SIMPLENET_OUTPUT_Y_SHAPE;
    printf("simplenet: y[%d,%d,%d,%d] min %.6f max %.6f mean %.6f\n", shape[0], shape[1], shape[2], shape[3], lo, hi,
           sum / SIMPLENET_OUTPUT_Y_SIZE);
    printf("y[0..4] = %.6f %.6f %.6f %.6f\n", y[0], y[1], y[2], y[3]);
    printf("arena %d bytes (lower bound %d), status %d\n", SIMPLENET_ARENA_SIZE, SIMPLENET_ARENA_LOWER_BOUND, status);
    return 0;
}
