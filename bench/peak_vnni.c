/*
 * Single-core int8 dot-product peak: independent `vpdpbusd` chains (AVX-512 VNNI, 16 i32 lanes ×
 * 4 u8·s8 products each, counted as 128 ops: 64 multiplies and 64 adds), best of 5 runs of
 * ~0.2 s. Prints "<GOP/s>". Built by bench/int8_gemm.py with -mavx512f -mavx512vnni; the chain
 * count follows bench/peak.c (16 chains: latency 4-5 cycles × 2 pipes, all in registers).
 */
#include <immintrin.h>
#include <stdio.h>
#include <time.h>

#define CHAINS 16
#define LANES 16

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

#define DP(x) x = _mm512_dpbusd_epi32(x, b, c)

int main(void) {
    /* Sixteen named accumulators (an array of vectors makes GCC copy and spill them). */
    __m512i a0 = _mm512_set1_epi32(0), a1 = _mm512_set1_epi32(1), a2 = _mm512_set1_epi32(2),
            a3 = _mm512_set1_epi32(3), a4 = _mm512_set1_epi32(4), a5 = _mm512_set1_epi32(5),
            a6 = _mm512_set1_epi32(6), a7 = _mm512_set1_epi32(7), a8 = _mm512_set1_epi32(8),
            a9 = _mm512_set1_epi32(9), a10 = _mm512_set1_epi32(10), a11 = _mm512_set1_epi32(11),
            a12 = _mm512_set1_epi32(12), a13 = _mm512_set1_epi32(13), a14 = _mm512_set1_epi32(14),
            a15 = _mm512_set1_epi32(15);
    __m512i b = _mm512_set1_epi32(0x01020304), c = _mm512_set1_epi32(0x05060708);
    const long n = 400000000L / (CHAINS * 2 * LANES * 4) * 8;
    double best = 0;
    for (int r = 0; r < 5; r++) {
        double t0 = now();
        for (long i = 0; i < n; i++) {
            DP(a0); DP(a1); DP(a2); DP(a3); DP(a4); DP(a5); DP(a6); DP(a7);
            DP(a8); DP(a9); DP(a10); DP(a11); DP(a12); DP(a13); DP(a14); DP(a15);
            __asm__ volatile("" : "+v"(b));
        }
        double dt = now() - t0;
        double ops = (double)n * CHAINS * LANES * 4 * 2;
        if (ops / dt > best) best = ops / dt;
    }
    __m512i s = _mm512_add_epi32(_mm512_add_epi32(_mm512_add_epi32(a0, a1), _mm512_add_epi32(a2, a3)),
                                 _mm512_add_epi32(_mm512_add_epi32(a4, a5), _mm512_add_epi32(a6, a7)));
    s = _mm512_add_epi32(s, _mm512_add_epi32(_mm512_add_epi32(_mm512_add_epi32(a8, a9), _mm512_add_epi32(a10, a11)),
                                             _mm512_add_epi32(_mm512_add_epi32(a12, a13), _mm512_add_epi32(a14, a15))));
    int sink[LANES];
    _mm512_storeu_si512((void *)sink, s);
    fprintf(stderr, "(%d)\n", sink[0]);
    printf("%.1f\n", best / 1e9);
    return 0;
}
