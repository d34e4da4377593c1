// The op's schemas and its magnitude form's (docs/edge-op.md), declared once; each device's kernels register against them elsewhere.
#include <torch/library.h>

TORCH_LIBRARY(segnet_ops, m) {
  m.def("edge_enhance(Tensor x, Tensor alpha, float eps=1e-06) -> Tensor");
  m.def("edge_enhance_backward(Tensor grad_y, Tensor x, Tensor alpha, float eps) -> (Tensor, Tensor)");
  m.def("edge_magnitude(Tensor x, float eps=1e-06) -> Tensor");
  m.def("edge_magnitude_backward(Tensor grad_m, Tensor x, float eps) -> Tensor");
}
