// warp_softmax: the kernels, with no framework types (pointers, sizes, a stream).
//
// Every binding (torch_op.cc, pybind_module.cc, tf_op.cc) calls these on
// `rows` contiguous rows of `cols` elements, the softmax dimension last; the
// bindings move any other dimension there first. float32, float16 and
// bfloat16 are computed in float32; float64 in float64 (CPU only).
//
//   forward:   y = softmax(x)             or  log_softmax(x)
//   backward:  dx = y * (dy - sum(dy * y))  or  dy - exp(y) * sum(dy)
//   masked:    y = softmax(x * scale + mask), the attention form, in one pass
//              over x (the sum is formed in float32, or float64 for float64,
//              not rounded to x's format first)
#pragma once

#include <cstdint>
#include <string>
#include <type_traits>

namespace warp_softmax {

// IEEE binary16 and bfloat16 by their bits: the layout of at::Half, Eigen::half,
// __half and of at::BFloat16, Eigen::bfloat16, __nv_bfloat16.
struct Half {
  uint16_t bits;
};
struct BFloat16 {
  uint16_t bits;
};

// A framework's element type T as the kernels' type: its 16-bit float types
// (FrameworkHalf, FrameworkBFloat16, e.g. at::Half or Eigen::half) become Half
// and BFloat16; float and double stay.
template <typename T, typename FrameworkHalf, typename FrameworkBFloat16>
using core_type_t = std::conditional_t<
    std::is_same_v<T, FrameworkHalf>, Half,
    std::conditional_t<std::is_same_v<T, FrameworkBFloat16>, BFloat16, T>>;

// CPU: processes rows [0, rows) on the calling thread; bindings split rows
// across their framework's threads. T is float, double, Half or BFloat16.
// The kernels are built for several x86-64 instruction-set levels
// ("avx512_bf16", "avx512", "avx2", "baseline"); the best the CPU supports
// runs, unless the environment
// variable WARP_SOFTMAX_ISA names another. Bindings call cpu_isa() on their
// own thread first: it throws std::runtime_error for a bad WARP_SOFTMAX_ISA.
template <typename T>
void forward_cpu(const T* x, T* y, int64_t rows, int64_t cols, bool log);
template <typename T>
void backward_cpu(const T* dy, const T* y, T* dx, int64_t rows, int64_t cols, bool log);

// Where the masked forward finds each row's mask: row r of x (counted over the
// whole tensor, row-major) as an index into `sizes` (the last fastest), dotted
// with `strides` (in elements, 0 on the dims the mask is broadcast along),
// is the offset of its mask row, whose `cols` elements are contiguous.
struct MaskLayout {
  static constexpr int kMaxDims = 8;
  int ndim;  // sizes' product is the tensor's row count
  int64_t sizes[kMaxDims];
  int64_t strides[kMaxDims];
};

// softmax(x * scale + mask) over rows [first_row, first_row + rows): x and y
// point at row first_row, mask at the mask's start (null: no mask).
template <typename T>
void forward_masked_cpu(const T* x, const T* mask, const MaskLayout& layout, double scale, T* y,
                        int64_t first_row, int64_t rows, int64_t cols);

// Readies `bytes` at `p`, a CPU result just allocated and not yet written. glibc maps a
// result of 32 MiB or more afresh on each call, and the first write faults in every 4 KiB
// page: 256x32768 float32 took 14.2 ms a call, the kernel a third of it. Such a result's
// whole 2 MiB pages are advised to be transparent huge pages and faulted in here, on the
// calling thread: 6.0-6.8 ms (one thread, Intel Xeon VM: kernels/BENCHMARKS.md). Left to
// the kernels' writes across a binding's threads, 1 call in 10-100 took 40-50 ms with two
// threads (pages freed on one CPU and taken on the other go through the buddy allocator,
// which this VM reports to its host). Smaller results are left alone: glibc reuses their
// memory, and advised there, two threads' mean call at 16 MiB rose 25%. The torch and
// NumPy bindings call it (NumPy advises its arrays itself: the faults are what remains);
// TF's allocator keeps its memory. WARP_SOFTMAX_HUGE_PAGES=0 at the first call turns it
// off (as NUMPY_MADVISE_HUGEPAGE=0 does NumPy's advice).
void prepare_result(void* p, int64_t bytes);

// The level in use, and the levels this CPU supports ("avx512, avx2, baseline"),
// best first.
const char* cpu_isa();
std::string cpu_isas_supported();
// Uses `level`'s kernels from now on (for tests and benchmarks); throws
// std::invalid_argument, naming the supported levels, if the CPU lacks it.
void set_cpu_isa(const std::string& level);

// CUDA (built under --config=cuda, which defines WARP_SOFTMAX_WITH_CUDA):
// launches on `stream` (a cudaStream_t) and returns the cudaError_t of the
// launch. T is float, Half or BFloat16.
template <typename T>
int forward_cuda(const T* x, T* y, int64_t rows, int64_t cols, bool log, void* stream);
template <typename T>
int backward_cuda(const T* dy, const T* y, T* dx, int64_t rows, int64_t cols, bool log,
                  void* stream);
// The message for an error code those return.
const char* cuda_error_string(int error);

}  // namespace warp_softmax
