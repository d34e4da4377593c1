// Host emulation of the CUDA kernels: the march of csrc/march/ run unit by unit, all lanes of a
// unit in lockstep (HostLanes: every exchange is a shuffle, every barrier a barrier), with the
// geometry and the kernel instantiation chosen by the same code as the CUDA launcher. Registered
// as test-only ops; nothing in the product calls them.
#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <vector>

#include "../checks.h"
#include "../march/backward.h"
#include "../march/channel_sum.h"
#include "../march/forward.h"
#include "../march/launch.h"

namespace segnet {
namespace {

// Runs march(group) for every unit, units spread over host threads; make_lane(site) builds the
// state of one lane (what one GPU thread holds).
template <typename acc_t, typename MakeLane, typename March>
void for_each_unit(const MarchGeometry& g, MakeLane&& make_lane, March&& march) {
  const int count = g.unit_warps * kWarpLanes;
  at::parallel_for(0, g.units, 1, [&](int64_t begin, int64_t end) {
    std::vector<acc_t> shared(g.shared_bytes / sizeof(acc_t));
    for (int64_t unit = begin; unit < end; ++unit) {
      using Lane = decltype(make_lane(lane_site(g, unit, 0)));
      std::vector<Lane> lanes;
      lanes.reserve(count);
      for (int t = 0; t < count; ++t) lanes.push_back(make_lane(lane_site(g, unit, t)));
      HostLanes<Lane, acc_t> group{lanes.data(), count, shared.data()};
      march(group, lanes.front().site);
    }
  });
}

at::Tensor emulated_forward(const at::Tensor& x_in, const at::Tensor& alpha_in, double eps) {
  const ForwardCall call(x_in, alpha_in);
  const at::Tensor &x = call.x, &alpha = call.alpha, &y = call.y;
  if (call.empty()) return y;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "emulated_forward", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    const scalar_t* xp = x.const_data_ptr<scalar_t>();
    const scalar_t* ap = alpha.const_data_ptr<scalar_t>();
    scalar_t* yp = y.mutable_data_ptr<scalar_t>();
    with_ndim(x, [&](auto ndim) {
      constexpr int NDIM = decltype(ndim)::value;
      const MarchGeometry g = march_geometry<NDIM, Pass::kForward, scalar_t, acc_t>(x, {x, y});
      with_vector(g.vector, [&](auto vector) {
        using Lane = ForwardLane<NDIM, scalar_t, acc_t, decltype(vector)::value>;
        for_each_unit<acc_t>(
            g,
            [&](const LaneSite& s) {
              return Lane(g, s, xp, yp, static_cast<acc_t>(ap[s.channel]), static_cast<acc_t>(eps));
            },
            [&](auto& group, const LaneSite& s) { forward_march<NDIM>(group, s.begin, s.end); });
      });
    });
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
    const scalar_t* xp = x.const_data_ptr<scalar_t>();
    const scalar_t* gp = gy.const_data_ptr<scalar_t>();
    const scalar_t* ap = alpha.const_data_ptr<scalar_t>();
    scalar_t* gxp = gx.mutable_data_ptr<scalar_t>();
    with_ndim(x, [&](auto ndim) {
      constexpr int NDIM = decltype(ndim)::value;
      const MarchGeometry g = march_geometry<NDIM, Pass::kBackward, scalar_t, acc_t>(x, {x, gy, gx});
      std::vector<acc_t> partials(g.planes * g.warps_per_plane());
      with_vector(g.vector, [&](auto vector) {
        using Lane = BackwardLane<NDIM, scalar_t, acc_t, decltype(vector)::value>;
        for_each_unit<acc_t>(
            g,
            [&](const LaneSite& s) {
              return Lane(g, s, gp, xp, gxp, static_cast<acc_t>(ap[s.channel]), static_cast<acc_t>(eps));
            },
            [&](auto& group, const LaneSite& s) {
              backward_march<NDIM>(group, s.begin, s.end, g.outer, g.middle, g.unit_warps, partials.data());
            });
      });
      // Second pass: one block per channel, its threads and tree reduction emulated in order.
      const int64_t per_channel = int64_t(partials.size()) / g.channels;
      scalar_t* gap = grad_alpha.mutable_data_ptr<scalar_t>();
      std::vector<acc_t> smem(kSumThreads);
      for (int64_t c = 0; c < g.channels; ++c) {
        for (int t = 0; t < kSumThreads; ++t) channel_sum_load(c, t, smem.data(), partials.data(), per_channel);
        for (int stride = kSumThreads / 2; stride > 0; stride /= 2) {
          for (int t = 0; t < kSumThreads; ++t) reduce_step(t, stride, smem.data());
        }
        channel_sum_store(c, 0, smem.data(), gap);
      }
    });
  });
  return call.result();
}

}  // namespace
}  // namespace segnet

// Test-only: the CUDA kernels' march, emulated on the CPU (tests/test_cuda_emulation.py).
TORCH_LIBRARY_FRAGMENT(segnet_ops, m) {
  m.def("_emulated_cuda_edge_enhance(Tensor x, Tensor alpha, float eps=1e-06) -> Tensor");
  m.def("_emulated_cuda_edge_enhance_backward(Tensor grad_y, Tensor x, Tensor alpha, float eps) -> (Tensor, Tensor)");
}

TORCH_LIBRARY_IMPL(segnet_ops, CPU, m) {
  m.impl("_emulated_cuda_edge_enhance", &segnet::emulated_forward);
  m.impl("_emulated_cuda_edge_enhance_backward", &segnet::emulated_backward);
}
