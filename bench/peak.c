/*
 * Single-core fp32 FMA peak: independent vector FMA chains (16 with AVX-512, 12 with AVX2: at
 * least 4-5 cycles of latency times 2 pipes, and every chain plus the two operands in registers:
 * 16 chains on AVX2's 16 ymm registers spill and measured half the peak), best of 5 runs of
 * ~0.2 s. Prints "<GFLOP/s>". Built by bench/run.py with -mavx512f or -mavx2 -mfma.
 */
#include <immintrin.h>
#include <stdio.h>
#include <time.h>

#if defined(__AVX512F__)
typedef __m512 vec;
#define LANES 16
#define SET1 _mm512_set1_ps
#define FMA _mm512_fmadd_ps
#define STORE _mm512_storeu_ps
#define CHAINS 16
#else
typedef __m256 vec;
#define LANES 8
#define SET1 _mm256_set1_ps
#define FMA _mm256_fmadd_ps
#define STORE _mm256_storeu_ps
#define CHAINS 12
#endif

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

int main(void) {
    vec a[CHAINS];
    vec b = SET1(1.0000001f), c = SET1(1e-7f);
    for (int i = 0; i < CHAINS; i++) a[i] = SET1((float)i);
    const long n = 400000000L / (CHAINS * 2 * LANES) * 8;
    double best = 0;
    for (int r = 0; r < 5; r++) {
        double t0 = now();
        for (long k = 0; k < n; k++) {
#pragma GCC unroll 16
            for (int i = 0; i < CHAINS; i++) a[i] = FMA(a[i], b, c);
        }
        double g = (double)n * CHAINS * 2 * LANES / (now() - t0) / 1e9;
        if (g > best) best = g;
    }
    float sink[LANES], s = 0;
    for (int i = 0; i < CHAINS; i++) {
        STORE(sink, a[i]);
        s += sink[0];
    }
    printf("%.1f %g\n", best, s);
    return 0;
}
