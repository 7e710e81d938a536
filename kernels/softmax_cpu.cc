// CPU softmax entry points (see softmax.h): pick an instruction-set level's
// kernels (softmax_cpu_level.cc) at run time and forward every call to them.
//
// The level is the best the CPU supports, unless WARP_SOFTMAX_ISA names one
// (avx512_bf16, avx512, avx2, baseline), as ATEN_CPU_CAPABILITY does for
// ATen; tests and benchmarks switch it with set_cpu_isa. This file is
// compiled for baseline x86-64: it must run on every CPU to choose.
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/softmax.h"
#include "kernels/softmax_cpu_level.h"

namespace warp_softmax {
namespace cpu {
namespace {

// Best first.
const LevelKernels* const kLevels[] = {&avx512_bf16::kKernels, &avx512::kKernels, &avx2::kKernels,
                                       &baseline::kKernels};

bool cpu_has(const LevelKernels* level) {
  const std::string name = level->name;
  if (name == "avx512_bf16") {
    return __builtin_cpu_supports("avx512bf16") && cpu_has(&avx512::kKernels);
  }
  if (name == "avx512") {
    // x86-64-v4's AVX-512 subsets, which the avx512 build may use.
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl") &&
           __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  }
  if (name == "avx2") {
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
           __builtin_cpu_supports("f16c") && __builtin_cpu_supports("bmi2");
  }
  return true;  // baseline x86-64
}

// The levels' names, best first, those this CPU lacks left out unless `all`.
std::string level_list(bool all) {
  std::string out;
  for (const LevelKernels* level : kLevels) {
    if (all || cpu_has(level)) out += (out.empty() ? "" : ", ") + std::string(level->name);
  }
  return out;
}

std::string supported_list() { return level_list(false); }

// The level named `name`, or an error message.
const LevelKernels* find_level(const std::string& name, std::string* error) {
  for (const LevelKernels* level : kLevels) {
    if (name != level->name) continue;
    if (cpu_has(level)) return level;
    *error = "warp_softmax: this CPU does not support the '" + name + "' kernels; it supports: " +
             supported_list();
    return nullptr;
  }
  *error = "warp_softmax: unknown instruction-set level '" + name + "' (known: " + level_list(true) +
           "; this CPU supports: " + supported_list() + ")";
  return nullptr;
}

// The level in use: chosen on first use, from WARP_SOFTMAX_ISA or the CPU.
std::atomic<const LevelKernels*> current{nullptr};

const LevelKernels& kernels() {
  const LevelKernels* level = current.load(std::memory_order_acquire);
  if (level) return *level;
  const char* forced = std::getenv("WARP_SOFTMAX_ISA");
  if (forced && *forced) {
    std::string error;
    level = find_level(forced, &error);
    if (!level) throw std::runtime_error(error + " (from the environment variable WARP_SOFTMAX_ISA)");
  } else {
    for (const LevelKernels* candidate : kLevels) {
      if (cpu_has(candidate)) {
        level = candidate;
        break;
      }
    }
  }
  current.store(level, std::memory_order_release);
  return *level;
}

}  // namespace

float* scratch(int slot, int64_t n) {
  thread_local std::vector<float> buffers[2];
  if (static_cast<int64_t>(buffers[slot].size()) < n) buffers[slot].resize(n);
  return buffers[slot].data();
}

namespace {

// A sysfs file's first line ("" if unreadable). C stdio, not iostreams: on the lent H200
// machine's host (torch 2.11, the extension built by gpu_check.sh) the first masked CPU
// call died of SIGSEGV inside istream's extraction of a long, in this function.
std::string read_line(const std::string& path) {
  char line[256] = "";
  if (FILE* f = std::fopen(path.c_str(), "r")) {
    if (!std::fgets(line, sizeof line, f)) line[0] = '\0';
    std::fclose(f);
  }
  std::string text(line);
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  return text;
}

// The last-level cache's size and how many CPUs share it, from sysfs: glibc's
// sysconf reported the host's 320 MiB for a VM's 32 MiB here. 0 if unknown.
int64_t llc_share_from_sysfs() {
  int64_t best_level = 0, share = 0;
  for (int index = 0; index < 8; ++index) {
    const std::string dir = "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(index) + "/";
    const std::string level_text = read_line(dir + "level"), size_text = read_line(dir + "size"),
                      shared = read_line(dir + "shared_cpu_list");
    if (level_text.empty() || size_text.empty() || shared.empty()) continue;
    const int64_t level = std::strtoll(level_text.c_str(), nullptr, 10);
    char* unit = nullptr;
    int64_t size = std::strtoll(size_text.c_str(), &unit, 10);  // "32768K"
    size <<= *unit == 'K' ? 10 : *unit == 'M' ? 20 : 0;
    int64_t cpus = 0;  // "0-1,4-5": the sum of the ranges
    for (size_t pos = 0; pos < shared.size();) {
      const size_t comma = std::min(shared.find(',', pos), shared.size());
      const std::string range = shared.substr(pos, comma - pos);
      const size_t dash = range.find('-');
      cpus += dash == std::string::npos ? 1 : std::stol(range.substr(dash + 1)) - std::stol(range) + 1;
      pos = comma + 1;
    }
    if (level > best_level && size > 0 && cpus > 0) {
      best_level = level;
      share = size / cpus;
    }
  }
  return share;
}

}  // namespace

int64_t cache_share() {
  static const int64_t share = [] {
    // Tests set it small to take the streaming path on small tensors.
    if (const char* forced = std::getenv("WARP_SOFTMAX_CACHE_BYTES")) return static_cast<int64_t>(std::atoll(forced));
    const int64_t from_sysfs = llc_share_from_sysfs();
    if (from_sysfs > 0) return from_sysfs;
    const long cache = sysconf(_SC_LEVEL3_CACHE_SIZE), cpus = sysconf(_SC_NPROCESSORS_ONLN);
    return cache > 0 && cpus > 0 ? static_cast<int64_t>(cache / cpus) : int64_t{8} << 20;
  }();
  return share;
}

}  // namespace cpu

void prepare_result(void* p, int64_t bytes) {
  static const bool advise = [] {
    const char* setting = std::getenv("WARP_SOFTMAX_HUGE_PAGES");
    return !(setting && std::string(setting) == "0");
  }();
  constexpr int64_t kHuge = int64_t{1} << 21, kAlwaysMapped = int64_t{32} << 20;
  if (!advise || bytes < kAlwaysMapped) return;
  const uintptr_t start = reinterpret_cast<uintptr_t>(p);
  const uintptr_t begin = (start + kHuge - 1) & ~uintptr_t(kHuge - 1), end = (start + bytes) & ~uintptr_t(kHuge - 1);
  madvise(reinterpret_cast<void*>(begin), end - begin, MADV_HUGEPAGE);
  for (uintptr_t page = begin; page < end; page += kHuge) *reinterpret_cast<volatile char*>(page) = 0;
}

const char* cpu_isa() { return cpu::kernels().name; }

std::string cpu_isas_supported() { return cpu::supported_list(); }

void set_cpu_isa(const std::string& level) {
  std::string error;
  const cpu::LevelKernels* found = cpu::find_level(level, &error);
  if (!found) throw std::invalid_argument(error);
  cpu::current.store(found, std::memory_order_release);
}

// The same, as C functions that every binding's library exports for Python's
// ctypes (kernels/isa.py): one helper serves the torch, NumPy and TF libraries,
// each of which holds its own copy of the choice. Errors come back as text.
extern "C" {
__attribute__((visibility("default"))) const char* warp_softmax_cpu_isa(char* error, int size) {
  try {
    return cpu_isa();
  } catch (const std::exception& e) {
    std::snprintf(error, size, "%s", e.what());
    return nullptr;
  }
}
__attribute__((visibility("default"))) int warp_softmax_set_cpu_isa(const char* level, char* error,
                                                                    int size) {
  try {
    set_cpu_isa(level);
    return 0;
  } catch (const std::exception& e) {
    std::snprintf(error, size, "%s", e.what());
    return 1;
  }
}
__attribute__((visibility("default"))) void warp_softmax_cpu_isas_supported(char* out, int size) {
  std::snprintf(out, size, "%s", cpu_isas_supported().c_str());
}
}

template <>
void forward_cpu<float>(const float* x, float* y, int64_t rows, int64_t cols, bool log) {
  cpu::kernels().forward_f32(x, y, rows, cols, log);
}
template <>
void forward_cpu<double>(const double* x, double* y, int64_t rows, int64_t cols, bool log) {
  cpu::kernels().forward_f64(x, y, rows, cols, log);
}
template <>
void forward_cpu<Half>(const Half* x, Half* y, int64_t rows, int64_t cols, bool log) {
  cpu::kernels().forward_f16(x, y, rows, cols, log);
}
template <>
void forward_cpu<BFloat16>(const BFloat16* x, BFloat16* y, int64_t rows, int64_t cols, bool log) {
  cpu::kernels().forward_bf16(x, y, rows, cols, log);
}

template <>
void forward_masked_cpu<float>(const float* x, const float* mask, const MaskLayout& layout,
                               double scale, float* y, int64_t first_row, int64_t rows, int64_t cols) {
  cpu::kernels().masked_f32(x, mask, layout, scale, y, first_row, rows, cols);
}
template <>
void forward_masked_cpu<double>(const double* x, const double* mask, const MaskLayout& layout,
                                double scale, double* y, int64_t first_row, int64_t rows, int64_t cols) {
  cpu::kernels().masked_f64(x, mask, layout, scale, y, first_row, rows, cols);
}
template <>
void forward_masked_cpu<Half>(const Half* x, const Half* mask, const MaskLayout& layout, double scale,
                              Half* y, int64_t first_row, int64_t rows, int64_t cols) {
  cpu::kernels().masked_f16(x, mask, layout, scale, y, first_row, rows, cols);
}
template <>
void forward_masked_cpu<BFloat16>(const BFloat16* x, const BFloat16* mask, const MaskLayout& layout,
                                  double scale, BFloat16* y, int64_t first_row, int64_t rows,
                                  int64_t cols) {
  cpu::kernels().masked_bf16(x, mask, layout, scale, y, first_row, rows, cols);
}

template <>
void backward_cpu<float>(const float* dy, const float* y, float* dx, int64_t rows, int64_t cols,
                         bool log) {
  cpu::kernels().backward_f32(dy, y, dx, rows, cols, log);
}
template <>
void backward_cpu<double>(const double* dy, const double* y, double* dx, int64_t rows,
                          int64_t cols, bool log) {
  cpu::kernels().backward_f64(dy, y, dx, rows, cols, log);
}
template <>
void backward_cpu<Half>(const Half* dy, const Half* y, Half* dx, int64_t rows, int64_t cols,
                        bool log) {
  cpu::kernels().backward_f16(dy, y, dx, rows, cols, log);
}
template <>
void backward_cpu<BFloat16>(const BFloat16* dy, const BFloat16* y, BFloat16* dx, int64_t rows,
                            int64_t cols, bool log) {
  cpu::kernels().backward_bf16(dy, y, dx, rows, cols, log);
}

}  // namespace warp_softmax
