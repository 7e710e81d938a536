// The CUDA online tier's arithmetic (online_softmax.h) run on the CPU in the
// kernel's order: 512 threads striding a row, butterfly merges within each
// warp of 32, then a merge across warps; and the cached tier's, a row split
// into parts (a cluster's blocks), each reduced to (max, sum exp(x - shift)),
// merged in rank order. Rows with -inf runs at the start, in the middle and at
// the end, all but one element masked, fully masked (NaN, as torch), and with
// a NaN, against a float64 softmax.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kernels/online_softmax.h"

namespace {

constexpr int kThreads = 512, kWarp = 32;
int failures = 0;

std::string tier(int parts) { return parts == 0 ? "online" : "cached in " + std::to_string(parts) + " part(s)"; }

// The row's softmax as block_online_forward computes it.
std::vector<float> online_softmax(const std::vector<float>& x) {
  std::vector<float> m(kThreads, -INFINITY), s(kThreads, 0.0f);
  for (int t = 0; t < kThreads; ++t) {
    for (size_t c = t; c < x.size(); c += kThreads) warp_softmax::online::add(x[c], m[t], s[t]);
  }
  for (int offset = kWarp / 2; offset > 0; offset /= 2) {  // __shfl_xor_sync: all lanes at once
    const std::vector<float> m0 = m, s0 = s;
    for (int t = 0; t < kThreads; ++t) warp_softmax::online::merge(m[t], s[t], m0[t ^ offset], s0[t ^ offset]);
  }
  float mm = -INFINITY, ss = 0.0f;
  for (int w = 0; w < kThreads / kWarp; ++w) warp_softmax::online::merge(mm, ss, m[w * kWarp], s[w * kWarp]);
  std::vector<float> y(x.size());
  for (size_t c = 0; c < x.size(); ++c) y[c] = std::exp(x[c] - mm) / ss;
  return y;
}

// The row's softmax as cached_forward computes it over `parts` blocks: each
// block's max (fmaxf across threads drops a NaN, whose sum then carries it),
// its sum of exp(x - shift(max)) (each of 512 threads striding the part, then
// their sums pairwise, as the butterflies add them), and the parts' pairs
// merged in rank order.
std::vector<float> cached_softmax(const std::vector<float>& x, int parts) {
  const size_t chunk = (x.size() + parts - 1) / parts;
  float mm = -INFINITY, ss = 0.0f;
  for (int r = 0; r < parts; ++r) {
    const size_t begin = std::min(x.size(), r * chunk), end = std::min(x.size(), begin + chunk);
    float m = -INFINITY;
    for (size_t c = begin; c < end; ++c) m = std::fmax(m, x[c]);
    std::vector<float> s(kThreads, 0.0f);
    for (int t = 0; t < kThreads; ++t) {
      for (size_t c = begin + t; c < end; c += kThreads) s[t] += std::exp(x[c] - warp_softmax::online::shift(m));
    }
    for (int half = kThreads / 2; half > 0; half /= 2) {
      for (int t = 0; t < half; ++t) s[t] += s[t + half];
    }
    warp_softmax::online::merge(mm, ss, m, s[0]);
  }
  std::vector<float> y(x.size());
  for (size_t c = 0; c < x.size(); ++c) y[c] = std::exp(x[c] - mm) / ss;
  return y;
}

void check(const std::string& name, const std::vector<float>& x, int parts) {
  double m = -INFINITY, s = 0.0;
  bool nan = false;
  for (float v : x) {
    nan |= v != v;
    m = std::fmax(m, v);
  }
  for (float v : x) s += std::exp(v - m);
  const std::vector<float> y = parts == 0 ? online_softmax(x) : cached_softmax(x, parts);
  for (size_t c = 0; c < x.size(); ++c) {
    const double want = (nan || m == -INFINITY) ? NAN : std::exp(x[c] - m) / s;
    // 4 float32 units, scaled by exp's conditioning |x - max| = |log y| + log(sum).
    const double allowed = 4 * 0x1p-23 * want * (1 + std::fabs(std::log(want)) + std::log(s)) + 1e-38;
    const bool ok = want != want ? y[c] != y[c] : (y[c] == want || std::fabs(y[c] - want) <= allowed);
    if (!ok) {
      std::printf("FAIL %s, %s: y[%zu] = %g, want %g\n", name.c_str(), tier(parts).c_str(), c, y[c], want);
      ++failures;
      return;
    }
  }
  std::printf("ok: %s (%zu columns), %s\n", name.c_str(), x.size(), tier(parts).c_str());
}

// Every tier: online (parts 0) and cached in 1, 3 and 8 parts.
void check(const std::string& name, const std::vector<float>& x) {
  for (int parts : {0, 1, 3, 8}) check(name, x, parts);
}

}  // namespace

int main() {
  std::mt19937 gen(0);
  std::normal_distribution<float> dist(0.0f, 3.0f);
  const float inf = std::numeric_limits<float>::infinity();
  for (int cols : {1000, 2048, 5000, 40000}) {
    std::vector<float> base(cols);
    for (float& v : base) v = dist(gen);
    const std::vector<std::pair<std::string, std::function<bool(int)>>> masks = {
        {"first 1024 masked", [](int c) { return c < 1024; }},
        {"middle masked", [cols](int c) { return c > cols / 4 && c < 3 * cols / 4; }},
        {"last half masked", [cols](int c) { return c >= cols / 2; }},
        {"all but the last masked", [cols](int c) { return c < cols - 1; }},
        {"all but the first masked", [](int c) { return c > 0; }},
        {"fully masked", [](int) { return true; }},
    };
    for (const auto& [name, masked] : masks) {
      std::vector<float> x = base;
      for (int c = 0; c < cols; ++c) if (masked(c)) x[c] = -inf;
      check(name, x);
    }
    std::vector<float> x = base;
    for (int c = 0; c < cols / 2; ++c) x[c] = -inf;
    x[cols - 3] = NAN;
    check("masked prefix and a NaN", x);
  }
  if (failures) std::printf("%d failures\n", failures);
  return failures ? 1 : 0;
}
