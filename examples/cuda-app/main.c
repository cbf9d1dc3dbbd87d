/*
 * Runs simplenet on an NVIDIA GPU through the library's CUDA launcher, and on the CPU.
 *
 *   make TARGET=jetson-orin     (or cuda-x86_64; see the Makefile)
 *
 * The library loads the driver itself (dlopen("libcuda.so.1")): the app links with -ldl and
 * nothing from a CUDA SDK. Without a driver or a GPU it says so and runs on the CPU alone; with
 * one it runs both and compares them. Exit status 1 when the GPU's result differs from the CPU's.
 */
#include <math.h>
#include <stdio.h>

#include "simplenet.h"

static _Alignas(SIMPLENET_ARENA_ALIGN) unsigned char arena[SIMPLENET_ARENA_SIZE > 0 ? SIMPLENET_ARENA_SIZE : 1];
static float x[SIMPLENET_INPUT_X_SIZE];
static float y_cpu[SIMPLENET_OUTPUT_Y_SIZE];
static float y_gpu[SIMPLENET_OUTPUT_Y_SIZE];
static simplenet_cuda_ctx cuda; /* caller-owned launcher state: no malloc */

/* |a - b| bound: the GPU sums each output's 27 products in the same order as the interpreter, the
 * CPU in register tiles; both are f32, so a few ulps of the largest term. */
#define TOLERANCE 1e-4f

int main(void) {
    for (int i = 0; i < SIMPLENET_INPUT_X_SIZE; i++) x[i] = (float)(i % 17 - 8) / 8.0f;

    int status = simplenet_run(arena, x, y_cpu);
    if (status != XLA_AOT_STATUS_OK) {
        fprintf(stderr, "simplenet_run failed with status %d\n", status);
        return 1;
    }
    printf("CPU: y[0..4] = %.6f %.6f %.6f %.6f\n", y_cpu[0], y_cpu[1], y_cpu[2], y_cpu[3]);

    status = simplenet_cuda_init(&cuda, 0, 0);
    if (status != XLA_AOT_STATUS_OK) {
        /* NO_CUDA_DRIVER: no libcuda.so.1 (or too old); CUDA_ERROR: the driver's error name. */
        printf("GPU: not used: %s (status %d); the CPU result stands\n", simplenet_cuda_error_name(&cuda), status);
        simplenet_cuda_destroy(&cuda);
        return 0;
    }
    const void *inputs[] = {x};
    void *outputs[] = {y_gpu};
    status = simplenet_cuda_run(&cuda, NULL, inputs, outputs);
    if (status != XLA_AOT_STATUS_OK) {
        printf("GPU: run failed: %s (status %d)\n", simplenet_cuda_error_name(&cuda), status);
        simplenet_cuda_destroy(&cuda);
        return 1;
    }
    simplenet_cuda_destroy(&cuda);
    float worst = 0.0f;
    for (int i = 0; i < SIMPLENET_OUTPUT_Y_SIZE; i++) {
        float d = fabsf(y_gpu[i] - y_cpu[i]) / (1.0f + fabsf(y_cpu[i]));
        worst = d > worst ? d : worst;
    }
    printf("GPU (%s PTX): y[0..4] = %.6f %.6f %.6f %.6f; largest difference from the CPU %.3g\n", SIMPLENET_CUDA_SM,
           y_gpu[0], y_gpu[1], y_gpu[2], y_gpu[3], worst);
    return worst <= TOLERANCE ? 0 : 1;
}
