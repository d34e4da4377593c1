// CUDA kernels of the edge op: thin __global__ wrappers that run the phases of
// csrc/edge_tiles.h with a barrier between them (the host emulation runs the same phases).
#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include "../checks.h"
#include "../edge_tiles.h"

namespace segnet {
namespace {

template <typename acc_t>
__device__ acc_t* shared_memory() {
  extern __shared__ __align__(16) unsigned char shared_raw[];
  return reinterpret_cast<acc_t*>(shared_raw);
}

template <typename acc_t>
__device__ void block_tree_reduction(acc_t* values) {
  for (int stride = kThreads / 2; stride > 0; stride /= 2) {
    reduce_step(threadIdx.x, stride, values);
    __syncthreads();
  }
}

template <int NDIM, typename scalar_t, typename acc_t>
__global__ void __launch_bounds__(kThreads)
    forward_kernel(TileGeometry g, const scalar_t* __restrict__ x, const scalar_t* __restrict__ alpha,
                   scalar_t* __restrict__ y, acc_t eps) {
  acc_t* smem = shared_memory<acc_t>();
  load_input_box(g, blockIdx.x, threadIdx.x, smem, x);
  __syncthreads();
  forward_outputs<NDIM>(g, blockIdx.x, threadIdx.x, smem, alpha, y, eps);
}

template <int NDIM, typename scalar_t, typename acc_t>
__global__ void __launch_bounds__(kThreads)
    backward_kernel(TileGeometry g, const scalar_t* __restrict__ grad_y, const scalar_t* __restrict__ x,
                    const scalar_t* __restrict__ alpha, scalar_t* __restrict__ grad_x, acc_t* __restrict__ partials,
                    acc_t eps) {
  acc_t* smem = shared_memory<acc_t>();
  load_input_box(g, blockIdx.x, threadIdx.x, smem, x);
  __syncthreads();
  backward_adjoint_inputs<NDIM>(g, blockIdx.x, threadIdx.x, smem, grad_y, alpha, eps);
  __syncthreads();
  backward_grad_input<NDIM>(g, blockIdx.x, threadIdx.x, smem, grad_y, grad_x);
  block_tree_reduction(BackwardShared<acc_t>(g, smem).partial);
  store_block_partial(g, blockIdx.x, threadIdx.x, smem, partials);
}

template <typename scalar_t, typename acc_t>
__global__ void __launch_bounds__(kThreads)
    channel_sum_kernel(const acc_t* __restrict__ partials, int64_t per_channel, scalar_t* __restrict__ grad_alpha) {
  __shared__ acc_t smem[kThreads];
  channel_sum_load(blockIdx.x, threadIdx.x, smem, partials, per_channel);
  __syncthreads();
  block_tree_reduction(smem);
  channel_sum_store(blockIdx.x, threadIdx.x, smem, grad_alpha);
}

TileGeometry geometry_for(const at::Tensor& x, Pass pass, size_t opmath_bytes) {
  const Extent e = extent_of(x);
  return make_geometry(x.dim() - 2, e.size, e.planes, e.channels, pass, opmath_bytes);
}

void check_cuda_input(const at::Tensor& x) {
  TORCH_CHECK(x.is_cuda(), "edge_enhance (CUDA kernel): x must be a CUDA tensor, got ", x.device());
}

at::Tensor edge_enhance_cuda(const at::Tensor& x_in, const at::Tensor& alpha_in, double eps) {
  check_cuda_input(x_in);
  const c10::cuda::CUDAGuard guard(x_in.device());
  const ForwardCall call(x_in, alpha_in);  // also checks that alpha is on x's device
  const at::Tensor &x = call.x, &alpha = call.alpha, &y = call.y;
  if (call.empty()) return y;
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "edge_enhance_cuda", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    const TileGeometry g = geometry_for(x, Pass::kForward, sizeof(acc_t));
    auto launch = [&](auto kernel) {
      kernel<<<g.blocks, kThreads, g.shared_bytes, stream>>>(g, x.const_data_ptr<scalar_t>(),
                                                             alpha.const_data_ptr<scalar_t>(),
                                                             y.mutable_data_ptr<scalar_t>(), static_cast<acc_t>(eps));
      C10_CUDA_KERNEL_LAUNCH_CHECK();
    };
    if (x.dim() == 4) launch(forward_kernel<2, scalar_t, acc_t>);
    else launch(forward_kernel<3, scalar_t, acc_t>);
  });
  return y;
}

std::tuple<at::Tensor, at::Tensor> edge_enhance_backward_cuda(const at::Tensor& grad_y_in, const at::Tensor& x_in,
                                                              const at::Tensor& alpha_in, double eps) {
  check_cuda_input(x_in);
  const c10::cuda::CUDAGuard guard(x_in.device());
  const BackwardCall call(grad_y_in, x_in, alpha_in);  // also checks that all tensors share x's device
  const at::Tensor &x = call.x, &gy = call.grad_y, &alpha = call.alpha, &gx = call.grad_x, &grad_alpha = call.grad_alpha;
  if (call.empty()) return call.result();
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "edge_enhance_backward_cuda", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    const TileGeometry g = geometry_for(x, Pass::kBackward, sizeof(acc_t));
    const auto acc_dtype = c10::CppTypeToScalarType<acc_t>::value;
    at::Tensor partials = at::empty({g.blocks}, x.options().dtype(acc_dtype));
    auto launch = [&](auto kernel) {
      kernel<<<g.blocks, kThreads, g.shared_bytes, stream>>>(
          g, gy.const_data_ptr<scalar_t>(), x.const_data_ptr<scalar_t>(), alpha.const_data_ptr<scalar_t>(),
          gx.mutable_data_ptr<scalar_t>(), partials.mutable_data_ptr<acc_t>(), static_cast<acc_t>(eps));
      C10_CUDA_KERNEL_LAUNCH_CHECK();
    };
    if (x.dim() == 4) launch(backward_kernel<2, scalar_t, acc_t>);
    else launch(backward_kernel<3, scalar_t, acc_t>);
    channel_sum_kernel<scalar_t, acc_t><<<g.channels, kThreads, 0, stream>>>(
        partials.const_data_ptr<acc_t>(), g.blocks / g.channels, grad_alpha.mutable_data_ptr<scalar_t>());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
  return call.result();
}

}  // namespace
}  // namespace segnet

TORCH_LIBRARY_IMPL(segnet_ops, CUDA, m) {
  m.impl("edge_enhance", &segnet::edge_enhance_cuda);
  m.impl("edge_enhance_backward", &segnet::edge_enhance_backward_cuda);
}
