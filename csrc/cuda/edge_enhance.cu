// CUDA kernels of the edge op: thin __global__ wrappers around the march of csrc/march/, one
// thread per lane (the host emulation, csrc/cpu/emulation.cpp, runs the same march a warp at a time).
#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include <array>
#include <mutex>

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
                   scalar_t* __restrict__ y, acc_t eps_times_norm2) {
  const ThreadPlace at = thread_place(g, blockIdx.x, threadIdx.x);
  if (at.unit >= g.units) return;
  const LaneSite site = lane_site(g, at.unit, at.thread);
  ForwardLane<NDIM, scalar_t, acc_t, VECTOR> lane(g, site, x, y, staging<scalar_t>(g),
                                                 static_cast<acc_t>(alpha[site.channel]), eps_times_norm2);
  DeviceLanes<decltype(lane), acc_t> group{lane, nullptr};
  forward_march<NDIM>(group, site.begin, site.end);
}

template <int NDIM, typename scalar_t, typename acc_t, bool VECTOR>
__global__ void __launch_bounds__(launch_bounds<NDIM, Pass::kBackward, VECTOR>(), 1)
    backward_kernel(MarchGeometry g, const scalar_t* __restrict__ grad_y, const scalar_t* __restrict__ x,
                    const scalar_t* __restrict__ alpha, scalar_t* __restrict__ grad_x, acc_t* __restrict__ partials,
                    acc_t eps_times_norm2) {
  const ThreadPlace at = thread_place(g, blockIdx.x, threadIdx.x);
  if (at.unit >= g.units) return;
  const LaneSite site = lane_site(g, at.unit, at.thread);
  BackwardLane<NDIM, scalar_t, acc_t, VECTOR> lane(g, site, grad_y, x, grad_x, staging<scalar_t>(g),
                                                   static_cast<acc_t>(alpha[site.channel]), eps_times_norm2);
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

// A block of the 3D backward pass stages 88 KB: more than a launch gets without opting in (48 KB),
// within every architecture the library is built for (99 KB on sm_86, sm_89, sm_120). A kernel's
// block needs the same bytes at every launch (they follow from its template arguments), so the
// opt-in is made once per kernel and device, not at every step of a training.
template <auto Kernel>
void allow_shared_memory(size_t bytes) {
  if (bytes <= kDefaultSharedBytes) return;
  static std::array<std::once_flag, C10_COMPILE_TIME_MAX_GPUS> allowed;
  int device = 0;
  C10_CUDA_CHECK(cudaGetDevice(&device));
  std::call_once(allowed[device], [&] {
    int most = 0;
    C10_CUDA_CHECK(cudaDeviceGetAttribute(&most, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
    TORCH_CHECK(bytes <= size_t(most), "edge_enhance: the CUDA kernel needs ", bytes, " bytes of shared memory per ",
                "block, this GPU allows ", most, "; use op.backend=cpp or python on it");
    C10_CUDA_CHECK(cudaFuncSetAttribute(Kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
  });
}

void check_cuda_input(const at::Tensor& x) {
  TORCH_CHECK(x.is_cuda(), "edge_enhance (CUDA kernel): x must be a CUDA tensor, got ", x.device());
}

at::Tensor edge_enhance_cuda(const at::Tensor& x_in, const at::Tensor& alpha_in, double eps) {
  check_cuda_input(x_in);
  const c10::cuda::CUDAGuard guard(x_in.device());
  const ForwardCall call(x_in, alpha_in, eps);  // also checks that alpha is on x's device
  const at::Tensor &x = call.x, &alpha = call.alpha, &y = call.y;
  if (call.empty()) return y;
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "edge_enhance_cuda", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    with_ndim(x, [&](auto ndim) {
      constexpr int NDIM = decltype(ndim)::value;
      const MarchGeometry g = march_geometry<NDIM, Pass::kForward, scalar_t, acc_t>(x, {x, y});
      with_vector(g.vector, [&](auto vector) {
        constexpr auto kernel = forward_kernel<NDIM, scalar_t, acc_t, decltype(vector)::value>;
        allow_shared_memory<kernel>(g.shared_bytes);
        kernel<<<g.blocks, g.threads, g.shared_bytes, stream>>>(
            g, x.const_data_ptr<scalar_t>(), alpha.const_data_ptr<scalar_t>(), y.mutable_data_ptr<scalar_t>(),
            march_eps<acc_t>(NDIM, eps));
        C10_CUDA_KERNEL_LAUNCH_CHECK();
      });
    });
  });
  return y;
}

std::tuple<at::Tensor, at::Tensor> edge_enhance_backward_cuda(const at::Tensor& grad_y_in, const at::Tensor& x_in,
                                                              const at::Tensor& alpha_in, double eps) {
  check_cuda_input(x_in);
  const c10::cuda::CUDAGuard guard(x_in.device());
  const BackwardCall call(grad_y_in, x_in, alpha_in, eps);  // also checks that all tensors share x's device
  const at::Tensor &x = call.x, &gy = call.grad_y, &alpha = call.alpha, &gx = call.grad_x, &grad_alpha = call.grad_alpha;
  if (call.empty()) return call.result();
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "edge_enhance_backward_cuda", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    with_ndim(x, [&](auto ndim) {
      constexpr int NDIM = decltype(ndim)::value;
      const MarchGeometry g = march_geometry<NDIM, Pass::kBackward, scalar_t, acc_t>(x, {x, gy, gx});
      const at::Tensor partials = at::empty({g.planes * g.warps_per_plane()}, x.options().dtype(c10::CppTypeToScalarType<acc_t>::value));
      with_vector(g.vector, [&](auto vector) {
        constexpr auto kernel = backward_kernel<NDIM, scalar_t, acc_t, decltype(vector)::value>;
        allow_shared_memory<kernel>(g.shared_bytes);
        kernel<<<g.blocks, g.threads, g.shared_bytes, stream>>>(
            g, gy.const_data_ptr<scalar_t>(), x.const_data_ptr<scalar_t>(), alpha.const_data_ptr<scalar_t>(),
            gx.mutable_data_ptr<scalar_t>(), partials.mutable_data_ptr<acc_t>(), march_eps<acc_t>(NDIM, eps));
        C10_CUDA_KERNEL_LAUNCH_CHECK();
      });
      channel_sum_kernel<scalar_t, acc_t><<<g.channels, kSumThreads, 0, stream>>>(
          partials.const_data_ptr<acc_t>(), partials.numel() / g.channels, grad_alpha.mutable_data_ptr<scalar_t>());
      C10_CUDA_KERNEL_LAUNCH_CHECK();
    });
  });
  return call.result();
}

}  // namespace
}  // namespace segnet

TORCH_LIBRARY_IMPL(segnet_ops, CUDA, m) {
  m.impl("edge_enhance", &segnet::edge_enhance_cuda);
  m.impl("edge_enhance_backward", &segnet::edge_enhance_backward_cuda);
}
