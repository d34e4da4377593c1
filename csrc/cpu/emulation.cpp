// Host emulation of the CUDA kernels: the phases of csrc/edge_tiles.h run block by block and,
// within a block, thread by thread, with the barrier between phases implied by running each
// phase for every thread before the next. Geometry comes from the same make_geometry() as the
// CUDA launcher. Registered as test-only ops; nothing in the product calls them.
#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <vector>

#include "../checks.h"
#include "../edge_tiles.h"

namespace segnet {
namespace {

template <typename F>
void for_each_thread(F&& phase) {
  for (int t = 0; t < kThreads; ++t) phase(t);
}

template <typename acc_t>
void emulate_tree_reduction(acc_t* values) {
  for (int stride = kThreads / 2; stride > 0; stride /= 2) {
    for_each_thread([&](int t) { reduce_step(t, stride, values); });
  }
}

TileGeometry geometry_for(const at::Tensor& x, Pass pass, size_t opmath_bytes) {
  const Extent e = extent_of(x);
  return make_geometry(x.dim() - 2, e.size, e.planes, e.channels, pass, opmath_bytes);
}

// Runs `block(b, smem)` for every block, blocks spread over host threads.
template <typename acc_t, typename F>
void for_each_block(const TileGeometry& g, F&& block) {
  at::parallel_for(0, g.blocks, 1, [&](int64_t begin, int64_t end) {
    std::vector<acc_t> smem(g.shared_bytes / sizeof(acc_t));
    for (int64_t b = begin; b < end; ++b) block(b, smem.data());
  });
}

at::Tensor emulated_forward(const at::Tensor& x_in, const at::Tensor& alpha_in, double eps) {
  const ForwardCall call(x_in, alpha_in);
  const at::Tensor &x = call.x, &alpha = call.alpha, &y = call.y;
  if (call.empty()) return y;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "emulated_forward", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    const TileGeometry g = geometry_for(x, Pass::kForward, sizeof(acc_t));
    const scalar_t* xp = x.const_data_ptr<scalar_t>();
    const scalar_t* ap = alpha.const_data_ptr<scalar_t>();
    scalar_t* yp = y.mutable_data_ptr<scalar_t>();
    auto run = [&](auto ndim_tag) {
      constexpr int NDIM = decltype(ndim_tag)::value;
      for_each_block<acc_t>(g, [&](int64_t b, acc_t* smem) {
        for_each_thread([&](int t) { load_input_box(g, b, t, smem, xp); });
        for_each_thread([&](int t) { forward_outputs<NDIM>(g, b, t, smem, ap, yp, static_cast<acc_t>(eps)); });
      });
    };
    if (x.dim() == 4) run(std::integral_constant<int, 2>{});
    else run(std::integral_constant<int, 3>{});
  });
  return y;
}

std::tuple<at::Tensor, at::Tensor> emulated_backward(const at::Tensor& grad_y_in, const at::Tensor& x_in,
                                                     const at::Tensor& alpha_in, double eps) {
  const BackwardCall call(grad_y_in, x_in, alpha_in);
  const at::Tensor &x = call.x, &gy = call.grad_y, &alpha = call.alpha, &gx = call.grad_x, &grad_alpha = call.grad_alpha;
  if (call.empty()) return call.result();
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "emulated_backward", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    const TileGeometry g = geometry_for(x, Pass::kBackward, sizeof(acc_t));
    const scalar_t* xp = x.const_data_ptr<scalar_t>();
    const scalar_t* gp = gy.const_data_ptr<scalar_t>();
    const scalar_t* ap = alpha.const_data_ptr<scalar_t>();
    scalar_t* gxp = gx.mutable_data_ptr<scalar_t>();
    std::vector<acc_t> partials(g.blocks);
    auto run = [&](auto ndim_tag) {
      constexpr int NDIM = decltype(ndim_tag)::value;
      for_each_block<acc_t>(g, [&](int64_t b, acc_t* smem) {
        for_each_thread([&](int t) { load_input_box(g, b, t, smem, xp); });
        for_each_thread([&](int t) { backward_adjoint_inputs<NDIM>(g, b, t, smem, gp, ap, static_cast<acc_t>(eps)); });
        for_each_thread([&](int t) { backward_grad_input<NDIM>(g, b, t, smem, gp, gxp); });
        emulate_tree_reduction(BackwardShared<acc_t>(g, smem).partial);
        for_each_thread([&](int t) { store_block_partial(g, b, t, smem, partials.data()); });
      });
    };
    if (x.dim() == 4) run(std::integral_constant<int, 2>{});
    else run(std::integral_constant<int, 3>{});
    // Second pass: one block per channel.
    const int64_t per_channel = g.blocks / g.channels;
    scalar_t* gap = grad_alpha.mutable_data_ptr<scalar_t>();
    std::vector<acc_t> smem(kThreads);
    for (int64_t c = 0; c < g.channels; ++c) {
      for_each_thread([&](int t) { channel_sum_load(c, t, smem.data(), partials.data(), per_channel); });
      emulate_tree_reduction(smem.data());
      for_each_thread([&](int t) { channel_sum_store(c, t, smem.data(), gap); });
    }
  });
  return call.result();
}

}  // namespace
}  // namespace segnet

// Test-only: the CUDA kernels' phases, emulated on the CPU (tests/test_cuda_emulation.py).
TORCH_LIBRARY_FRAGMENT(segnet_ops, m) {
  m.def("_emulated_cuda_edge_enhance(Tensor x, Tensor alpha, float eps=1e-06) -> Tensor");
  m.def("_emulated_cuda_edge_enhance_backward(Tensor grad_y, Tensor x, Tensor alpha, float eps) -> (Tensor, Tensor)");
}

TORCH_LIBRARY_IMPL(segnet_ops, CPU, m) {
  m.impl("_emulated_cuda_edge_enhance", &segnet::emulated_forward);
  m.impl("_emulated_cuda_edge_enhance_backward", &segnet::emulated_backward);
}
