// Host emulation of the CUDA kernels: the launch of csrc/march/ run block by block through the
// kernels' entry, the lanes of a warp in lockstep (HostLanes: every exchange is a shuffle), the
// warps of a unit as fibers that meet at each barrier in changing orders (WarpFibers), the
// device's square roots as the device computes them (device_math.h), with the geometry and the
// kernel instantiation chosen by the same code as the CUDA launcher. Registered as test-only ops;
// nothing in the product calls them.
//
// Optimized lightly: the library builds every file with -O3 (one command), but the emulation runs
// small tests, and at -O1 it compiles in about half the time (it is the library's slowest file).
#pragma GCC optimize("O1")
#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "../checks.h"
#include "../march/backward.h"
#include "../march/channel_sum.h"
#include "../march/forward.h"
#include "../march/entry.h"
#include "../march/launch.h"
#include "warp_fibers.h"

namespace segnet {
namespace {

// The device the emulation splits launches for (split_outer_axis): 132 SMs of 16 resident warps,
// an H200 running the 3D backward pass. Only which segments it exercises depends on it.
constexpr int64_t kEmulatedResidentWarps = 132 * 16;
int64_t emulated_residency(const MarchGeometry& g) { return kEmulatedResidentWarps / g.unit_warps; }

// A barrier of the march that the emulation leaves out, as if it were deleted from the source:
// SEGNET_EMULATION_SKIPS_BARRIER="backward.h:213" names it by file and line. The race test
// (tests/ops/test_emulation_catches_races.py) names each barrier in turn and expects the result to
// change; unset, every barrier is kept.
struct BarrierSite {
  std::string file;  // the file's name, without its folder
  int line = 0;

  bool is(const char* path, int at) const {
    if (file.empty() || at != line) return false;
    const std::string p(path), tail = "/" + file;
    return p == file || (p.size() > tail.size() && p.compare(p.size() - tail.size(), tail.size(), tail) == 0);
  }
};

BarrierSite skipped_barrier() {
  const char* named = std::getenv("SEGNET_EMULATION_SKIPS_BARRIER");
  if (named == nullptr || *named == '\0') return {};
  const std::string site(named);
  const size_t colon = site.rfind(':');
  const bool valid = colon != std::string::npos && colon > 0 && colon + 1 < site.size() &&
                     site.find_first_not_of("0123456789", colon + 1) == std::string::npos;
  TORCH_CHECK(valid, "SEGNET_EMULATION_SKIPS_BARRIER=", site,
              " does not name a barrier: expected file:line, e.g. backward.h:213");
  return {site.substr(0, colon), std::stoi(site.substr(colon + 1))};
}

// The GPU the emulation stands for, SEGNET_EMULATED_ARCH: unset or 9.0, an H200, whose cp.async
// copies land when a wait covers them and whose blocks may have 227 KB of shared memory; 7.5, a
// T4, which has no cp.async (its strips are staged by plain loads that land when issued:
// strip.h) and allows 64 KB, so that the 3D backward pass in float32 and float64 takes the
// general form. The residency stays the H200's (kEmulatedResidentWarps) on both.
struct EmulatedDevice {
  bool plain_copies;
  size_t shared_limit;
};

EmulatedDevice emulated_device() {
  const char* named = std::getenv("SEGNET_EMULATED_ARCH");
  const std::string arch = named == nullptr || *named == '\0' ? "9.0" : named;
  TORCH_CHECK(arch == "9.0" || arch == "7.5", "SEGNET_EMULATED_ARCH=", arch,
              " is not an architecture the emulation knows: expected 9.0 (an H200) or 7.5 (a T4)");
  return arch == "7.5" ? EmulatedDevice{true, 64 * 1024} : EmulatedDevice{false, 227 * 1024};
}

// Runs the launch on the host: every block, every thread of it placed by the kernels' own entry
// (thread_place; threads past the last unit leave), the lanes of each unit built by
// make_lane(site, unit's shared memory) (what one GPU thread holds), then march(group, unit) for
// each warp of the unit as a fiber (WarpFibers). A block's shared memory starts as NaN (all bits
// set). Blocks are spread over host threads.
template <typename acc_t, typename MakeLane, typename March>
void run_launch(const MarchGeometry& g, MakeLane&& make_lane, March&& march) {
  using Lane = decltype(make_lane(lane_site(g, 0, 0), nullptr));
  const BarrierSite skipped = skipped_barrier();
  copies_land_when_issued = emulated_device().plain_copies;
  at::parallel_for(0, g.blocks, 1, [&](int64_t begin, int64_t end) {
    WarpFibers fibers;
    std::vector<uint64_t> block_shared((g.shared_bytes + 7) / 8);  // aligned for any element type
    unsigned char* shared = reinterpret_cast<unsigned char*>(block_shared.data());
    for (int64_t block = begin; block < end; ++block) {
      std::fill(block_shared.begin(), block_shared.end(), ~uint64_t(0));
      std::vector<std::vector<Lane>> units(g.threads / (g.unit_warps * kWarpLanes));
      const int64_t first_unit = thread_place(g, block, 0).unit;
      for (int thread = 0; thread < g.threads; ++thread) {
        const ThreadPlace at = thread_place(g, block, thread);
        if (at.unit >= g.units) continue;  // the kernel's early return
        units[at.unit - first_unit].push_back(
            make_lane(lane_site(g, at.unit, at.thread), unit_shared(g, shared, thread)));
      }
      for (size_t u = 0; u < units.size(); ++u) {
        std::vector<Lane>& lanes = units[u];
        if (lanes.empty()) continue;
        acc_t* rows = reinterpret_cast<acc_t*>(unit_shared(g, shared, int(u) * g.unit_warps * kWarpLanes));
        fibers.run(g.unit_warps, [&](int warp, const std::function<void()>& wait_at_barrier) {
          const auto wait_unless_skipped = [&](const char* file, int line) {
            if (!skipped.is(file, line)) wait_at_barrier();
          };
          HostLanes<Lane, acc_t> group{lanes.data() + warp * kWarpLanes, rows, wait_unless_skipped};
          march(group, first_unit + int64_t(u));
        });
      }
    }
  });
}

// The op (`residual`) or its magnitude form, for a checked call.
at::Tensor emulated_forward(const ForwardCall& call, double eps, bool residual) {
  const at::Tensor &x = call.x, &alpha = call.alpha, &y = call.y;
  if (call.empty()) return y;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "emulated_forward", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    const scalar_t* xp = x.const_data_ptr<scalar_t>();
    const scalar_t* ap = alpha.const_data_ptr<scalar_t>();
    scalar_t* yp = y.mutable_data_ptr<scalar_t>();
    with_ndim(x, [&](auto ndim) {
      constexpr int NDIM = decltype(ndim)::value;
      const MarchGeometry g = march_geometry<NDIM, Pass::kForward, scalar_t, acc_t>(x, {x, y}, emulated_device().shared_limit,
                                                                              emulated_residency);
      with_vector(g.vector, [&](auto vector) {
        using Lane = ForwardLane<NDIM, scalar_t, acc_t, decltype(vector)::value>;
        run_launch<acc_t>(
            g,
            [&](const LaneSite& s, unsigned char* unit) {
              return Lane(g, s, xp, yp, reinterpret_cast<scalar_t*>(unit + g.staging_offset),
                          static_cast<acc_t>(ap[s.channel]), march_eps<acc_t>(NDIM, eps), residual);
            },
            [&](auto& group, int64_t) { forward_march<NDIM>(group, group.lanes[0].site.begin, group.lanes[0].site.end); });
      });
    });
  });
  return y;
}

std::tuple<at::Tensor, at::Tensor> emulated_backward(const BackwardCall& call, double eps, bool residual) {
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
      const MarchGeometry g = march_geometry<NDIM, Pass::kBackward, scalar_t, acc_t>(x, {x, gy, gx}, emulated_device().shared_limit,
                                                                               emulated_residency);
      std::vector<acc_t> partials(g.planes * g.warps_per_plane());
      with_vector(g.vector, [&](auto vector) {
        using Lane = BackwardLane<NDIM, scalar_t, acc_t, decltype(vector)::value>;
        run_launch<acc_t>(
            g,
            [&](const LaneSite& s, unsigned char* unit) {
              return Lane(g, s, gp, xp, gxp, reinterpret_cast<scalar_t*>(unit + g.staging_offset),
                          static_cast<acc_t>(ap[s.channel]), march_eps<acc_t>(NDIM, eps), residual);
            },
            [&](auto& group, int64_t unit) {
              const Lane& first = group.lanes[0];
              backward_march<NDIM>(group, first.site.begin, first.site.end, g.outer, g.unit_warps);
              partials[partial_slot(g, unit, first.site.warp)] = first.grad_alpha_share();
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

at::Tensor emulated_enhance(const at::Tensor& x, const at::Tensor& alpha, double eps) {
  return emulated_forward(ForwardCall(x, alpha, eps), eps, true);
}

std::tuple<at::Tensor, at::Tensor> emulated_enhance_backward(const at::Tensor& grad_y, const at::Tensor& x,
                                                             const at::Tensor& alpha, double eps) {
  return emulated_backward(BackwardCall(grad_y, x, alpha, eps), eps, true);
}

at::Tensor emulated_magnitude(const at::Tensor& x, double eps) {
  return emulated_forward(ForwardCall::magnitude(x, eps), eps, false);
}

at::Tensor emulated_magnitude_backward(const at::Tensor& grad_m, const at::Tensor& x, double eps) {
  return std::get<0>(emulated_backward(BackwardCall::magnitude(grad_m, x, eps), eps, false));
}

// The launch geometry of the kernel for a tensor of `shape` and `dtype` (`aligned`: data that
// allows whole-vector loads) on a device that runs `resident_units` of its units at a time and
// lets a block opt into `shared_limit` bytes of shared memory, for scripts/kernel_model/geometry.py:
// the numbers its model needs, in this order.
std::vector<int64_t> march_launch(at::IntArrayRef shape, at::ScalarType dtype, bool backward, bool aligned,
                                  int64_t resident_units, int64_t shared_limit) {
  TORCH_CHECK(resident_units > 0, "_march_launch: resident_units must be positive, got ", resident_units);
  TORCH_CHECK(shared_limit > 0, "_march_launch: shared_limit must be positive, got ", shared_limit);
  TORCH_CHECK(shape.size() == 4 || shape.size() == 5, "_march_launch: shape must be (N, C, H, W) or (N, C, D, H, W)");
  const at::Tensor meta = at::empty(shape, at::TensorOptions().dtype(dtype).device(at::kMeta));
  std::vector<int64_t> out;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, dtype, "march_launch", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    with_ndim(meta, [&](auto ndim) {
      constexpr int NDIM = decltype(ndim)::value;
      const Extent e = extent_of(meta);
      const auto launch = [&](auto pass) {
        constexpr Pass PASS = decltype(pass)::value;
        constexpr int S = strip_width<NDIM, PASS, scalar_t>();
        MarchGeometry g =
            make_march_geometry(NDIM, e.size, e.planes, e.channels, PASS, S, sizeof(scalar_t), sizeof(acc_t), aligned,
                                size_t(shared_limit));
        split_outer_axis(g, resident_units);
        const int64_t lane_stride = (shared_word(0, 0, 0, 1, S) - shared_word(0, 0, 0, 0, S)) * int64_t(sizeof(acc_t));
        out = {g.outer, g.middle, g.inner, g.strip, g.spans, g.row_lanes, g.rows_per_warp, g.rows_per_unit, g.row_groups,
               g.segment, g.segments, g.extra_planes, g.unit_warps, g.units, g.blocks, g.threads,
               int64_t(g.shared_bytes), lane_stride, int64_t(g.vector)};
      };
      if (backward) launch(std::integral_constant<Pass, Pass::kBackward>{});
      else launch(std::integral_constant<Pass, Pass::kForward>{});
    });
  });
  return out;
}

}  // namespace
}  // namespace segnet

// Test-only: the CUDA kernels' march, emulated on the CPU (tests/ops/test_cuda_emulation.py).
TORCH_LIBRARY_FRAGMENT(segnet_ops, m) {
  m.def("_emulated_cuda_edge_enhance(Tensor x, Tensor alpha, float eps=1e-06) -> Tensor");
  m.def("_emulated_cuda_edge_enhance_backward(Tensor grad_y, Tensor x, Tensor alpha, float eps) -> (Tensor, Tensor)");
  m.def("_emulated_cuda_edge_magnitude(Tensor x, float eps=1e-06) -> Tensor");
  m.def("_emulated_cuda_edge_magnitude_backward(Tensor grad_m, Tensor x, float eps) -> Tensor");
  m.def("_march_launch(int[] shape, ScalarType dtype, bool backward, bool aligned, int resident_units, "
        "int shared_limit) -> int[]", &segnet::march_launch);
}

TORCH_LIBRARY_IMPL(segnet_ops, CPU, m) {
  m.impl("_emulated_cuda_edge_enhance", &segnet::emulated_enhance);
  m.impl("_emulated_cuda_edge_enhance_backward", &segnet::emulated_enhance_backward);
  m.impl("_emulated_cuda_edge_magnitude", &segnet::emulated_magnitude);
  m.impl("_emulated_cuda_edge_magnitude_backward", &segnet::emulated_magnitude_backward);
}
