// Runs simplenet and mlp, compiled by xla-aot through CMake, from C++17.
#include <algorithm>
#include <array>
#include <cstdio>
#include <memory>
#include <numeric>

#include "mlp.h"
#include "simplenet.h"
#include "xla_aot_runtime.h"
#if defined(MLP_MULTI_ISA) && defined(__aarch64__)
#include <sys/auxv.h>
#endif

namespace {

// One arena per model, aligned as the generated header asks.
template <std::size_t Size>
struct alignas(64) Arena {
    unsigned char bytes[Size > 0 ? Size : 1];
};

template <std::size_t N>
void summary(const char *name, const std::array<float, N> &v) {
    auto [lo, hi] = std::minmax_element(v.begin(), v.end());
    double mean = std::accumulate(v.begin(), v.end(), 0.0) / N;
    std::printf("%s: %zu values, min %.6f max %.6f mean %.6f\n", name, N, *lo, *hi, mean);
}

}  // namespace

int main() {
#if defined(MLP_MULTI_ISA) && defined(__aarch64__)
    // aarch64-multi: the library cannot read the CPU's features itself.
    mlp_set_hwcap(getauxval(AT_HWCAP), getauxval(AT_HWCAP2));
#endif
    auto x = std::make_unique<std::array<float, SIMPLENET_INPUT_X_SIZE>>();
    for (std::size_t i = 0; i < x->size(); i++) (*x)[i] = static_cast<float>(static_cast<int>(i % 17) - 8) / 8.0f;
    auto y = std::make_unique<std::array<float, SIMPLENET_OUTPUT_Y_SIZE>>();
    auto a1 = std::make_unique<Arena<SIMPLENET_ARENA_SIZE>>();
    if (simplenet_run(a1->bytes, x->data(), y->data()) != XLA_AOT_STATUS_OK) return 1;
    summary("simplenet y", *y);

    std::array<float, MLP_INPUT_X_SIZE> img{};
    for (std::size_t i = 0; i < img.size(); i++) img[i] = static_cast<float>(i % 28) / 28.0f;
    std::array<float, MLP_OUTPUT_PROBS_SIZE> probs{};
    auto a2 = std::make_unique<Arena<MLP_ARENA_SIZE>>();
    if (mlp_run(a2->bytes, img.data(), probs.data()) != XLA_AOT_STATUS_OK) return 1;
    summary("mlp probs", probs);
    auto best = std::max_element(probs.begin(), probs.end()) - probs.begin();
    std::printf("mlp: class %td (p = %.4f)\n", best, probs[best]);
#ifdef MLP_MULTI_ISA
    std::printf("mlp: ran the %s variant\n", mlp_isa());
#endif
    return 0;
}
