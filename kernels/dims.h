// The softmax dim as torch and NumPy count it, for the C++ bindings
// (torch_op.cc, pybind_module.cc); kernels/dims.py is the Python bindings' twin.
#ifndef KERNELS_DIMS_H_
#define KERNELS_DIMS_H_

#include <cstdint>
#include <string>

namespace warp_softmax {

// `dim` of a tensor of rank `ndim` as an index in [0, max(ndim, 1)): negative
// counts from the end and a 0-d tensor has one dim, as torch.softmax allows.
// Returns -1 when out of range; dim_error() then says so.
inline int64_t normalize_dim(int64_t dim, int64_t ndim) {
  const int64_t n = ndim > 1 ? ndim : 1;
  if (dim < -n || dim >= n) return -1;
  return dim < 0 ? dim + n : dim;
}

// (`dim` as text: a binding's number past int64, as the caller gave it)
inline std::string dim_error(const char* op, const char* word, const std::string& dim, int64_t ndim) {
  return std::string(op) + ": " + word + " " + dim + " is out of range for " +
         std::to_string(ndim) + " dimensions (valid: " + std::to_string(ndim > 1 ? -ndim : -1) +
         " to " + std::to_string(ndim > 1 ? ndim - 1 : 0) + ")";
}

inline std::string dim_error(const char* op, const char* word, int64_t dim, int64_t ndim) {
  return dim_error(op, word, std::to_string(dim), ndim);
}

}  // namespace warp_softmax

#endif  // KERNELS_DIMS_H_
