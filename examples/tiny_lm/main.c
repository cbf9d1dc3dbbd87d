/* tiny_lm: an autoregressive decoding loop around a compiled language model step.
 *
 * Each step feeds the last token, its position (as a one-hot row and an additive causal mask) and
 * the KV caches to tiny_lm_run, which returns the sampled next token and the caches with this
 * position written in. Sampling (temperature, top-k, top-p) happens inside the library, with
 * Philox keyed by --seed and counted by the step: the same seed prints the same tokens on every
 * target.
 *
 *   tiny_lm [--tokens N] [--temperature T] [--top-k K] [--top-p P] [--seed S] [--no-timing]
 *
 * Prints `tokens: <ids>` and `time per token: <us> us` (after the first token, which warms the
 * caches). Exit status 1 on a bad argument or a failed run.
 */
#define _POSIX_C_SOURCE 199309L /* clock_gettime */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tiny_lm.h"

#define MAX_SEQ 64 /* the position dimension the model was compiled with */
#define CACHE TINY_LM_INPUT_K0_SIZE

static _Alignas(TINY_LM_ARENA_ALIGN) unsigned char arena[TINY_LM_ARENA_SIZE + 1];
static float cache[2][4][CACHE]; /* [in/out][k0, v0, k1, v1] */

static double now_us(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

static int parse_num(const char *s, double lo, double hi, double *out) {
    char *end;
    double v = strtod(s, &end);
    if (*s == '\0' || *end != '\0' || v < lo || v > hi) return 0;
    *out = v;
    return 1;
}

int main(int argc, char **argv) {
    double tokens = MAX_SEQ, temperature = 0.8, top_k = 20, top_p = 0.95, seed = 1;
    int timing = 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        double *dst = NULL, lo = 0, hi = 0;
        if (!strcmp(a, "--no-timing")) { timing = 0; continue; }
        if (!strcmp(a, "--tokens")) { dst = &tokens; lo = 1; hi = MAX_SEQ; }
        else if (!strcmp(a, "--temperature")) { dst = &temperature; lo = 0; hi = 100; }
        else if (!strcmp(a, "--top-k")) { dst = &top_k; lo = 0; hi = 1 << 30; }
        else if (!strcmp(a, "--top-p")) { dst = &top_p; lo = 0; hi = 1; }
        else if (!strcmp(a, "--seed")) { dst = &seed; lo = -2147483648.0; hi = 2147483647.0; }
        if (!dst || i + 1 >= argc || !parse_num(argv[i + 1], lo, hi, dst)) {
            fprintf(stderr,
                    "usage: tiny_lm [--tokens 1..%d] [--temperature T>=0] [--top-k K>=0] "
                    "[--top-p 0..1] [--seed S] [--no-timing]\n(bad or missing value for %s)\n",
                    MAX_SEQ, a);
            return 1;
        }
        i++;
    }
    int32_t token = 0; /* token 0 starts the sequence */
    const int32_t seed_i = (int32_t)seed, top_k_i = (int32_t)top_k;
    const float temperature_f = (float)temperature, top_p_f = (float)top_p;
    float onehot[MAX_SEQ], mask[MAX_SEQ];
    int in = 0;
    double total = 0;
    printf("tokens:");
    for (int32_t step = 0; step < (int32_t)tokens; step++) {
        for (int t = 0; t < MAX_SEQ; t++) {
            onehot[t] = t == step ? 1.0f : 0.0f;
            mask[t] = t <= step ? 0.0f : -1e9f;
        }
        int32_t next = -1;
        float *c = &cache[in][0][0], *o = &cache[1 - in][0][0];
        double t0 = now_us();
        int status = tiny_lm_run(arena, &token, onehot, mask, c, c + CACHE, c + 2 * CACHE,
                                 c + 3 * CACHE, &seed_i, &step, &temperature_f, &top_k_i, &top_p_f,
                                 &next, o, o + CACHE, o + 2 * CACHE, o + 3 * CACHE);
        double t1 = now_us();
        if (status != 0) {
            fprintf(stderr, "\ntiny_lm_run failed at step %d: status %d\n", step, status);
            return 1;
        }
        if (step > 0) total += t1 - t0;
        printf(" %d", next);
        token = next;
        in = 1 - in;
    }
    printf("\n");
    if (timing && tokens > 1) printf("time per token: %.1f us\n", total / (tokens - 1));
    return 0;
}
