/*
 * Single-core fp32 FMA peak: 16 independent vector FMA chains (enough for 4-cycle latency on 2
 * pipes, twice over), best of 5 runs of ~0.2 s. Prints "<GFLOP/s>". Built by bench/run.py with
 * -mavx512f or -mavx2 -mfma.
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
#else
typedef __m256 vec;
#define LANES 8
#define SET1 _mm256_set1_ps
#define FMA _mm256_fmadd_ps
#define STORE _mm256_storeu_ps
#endif

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

int main(void) {
    vec a[16];
    vec b = SET1(1.0000001f), c = SET1(1e-7f);
    for (int i = 0; i < 16; i++) a[i] = SET1((float)i);
    const long n = 400000000L / (16 * 2 * LANES) * 8;
    double best = 0;
    for (int r = 0; r < 5; r++) {
        double t0 = now();
        for (long k = 0; k < n; k++) {
#pragma GCC unroll 16
            for (int i = 0; i < 16; i++) a[i] = FMA(a[i], b, c);
        }
        double g = (double)n * 16 * 2 * LANES / (now() - t0) / 1e9;
        if (g > best) best = g;
    }
    float sink[LANES], s = 0;
    for (int i = 0; i < 16; i++) {
        STORE(sink, a[i]);
        s += sink[0];
    }
    printf("%.1f %g\n", best, s);
    return 0;
}
