// CUDA kernels of the edge op: thin __global__ wrappers around the march of csrc/march/, one
// thread per lane (the host emulation, csrc/cpu/emulation.cpp, runs the same march a warp at a time).
//
// Call path of each pass, in the order a launch runs it (file: what happens there):
//
//   forward, y = x + alpha m (the magnitude form: alpha = 1, without x)
//     edge_enhance.cu  edge_enhance_cuda: checks (../checks.h), march_geometry (geometry.h: units,
//                      strips, segments; resident_units below), launch of forward_kernel
//     edge_enhance.cu  forward_kernel: thread_place (entry.h), lane_site (geometry.h)
//     forward.h        ForwardLane, on MarchLane (window.h: the lane's rows, ring and window)
//     forward.h        forward_march, over window.h's three steps of a march:
//       window.h         start_ring: the first kRing planes' loads (prefetch.h)
//       window.h         arrive_plane, each plane: MarchLane::arrive (the slot's rows, the next
//                        loads, SobelWindow::middle_pass), the strip ends' exchange (lanes.h),
//                        SobelWindow::inner_pass: the raw derivatives one plane back
//       window.h         march_in_rounds: the loop, kRing steps per iteration, one per ring slot
//     forward.h        ForwardLane::emit, each step: m (device_math.h: fast_sqrt), y (strip.h:
//                      store_strip)
//
//   backward, grad_x and grad_alpha
//     edge_enhance.cu  edge_enhance_backward_cuda: as the forward pass, then backward_kernel and
//                      channel_sum_kernel
//     backward.h       BackwardLane, on MarchLane (window.h)
//     backward.h       backward_march: start_ring, arrive_plane and march_in_rounds (window.h) as
//                      in the forward pass; each step adjoint_inputs (v from the window),
//                      inner_adjoint (along the strip, lanes.h's exchange), in 3D share and
//                      middle_adjoint between two barriers (across rows, through shared memory),
//                      outer_adjoint (along the march: grad_x one plane back, strip.h)
//     edge_enhance.cu  backward_kernel: each warp's grad_alpha share into `partials`
//     edge_enhance.cu  channel_sum_kernel (channel_sum.h): the shares summed per channel
//
// From ../edge_stencil.h the march takes clamp_index (the replicate border) and kernel_norm (the
// normalization it folds into its constants); the rest of its arithmetic is device_math.h's.
#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include <map>
#include <mutex>
#include <utility>

#include "../checks.h"
#include "../march/backward.h"
#include "../march/channel_sum.h"
#include "../march/entry.h"
#include "../march/forward.h"
#include "../march/launch.h"

namespace segnet {
namespace {

// This thread's unit's shared memory (entry.h).
__device__ unsigned char* shared_memory(const MarchGeometry& g) {
  extern __shared__ __align__(16) unsigned char shared_raw[];
  return unit_shared(g, shared_raw, threadIdx.x);
}

template <typename scalar_t>
__device__ scalar_t* staging(const MarchGeometry& g) {
  return reinterpret_cast<scalar_t*>(shared_memory(g) + g.staging_offset);
}

// The thread's place decoded again after the march, from the special registers read anew: the
// compiler cannot reuse the first decoding's divisions, so it keeps none of them alive (in
// registers or on the stack) through the march.
__device__ __forceinline__ ThreadPlace thread_place_again(const MarchGeometry& g) {
  unsigned block, thread;
  asm volatile("mov.u32 %0, %%ctaid.x;" : "=r"(block));
  asm volatile("mov.u32 %0, %%tid.x;" : "=r"(thread));
  return thread_place(g, block, int(thread));
}

template <int NDIM, typename scalar_t, typename acc_t, bool VECTOR>
__global__ void __launch_bounds__(launch_bounds<NDIM, Pass::kForward, VECTOR>(), 1)
    forward_kernel(MarchGeometry g, const scalar_t* __restrict__ x, const scalar_t* __restrict__ alpha,
                   scalar_t* __restrict__ y, acc_t eps_times_norm2, bool residual) {
  const ThreadPlace at = thread_place(g, blockIdx.x, threadIdx.x);
  if (at.unit >= g.units) return;
  const LaneSite site = lane_site(g, at.unit, at.thread);
  ForwardLane<NDIM, scalar_t, acc_t, VECTOR> lane(g, site, x, y, staging<scalar_t>(g),
                                                 static_cast<acc_t>(alpha[site.channel]), eps_times_norm2, residual);
  DeviceLanes<decltype(lane), acc_t> group{lane, nullptr};
  forward_march<NDIM>(group, site.begin, site.end);
}

template <int NDIM, typename scalar_t, typename acc_t, bool VECTOR>
__global__ void __launch_bounds__(launch_bounds<NDIM, Pass::kBackward, VECTOR>(), 1)
    backward_kernel(MarchGeometry g, const scalar_t* __restrict__ grad_y, const scalar_t* __restrict__ x,
                    const scalar_t* __restrict__ alpha, scalar_t* __restrict__ grad_x, acc_t* __restrict__ partials,
                    acc_t eps_times_norm2, bool residual) {
  const ThreadPlace at = thread_place(g, blockIdx.x, threadIdx.x);
  if (at.unit >= g.units) return;
  const LaneSite site = lane_site(g, at.unit, at.thread);
  BackwardLane<NDIM, scalar_t, acc_t, VECTOR> lane(g, site, grad_y, x, grad_x, staging<scalar_t>(g),
                                                   static_cast<acc_t>(alpha[site.channel]), eps_times_norm2, residual);
  DeviceLanes<decltype(lane), acc_t> group{lane, reinterpret_cast<acc_t*>(shared_memory(g))};
  backward_march<NDIM>(group, site.begin, site.end, g.outer, g.unit_warps);
  const ThreadPlace again = thread_place_again(g);
  if (again.thread % kWarpLanes == 0) partials[partial_slot(g, again.unit, again.thread / kWarpLanes)] = lane.grad_alpha_share();
}

template <typename scalar_t, typename acc_t>
__global__ void __launch_bounds__(kSumThreads)
    channel_sum_kernel(const acc_t* __restrict__ partials, int64_t per_channel, scalar_t* __restrict__ grad_alpha) {
  __shared__ acc_t smem[kSumThreads];
  channel_sum_load(blockIdx.x, threadIdx.x, smem, partials, per_channel);
  __syncthreads();
  for (int stride = kSumThreads / 2; stride > 0; stride /= 2) {
    reduce_step(threadIdx.x, stride, smem);
    __syncthreads();
  }
  channel_sum_store(blockIdx.x, threadIdx.x, smem, grad_alpha);
}

// Once per device: the shared memory one block may opt into (64 KB on 7.5, 99 KB on sm_86, sm_89
// and sm_120, up to 227 KB on sm_90), within which the launch's layout is chosen
// (make_march_geometry: the 3D backward pass's 88 KB of float32 staging take the general form on
// a 7.5 GPU).
size_t block_shared_limit() {
  static std::mutex mutex;
  static std::map<int, size_t> known;
  int device = 0;
  C10_CUDA_CHECK(cudaGetDevice(&device));
  const std::lock_guard<std::mutex> lock(mutex);
  const auto found = known.find(device);
  if (found != known.end()) return found->second;
  int most = 0;
  C10_CUDA_CHECK(cudaDeviceGetAttribute(&most, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  known.emplace(device, size_t(most));
  return size_t(most);
}

// Once per kernel and device: the shared-memory opt-in its blocks need (a block of the 3D backward
// pass stages 88 KB, more than the 48 KB a launch gets without one), and how many of its units the
// device runs at a time, from which a launch's segments follow (split_outer_axis). A kernel's
// blocks need the same bytes at every launch (they follow from its template arguments), so neither
// is asked again at each step of a training.
template <typename Kernel>
int64_t resident_units(Kernel* kernel_function, const MarchGeometry& g) {
  const void* kernel = reinterpret_cast<const void*>(kernel_function);
  static std::mutex mutex;
  static std::map<std::pair<const void*, int>, int64_t> known;
  int device = 0;
  C10_CUDA_CHECK(cudaGetDevice(&device));
  const std::lock_guard<std::mutex> lock(mutex);
  const auto found = known.find({kernel, device});
  if (found != known.end()) return found->second;
  if (g.shared_bytes > kDefaultSharedBytes) {
    const size_t most = block_shared_limit();
    TORCH_CHECK(g.shared_bytes <= most, "edge_enhance: the CUDA kernel needs ", g.shared_bytes,
                " bytes of shared memory per block, this GPU allows ", most, "; use op.backend=cpp or python on it");
    C10_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(g.shared_bytes)));
  }
  int blocks_per_sm = 0, sms = 0;
  C10_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks_per_sm, kernel, g.threads, g.shared_bytes));
  C10_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  TORCH_CHECK(blocks_per_sm > 0, "edge_enhance: this GPU cannot run a block of the CUDA kernel (", g.threads,
              " threads, ", g.shared_bytes, " bytes of shared memory); use op.backend=cpp or python on it");
  const int64_t units = int64_t(blocks_per_sm) * sms * (g.threads / (g.unit_warps * kWarpLanes));
  known.emplace(std::make_pair(kernel, device), units);
  return units;
}

// The instantiation for whole-vector loads or the general one (both have the same signature).
template <int NDIM, typename scalar_t, typename acc_t>
auto forward_kernel_for(bool vector) {
  return vector ? forward_kernel<NDIM, scalar_t, acc_t, true> : forward_kernel<NDIM, scalar_t, acc_t, false>;
}
template <int NDIM, typename scalar_t, typename acc_t>
auto backward_kernel_for(bool vector) {
  return vector ? backward_kernel<NDIM, scalar_t, acc_t, true> : backward_kernel<NDIM, scalar_t, acc_t, false>;
}

void check_cuda_input(const at::Tensor& x, const char* op) {
  TORCH_CHECK(x.is_cuda(), op, " (CUDA kernel): x must be a CUDA tensor, got ", x.device());
}

// The op (`residual`) or its magnitude form, for a checked call on x's device.
at::Tensor forward_cuda(const ForwardCall& call, double eps, bool residual) {
  const at::Tensor &x = call.x, &alpha = call.alpha, &y = call.y;
  if (call.empty()) return y;
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "edge_enhance_cuda", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    with_ndim(x, [&](auto ndim) {
      constexpr int NDIM = decltype(ndim)::value;
      const MarchGeometry g = march_geometry<NDIM, Pass::kForward, scalar_t, acc_t>(x, {x, y}, block_shared_limit(), [](const MarchGeometry& layout) {
        return resident_units(forward_kernel_for<NDIM, scalar_t, acc_t>(layout.vector), layout);
      });
      forward_kernel_for<NDIM, scalar_t, acc_t>(g.vector)<<<g.blocks, g.threads, g.shared_bytes, stream>>>(
          g, x.const_data_ptr<scalar_t>(), alpha.const_data_ptr<scalar_t>(), y.mutable_data_ptr<scalar_t>(),
          march_eps<acc_t>(NDIM, eps), residual);
      C10_CUDA_KERNEL_LAUNCH_CHECK();
    });
  });
  return y;
}

std::tuple<at::Tensor, at::Tensor> backward_cuda(const BackwardCall& call, double eps, bool residual) {
  const at::Tensor &x = call.x, &gy = call.grad_y, &alpha = call.alpha, &gx = call.grad_x, &grad_alpha = call.grad_alpha;
  if (call.empty()) return call.result();
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "edge_enhance_backward_cuda", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    with_ndim(x, [&](auto ndim) {
      constexpr int NDIM = decltype(ndim)::value;
      const MarchGeometry g = march_geometry<NDIM, Pass::kBackward, scalar_t, acc_t>(x, {x, gy, gx}, block_shared_limit(), [](const MarchGeometry& layout) {
        return resident_units(backward_kernel_for<NDIM, scalar_t, acc_t>(layout.vector), layout);
      });
      const at::Tensor partials = at::empty({g.planes * g.warps_per_plane()}, x.options().dtype(c10::CppTypeToScalarType<acc_t>::value));
      backward_kernel_for<NDIM, scalar_t, acc_t>(g.vector)<<<g.blocks, g.threads, g.shared_bytes, stream>>>(
          g, gy.const_data_ptr<scalar_t>(), x.const_data_ptr<scalar_t>(), alpha.const_data_ptr<scalar_t>(),
          gx.mutable_data_ptr<scalar_t>(), partials.mutable_data_ptr<acc_t>(), march_eps<acc_t>(NDIM, eps), residual);
      C10_CUDA_KERNEL_LAUNCH_CHECK();
      channel_sum_kernel<scalar_t, acc_t><<<g.channels, kSumThreads, 0, stream>>>(
          partials.const_data_ptr<acc_t>(), partials.numel() / g.channels, grad_alpha.mutable_data_ptr<scalar_t>());
      C10_CUDA_KERNEL_LAUNCH_CHECK();
    });
  });
  return call.result();
}

// The calls check that every tensor is on x's device, under a guard for it.
at::Tensor edge_enhance_cuda(const at::Tensor& x, const at::Tensor& alpha, double eps) {
  check_cuda_input(x, "edge_enhance");
  const c10::cuda::CUDAGuard guard(x.device());
  return forward_cuda(ForwardCall(x, alpha, eps), eps, true);
}

std::tuple<at::Tensor, at::Tensor> edge_enhance_backward_cuda(const at::Tensor& grad_y, const at::Tensor& x,
                                                              const at::Tensor& alpha, double eps) {
  check_cuda_input(x, "edge_enhance_backward");
  const c10::cuda::CUDAGuard guard(x.device());
  return backward_cuda(BackwardCall(grad_y, x, alpha, eps), eps, true);
}

at::Tensor edge_magnitude_cuda(const at::Tensor& x, double eps) {
  check_cuda_input(x, "edge_magnitude");
  const c10::cuda::CUDAGuard guard(x.device());
  return forward_cuda(ForwardCall::magnitude(x, eps), eps, false);
}

at::Tensor edge_magnitude_backward_cuda(const at::Tensor& grad_m, const at::Tensor& x, double eps) {
  check_cuda_input(x, "edge_magnitude_backward");
  const c10::cuda::CUDAGuard guard(x.device());
  return std::get<0>(backward_cuda(BackwardCall::magnitude(grad_m, x, eps), eps, false));
}

}  // namespace
}  // namespace segnet

TORCH_LIBRARY_IMPL(segnet_ops, CUDA, m) {
  m.impl("edge_enhance", &segnet::edge_enhance_cuda);
  m.impl("edge_enhance_backward", &segnet::edge_enhance_backward_cuda);
  m.impl("edge_magnitude", &segnet::edge_magnitude_cuda);
  m.impl("edge_magnitude_backward", &segnet::edge_magnitude_backward_cuda);
}
