// Argument checks shared by every device's kernels, so that each backend rejects bad input
// with the same message (ops/checks.py words them alike for the python backend and the fake
// kernels that torch.compile traces with).
#pragma once

#include <ATen/ATen.h>

#include <cmath>

namespace segnet {

// eps keeps the magnitude's square root away from 0 on flat regions (docs/edge-op.md): 0, a
// negative or a non-finite eps would give inf or NaN gradients there. `op` names the op in the
// message: edge_enhance or edge_magnitude (the op's magnitude form).
inline void check_eps(double eps, const char* op) {
  TORCH_CHECK(std::isfinite(eps) && eps > 0, op, ": eps must be a positive finite number, got ", eps,
              "; the default is 1e-6");
}

inline void check_edge_x(const at::Tensor& x, double eps, const char* op) {
  check_eps(eps, op);
  TORCH_CHECK(x.dim() == 4 || x.dim() == 5, op, ": x must have shape (N, C, H, W) or (N, C, D, H, W), got ", x.dim(),
              " dimensions with shape ", x.sizes());
  TORCH_CHECK(at::isFloatingType(x.scalar_type()), op,
              ": x must be a floating tensor (float32, float64, float16, bfloat16), got ", x.scalar_type());
}

inline void check_edge_inputs(const at::Tensor& x, const at::Tensor& alpha, double eps) {
  check_edge_x(x, eps, "edge_enhance");
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

// The incoming gradient of a backward op `op`, named `name` there: x's shape, dtype and device.
inline void check_incoming_grad(const at::Tensor& grad, const at::Tensor& x, const char* op, const char* name) {
  TORCH_CHECK(grad.sizes() == x.sizes(), op, ": ", name, " must have the shape of x (", x.sizes(), "), got ",
              grad.sizes());
  TORCH_CHECK(grad.scalar_type() == x.scalar_type(), op, ": ", name, " must have the dtype of x (", x.scalar_type(),
              "), got ", grad.scalar_type());
  TORCH_CHECK(grad.device() == x.device(), op, ": ", name, " must be on the device of x (", x.device(), "), got ",
              grad.device());
}

inline void check_edge_backward_inputs(const at::Tensor& grad_y, const at::Tensor& x,
                                       const at::Tensor& alpha, double eps) {
  check_edge_inputs(x, alpha, eps);
  check_incoming_grad(grad_y, x, "edge_enhance_backward", "grad_y");
}

// The magnitude form's gains: 1 for every channel of x.
inline at::Tensor unit_gains(const at::Tensor& x) { return at::ones({x.size(1)}, x.options()); }

// A forward call's inputs made contiguous and its contiguous output, after the checks. The
// magnitude form runs the op's kernels with unit gains and without the identity term.
struct ForwardCall {
  at::Tensor x, alpha, y;
  ForwardCall(const at::Tensor& x_in, const at::Tensor& alpha_in, double eps) {
    check_edge_inputs(x_in, alpha_in, eps);
    take(x_in, alpha_in);
  }
  static ForwardCall magnitude(const at::Tensor& x_in, double eps) {
    check_edge_x(x_in, eps, "edge_magnitude");
    ForwardCall call;
    call.take(x_in, unit_gains(x_in));
    return call;
  }
  bool empty() const { return x.numel() == 0; }

 private:
  ForwardCall() = default;
  void take(const at::Tensor& x_in, const at::Tensor& alpha_in) {
    x = x_in.contiguous();
    alpha = alpha_in.contiguous();
    y = at::empty_like(x, at::MemoryFormat::Contiguous);
  }
};

// A backward call's inputs made contiguous, grad_x allocated and grad_alpha zeroed.
struct BackwardCall {
  at::Tensor grad_y, x, alpha, grad_x, grad_alpha;
  BackwardCall(const at::Tensor& grad_y_in, const at::Tensor& x_in, const at::Tensor& alpha_in, double eps) {
    check_edge_backward_inputs(grad_y_in, x_in, alpha_in, eps);
    take(grad_y_in, x_in, alpha_in);
  }
  static BackwardCall magnitude(const at::Tensor& grad_m, const at::Tensor& x_in, double eps) {
    check_edge_x(x_in, eps, "edge_magnitude_backward");
    check_incoming_grad(grad_m, x_in, "edge_magnitude_backward", "grad_m");
    BackwardCall call;
    call.take(grad_m, x_in, unit_gains(x_in));
    return call;
  }
  bool empty() const { return x.numel() == 0; }
  std::tuple<at::Tensor, at::Tensor> result() const { return {grad_x, grad_alpha}; }

 private:
  BackwardCall() = default;
  void take(const at::Tensor& grad_y_in, const at::Tensor& x_in, const at::Tensor& alpha_in) {
    grad_y = grad_y_in.contiguous();
    x = x_in.contiguous();
    alpha = alpha_in.contiguous();
    grad_x = at::empty_like(x, at::MemoryFormat::Contiguous);
    grad_alpha = at::zeros_like(alpha);
  }
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
