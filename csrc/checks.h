// Argument checks shared by every device's kernels, so that each backend rejects bad input
// with the same message (ops/checks.py words them alike for the python backend and the fake
// kernels that torch.compile traces with).
#pragma once

#include <ATen/ATen.h>

#include <cmath>

namespace segnet {

// eps keeps the magnitude's square root away from 0 on flat regions (docs/edge-op.md): 0, a
// negative or a non-finite eps would give inf or NaN gradients there.
inline void check_eps(double eps) {
  TORCH_CHECK(std::isfinite(eps) && eps > 0, "edge_enhance: eps must be a positive finite number, got ", eps,
              "; the default is 1e-6");
}

inline void check_edge_inputs(const at::Tensor& x, const at::Tensor& alpha, double eps) {
  check_eps(eps);
  TORCH_CHECK(x.dim() == 4 || x.dim() == 5,
              "edge_enhance: x must have shape (N, C, H, W) or (N, C, D, H, W), got ", x.dim(),
              " dimensions with shape ", x.sizes());
  TORCH_CHECK(at::isFloatingType(x.scalar_type()),
              "edge_enhance: x must be a floating tensor (float32, float64, float16, bfloat16), got ",
              x.scalar_type());
  TORCH_CHECK(alpha.dim() == 1 && alpha.size(0) == x.size(1),
              "edge_enhance: alpha must have shape (C,) = (", x.size(1), ",) to match x's channels, got ",
              alpha.sizes());
  TORCH_CHECK(alpha.scalar_type() == x.scalar_type(),
              "edge_enhance: alpha must have the dtype of x (", x.scalar_type(), "), got ",
              alpha.scalar_type(), "; cast it with alpha.to(x.dtype)");
  TORCH_CHECK(alpha.device() == x.device(),
              "edge_enhance: alpha must be on the device of x (", x.device(), "), got ",
              alpha.device());
}

inline void check_edge_backward_inputs(const at::Tensor& grad_y, const at::Tensor& x,
                                       const at::Tensor& alpha, double eps) {
  check_edge_inputs(x, alpha, eps);
  TORCH_CHECK(grad_y.sizes() == x.sizes(), "edge_enhance_backward: grad_y must have the shape of x (",
              x.sizes(), "), got ", grad_y.sizes());
  TORCH_CHECK(grad_y.scalar_type() == x.scalar_type(),
              "edge_enhance_backward: grad_y must have the dtype of x (", x.scalar_type(), "), got ",
              grad_y.scalar_type());
  TORCH_CHECK(grad_y.device() == x.device(),
              "edge_enhance_backward: grad_y must be on the device of x (", x.device(), "), got ",
              grad_y.device());
}

// A forward call's inputs made contiguous and its contiguous output, after the checks.
struct ForwardCall {
  at::Tensor x, alpha, y;
  ForwardCall(const at::Tensor& x_in, const at::Tensor& alpha_in, double eps) {
    check_edge_inputs(x_in, alpha_in, eps);
    x = x_in.contiguous();
    alpha = alpha_in.contiguous();
    y = at::empty_like(x, at::MemoryFormat::Contiguous);
  }
  bool empty() const { return x.numel() == 0; }
};

// A backward call's inputs made contiguous, grad_x allocated and grad_alpha zeroed.
struct BackwardCall {
  at::Tensor grad_y, x, alpha, grad_x, grad_alpha;
  BackwardCall(const at::Tensor& grad_y_in, const at::Tensor& x_in, const at::Tensor& alpha_in, double eps) {
    check_edge_backward_inputs(grad_y_in, x_in, alpha_in, eps);
    grad_y = grad_y_in.contiguous();
    x = x_in.contiguous();
    alpha = alpha_in.contiguous();
    grad_x = at::empty_like(x, at::MemoryFormat::Contiguous);
    grad_alpha = at::zeros_like(alpha);
  }
  bool empty() const { return x.numel() == 0; }
  std::tuple<at::Tensor, at::Tensor> result() const { return {grad_x, grad_alpha}; }
};

// Spatial extent as three axes (D, H, W), with D = 1 for 2D input.
struct Extent {
  int64_t planes;  // N * C
  int64_t channels;
  int size[3];
  int64_t volume() const { return int64_t(size[0]) * size[1] * size[2]; }
};

inline Extent extent_of(const at::Tensor& x) {
  const int ndim = x.dim() - 2;
  Extent e{x.size(0) * x.size(1), x.size(1), {1, 1, 1}};
  for (int a = 0; a < ndim; ++a) {
    TORCH_CHECK(x.size(2 + a) <= std::numeric_limits<int>::max(),
                "edge_enhance: spatial axis ", a, " of x is too long (", x.size(2 + a), ")");
    e.size[3 - ndim + a] = static_cast<int>(x.size(2 + a));
  }
  return e;
}

}  // namespace segnet
