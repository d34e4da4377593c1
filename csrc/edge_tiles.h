// The CUDA kernels of the edge op written as phases: each phase is what one thread of one block
// does between two barriers, a function of (geometry, block index, thread index, shared memory).
// csrc/cuda/edge_enhance.cu runs the phases with __syncthreads() between them; the host
// emulation (csrc/cpu/emulation.cpp) runs them block by block and thread by thread, so the
// GPU's tiling and indexing are tested on machines without a GPU. One function,
// make_geometry(), decides the launch for both.
#pragma once

#include <cstddef>
#include <cstdint>

#include "edge_stencil.h"

namespace segnet {

constexpr int kBlockX = 32;  // threads along the last axis: one warp reads a contiguous row
constexpr int kBlockY = 8;
constexpr int kThreads = kBlockX * kBlockY;
constexpr size_t kSharedBudget = 48 * 1024;  // default shared memory per block, no opt-in needed

// A box of a (D, H, W) grid: origin and extent, flattened row-major.
struct Box {
  int org[3];
  int ext[3];
  SEGNET_HD int count() const { return ext[0] * ext[1] * ext[2]; }
  SEGNET_HD int index(int i0, int i1, int i2) const { return (i0 * ext[1] + i1) * ext[2] + i2; }
  SEGNET_HD void unflatten(int i, int* p) const {
    p[2] = i % ext[2];
    i /= ext[2];
    p[1] = i % ext[1];
    p[0] = i / ext[1];
  }
};

struct TileGeometry {
  int ndim;
  int size[3];       // spatial extent as (D, H, W); D == 1 in 2D
  int64_t planes;    // N * C
  int64_t channels;  // C
  int tile[3];       // outputs per block and axis
  int halo[3];       // input halo per axis held in shared memory (1 forward, 2 backward)
  int tiles[3];      // blocks per plane along each axis
  int64_t blocks;    // 1D grid
  size_t shared_bytes;

  SEGNET_HD int64_t volume() const { return int64_t(size[0]) * size[1] * size[2]; }
  SEGNET_HD int tiles_per_plane() const { return tiles[0] * tiles[1] * tiles[2]; }
  // Block b covers plane b / tiles_per_plane and the tile whose origin goes to `origin`.
  SEGNET_HD int64_t plane_of(int64_t b) const { return b / tiles_per_plane(); }
  SEGNET_HD int tile_of(int64_t b) const { return static_cast<int>(b % tiles_per_plane()); }
  SEGNET_HD void origin(int64_t b, int* o) const {
    int t = tile_of(b);
    const int t2 = t % tiles[2];
    t /= tiles[2];
    const int t1 = t % tiles[1];
    const int t0 = t / tiles[1];
    o[0] = t0 * tile[0];
    o[1] = t1 * tile[1];
    o[2] = t2 * tile[2];
  }
  // The input box a block loads (its tile plus the halo).
  SEGNET_HD Box input_box(const int* o) const {
    Box box;
    for (int a = 0; a < 3; ++a) {
      box.org[a] = o[a] - halo[a];
      box.ext[a] = tile[a] + 2 * halo[a];
    }
    return box;
  }
  // The box of positions whose v_d the backward pass needs (its tile plus one sample).
  SEGNET_HD Box adjoint_box(const int* o) const {
    Box box;
    for (int a = 0; a < 3; ++a) {
      const int h = halo[a] / 2;
      box.org[a] = o[a] - h;
      box.ext[a] = tile[a] + 2 * h;
    }
    return box;
  }
  SEGNET_HD bool inside(const int* p) const {
    return p[0] >= 0 && p[0] < size[0] && p[1] >= 0 && p[1] < size[1] && p[2] >= 0 && p[2] < size[2];
  }
};

enum class Pass { kForward, kBackward };

// Launch geometry for one pass. Forward: 32 x 8 outputs per block (x 4 slices in 3D), one
// sample of halo. Backward: 32 x 8 (x 2 slices in 3D), two samples of input halo (the v_d it
// gathers need their own one-sample halo); the 3D tile depth halves until shared memory fits.
inline TileGeometry make_geometry(int ndim, const int* size, int64_t planes, int64_t channels, Pass pass,
                                  size_t opmath_bytes) {
  TileGeometry g{};
  g.ndim = ndim;
  g.planes = planes;
  g.channels = channels;
  const int h = pass == Pass::kForward ? 1 : 2;
  g.tile[0] = ndim == 3 ? (pass == Pass::kForward ? 4 : 2) : 1;
  g.tile[1] = kBlockY;
  g.tile[2] = kBlockX;
  g.halo[0] = ndim == 3 ? h : 0;
  g.halo[1] = h;
  g.halo[2] = h;
  for (int a = 0; a < 3; ++a) g.size[a] = size[a];
  auto shared_elems = [&]() {
    const int o[3] = {0, 0, 0};
    size_t n = g.input_box(o).count();
    if (pass == Pass::kBackward) n += size_t(ndim) * g.adjoint_box(o).count() + kThreads;
    return n;
  };
  while (shared_elems() * opmath_bytes > kSharedBudget && g.tile[0] > 1) g.tile[0] /= 2;
  g.shared_bytes = shared_elems() * opmath_bytes;
  for (int a = 0; a < 3; ++a) g.tiles[a] = (size[a] + g.tile[a] - 1) / g.tile[a];
  g.blocks = planes * g.tiles_per_plane();
  return g;
}

// Phase shared by both passes: load the block's input box (clamped to the volume: the
// replicate border) into shared memory, converted to the accumulation type.
template <typename scalar_t, typename acc_t>
SEGNET_HD void load_input_box(const TileGeometry& g, int64_t b, int t, acc_t* smem, const scalar_t* x) {
  int o[3];
  g.origin(b, o);
  const Box box = g.input_box(o);
  const scalar_t* vol = x + g.plane_of(b) * g.volume();
  for (int i = t; i < box.count(); i += kThreads) {
    int p[3];
    box.unflatten(i, p);
    const int z = clamp_index(box.org[0] + p[0], g.size[0]);
    const int y = clamp_index(box.org[1] + p[1], g.size[1]);
    const int xx = clamp_index(box.org[2] + p[2], g.size[2]);
    smem[i] = static_cast<acc_t>(vol[(int64_t(z) * g.size[1] + y) * g.size[2] + xx]);
  }
}

// Gradients at global position p from the input box in shared memory.
template <int NDIM, typename acc_t>
SEGNET_HD void gradients_from_box(const Box& box, const acc_t* smem, const int* p, acc_t* grad) {
  const int c0 = p[0] - box.org[0], c1 = p[1] - box.org[1], c2 = p[2] - box.org[2];
  auto at = [&](int o0, int o1, int o2) { return smem[box.index(c0 + o0, c1 + o1, c2 + o2)]; };
  sobel_gradients<NDIM, acc_t>(at, grad);
}

template <int NDIM, typename acc_t>
SEGNET_HD acc_t sum_of_squares(const acc_t* grad) {
  acc_t s = acc_t(0);
  for (int d = 0; d < NDIM; ++d) s += grad[d] * grad[d];
  return s;
}

// Output position of thread t for slice k of its block's tile.
SEGNET_HD void output_position(const int* o, int t, int k, int* p) {
  p[0] = o[0] + k;
  p[1] = o[1] + t / kBlockX;
  p[2] = o[2] + t % kBlockX;
}

SEGNET_HD int64_t flat_offset(const TileGeometry& g, const int* p) {
  return (int64_t(p[0]) * g.size[1] + p[1]) * g.size[2] + p[2];
}

// Forward, phase 2: y = x + alpha * m at the thread's outputs.
template <int NDIM, typename scalar_t, typename acc_t>
SEGNET_HD void forward_outputs(const TileGeometry& g, int64_t b, int t, const acc_t* smem, const scalar_t* alpha,
                               scalar_t* y, acc_t eps) {
  int o[3];
  g.origin(b, o);
  const Box box = g.input_box(o);
  const int64_t plane = g.plane_of(b);
  const acc_t a = static_cast<acc_t>(alpha[plane % g.channels]);
  for (int k = 0; k < g.tile[0]; ++k) {
    int p[3];
    output_position(o, t, k, p);
    if (!g.inside(p)) continue;
    acc_t grad[NDIM];
    gradients_from_box<NDIM>(box, smem, p, grad);
    const acc_t xv = smem[box.index(p[0] - box.org[0], p[1] - box.org[1], p[2] - box.org[2])];
    y[plane * g.volume() + flat_offset(g, p)] =
        static_cast<scalar_t>(edge_output(xv, a, edge_magnitude(sum_of_squares<NDIM>(grad), eps)));
  }
}

// Where the backward pass keeps its v_d planes and its per-thread partial sums in shared memory.
template <typename acc_t>
struct BackwardShared {
  acc_t* x;
  acc_t* v;
  acc_t* partial;
  int v_count;
  SEGNET_HD BackwardShared(const TileGeometry& g, acc_t* smem) {
    const int o[3] = {0, 0, 0};
    const int x_count = g.input_box(o).count();
    v_count = g.adjoint_box(o).count();
    x = smem;
    v = smem + x_count;
    partial = v + g.ndim * v_count;
  }
};

// Backward, phase 2: v_d = alpha * grad_y * g_d / m on the adjoint box (zero outside the
// volume), and each thread's share of sum(grad_y * m) over the outputs its block owns.
template <int NDIM, typename scalar_t, typename acc_t>
SEGNET_HD void backward_adjoint_inputs(const TileGeometry& g, int64_t b, int t, acc_t* smem,
                                       const scalar_t* grad_y, const scalar_t* alpha, acc_t eps) {
  const BackwardShared<acc_t> sh(g, smem);
  int o[3];
  g.origin(b, o);
  const Box xbox = g.input_box(o);
  const Box vbox = g.adjoint_box(o);
  const int64_t plane = g.plane_of(b);
  const acc_t a = static_cast<acc_t>(alpha[plane % g.channels]);
  acc_t part = acc_t(0);
  for (int i = t; i < vbox.count(); i += kThreads) {
    int q[3], p[3];
    vbox.unflatten(i, q);
    bool owned = true;
    for (int ax = 0; ax < 3; ++ax) {
      p[ax] = vbox.org[ax] + q[ax];
      owned = owned && p[ax] >= o[ax] && p[ax] < o[ax] + g.tile[ax];
    }
    acc_t grad[NDIM];
    acc_t scale = acc_t(0);
    if (g.inside(p)) {
      gradients_from_box<NDIM>(xbox, sh.x, p, grad);
      const acc_t m = edge_magnitude(sum_of_squares<NDIM>(grad), eps);
      const acc_t gy = static_cast<acc_t>(grad_y[plane * g.volume() + flat_offset(g, p)]);
      scale = adjoint_scale(a, gy, m);
      if (owned) part += gy * m;
    } else {
      for (int d = 0; d < NDIM; ++d) grad[d] = acc_t(0);
    }
    for (int d = 0; d < NDIM; ++d) sh.v[d * sh.v_count + i] = scale * grad[d];
  }
  sh.partial[t] = part;
}

// Backward, phase 3: grad_x = grad_y + sum_d K_d^T v_d at the thread's outputs.
template <int NDIM, typename scalar_t, typename acc_t>
SEGNET_HD void backward_grad_input(const TileGeometry& g, int64_t b, int t, acc_t* smem, const scalar_t* grad_y,
                                   scalar_t* grad_x) {
  const BackwardShared<acc_t> sh(g, smem);
  int o[3];
  g.origin(b, o);
  const Box vbox = g.adjoint_box(o);
  const int64_t base = g.plane_of(b) * g.volume();
  for (int k = 0; k < g.tile[0]; ++k) {
    int p[3];
    output_position(o, t, k, p);
    if (!g.inside(p)) continue;
    const int c0 = p[0] - vbox.org[0], c1 = p[1] - vbox.org[1], c2 = p[2] - vbox.org[2];
    auto v = [&](int d, int o0, int o1, int o2) { return sh.v[d * sh.v_count + vbox.index(c0 + o0, c1 + o1, c2 + o2)]; };
    const int64_t at = base + flat_offset(g, p);
    grad_x[at] = static_cast<scalar_t>(static_cast<acc_t>(grad_y[at]) + adjoint_gather<NDIM, acc_t>(p, g.size, v));
  }
}

// One step of a fixed-order tree reduction over kThreads values (stride kThreads/2 ... 1).
template <typename acc_t>
SEGNET_HD void reduce_step(int t, int stride, acc_t* values) {
  if (t < stride) values[t] += values[t + stride];
}

// Backward, last phase: the block's partial sum of grad_alpha goes to
// partials[c][n * tiles_per_plane + tile], so the second pass can add them up in order.
template <typename acc_t>
SEGNET_HD void store_block_partial(const TileGeometry& g, int64_t b, int t, const acc_t* smem, acc_t* partials) {
  if (t != 0) return;
  const BackwardShared<acc_t> sh(g, const_cast<acc_t*>(smem));
  const int64_t plane = g.plane_of(b);
  const int64_t c = plane % g.channels;
  const int64_t n = plane / g.channels;
  const int64_t per_channel = (g.planes / g.channels) * g.tiles_per_plane();
  partials[c * per_channel + n * g.tiles_per_plane() + g.tile_of(b)] = sh.partial[0];
}

// Second pass (one block per channel), phase 1: each thread adds a strided share of the
// channel's partials in a fixed order.
template <typename acc_t>
SEGNET_HD void channel_sum_load(int64_t c, int t, acc_t* smem, const acc_t* partials, int64_t per_channel) {
  acc_t s = acc_t(0);
  for (int64_t i = t; i < per_channel; i += kThreads) s += partials[c * per_channel + i];
  smem[t] = s;
}

template <typename scalar_t, typename acc_t>
SEGNET_HD void channel_sum_store(int64_t c, int t, const acc_t* smem, scalar_t* grad_alpha) {
  if (t == 0) grad_alpha[c] = static_cast<scalar_t>(smem[0]);
}

}  // namespace segnet
