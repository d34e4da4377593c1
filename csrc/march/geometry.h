// Launch geometry of the marching CUDA kernels, shared by the CUDA launcher and the host
// emulation (one function, make_march_geometry(), decides both).
//
// A volume is seen as (outer, middle, inner) axes: (D, H, W) in 3D, (H, -, W) in 2D. Every lane
// of a warp owns a strip of S consecutive samples along the inner axis (one 16-byte vector of
// float32 in 2D); a warp's 32 strips lie side by side along one row, and the warp marches along
// the outer axis over a segment of it, so its geometry is decoded once. Rows longer than 32
// strips are split into spans that overlap by one strip on each side: the edge lanes of an inner
// span only supply their neighbours' halo. Rows of half a warp's strips or fewer are packed side
// by side into one warp where its rows need nothing from each other (the 3D forward pass): a
// lane at either end of a row uses its own samples in place of its neighbour's (the replicate
// border), so a shuffle across two rows is harmless. The work item that marches together is a
// unit: one warp, or in the 3D backward pass a block of backward_rows() + 2 warps on consecutive
// rows that share their inner-axis adjoints through shared memory.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "../edge_stencil.h"

namespace segnet {

constexpr int kWarpLanes = 32;
constexpr int kMinSegment = 8;             // outer positions a unit marches over, at least
constexpr int kMaxThreadsPerBlock = 1024;
constexpr size_t kDefaultSharedBytes = 48 * 1024;  // dynamic shared memory a launch gets without opting in
constexpr int64_t kMaxUnits = 2147483647;  // units are counted in 32 bits: decoding them needs no 64-bit division

enum class Pass { kForward, kBackward };

// Planes a unit's march takes in before its first step (the window's first two): they produce no
// output.
constexpr int kPrimedPlanes = 2;

// Planes loaded ahead of the one arriving (prefetch.h): a ring of that many slots per lane. Three
// for whole-vector loads, staged in shared memory: with two, a 16-bit 3D forward lane (12 warps
// per SM) has too few bytes in flight to cover DRAM latency (scripts/kernel_report.py). Two in
// the 3D backward pass, which two keep ahead of DRAM latency and whose 16-warp block would stage
// 120 KB with three (more than the 99 KB of sm_86, sm_89 and sm_120), and in the general form,
// whose ring is in registers (a third made the 16-bit 3D forward lane spill).
constexpr SEGNET_HD int ring_slots(int ndim, Pass pass, bool vector) {
  return vector && !(ndim == 3 && pass == Pass::kBackward) ? 3 : 2;
}

// 3D backward: each lane shares three quantities of its strip with the rows next to it (u_outer
// and two sums of u_middle and u_inner: backward.h). Shared memory holds, per warp and quantity
// k, sample i of every lane side by side: the 32 lanes of an access touch 32 consecutive words,
// one per bank (a lane's strip kept together would put 4 lanes on a bank).
constexpr int kSharedQuantities = 3;
constexpr SEGNET_HD int shared_word(int warp, int k, int i, int lane, int strip) {
  return ((warp * kSharedQuantities + k) * strip + i) * kWarpLanes + lane;
}

// Samples per lane: one 16-byte vector, except in the 3D backward pass, which holds at most
// four: its window and adjoint state for eight 16-bit samples would not fit in registers.
template <int NDIM, Pass PASS, typename scalar_t>
constexpr int strip_width() {
  return NDIM == 3 && PASS == Pass::kBackward && sizeof(scalar_t) < 4 ? 4 : int(16 / sizeof(scalar_t));
}

// 3D backward: output rows per unit (a unit is the warps that march together), which runs one
// halo warp more on each side. The halo warps only supply u to their neighbours, so more rows
// waste less: 14 rows make a unit of 16 warps, one block of 512 threads, which caps a lane at 128
// registers (a whole SM's register file). The general form's lanes (clamped sample loads, their
// strips in registers) need more, so its units are 6 rows (8 warps, up to 255 registers).
constexpr SEGNET_HD int backward_rows(bool vector) { return vector ? 14 : 6; }

// Threads of a block: one unit of the 3D backward pass (its warps share memory); otherwise four
// one-warp units. Small blocks let a kernel whose lanes hold many registers keep as many warps
// resident as the register file allows (a 256-thread block of 160-register lanes leaves 40% of
// it unused); the kernels' __launch_bounds__ are this same number.
constexpr SEGNET_HD int unit_warps(int ndim, Pass pass, bool vector) {
  return ndim == 3 && pass == Pass::kBackward ? backward_rows(vector) + 2 : 1;
}
constexpr SEGNET_HD int block_threads(int ndim, Pass pass, bool vector) {
  return unit_warps(ndim, pass, vector) * kWarpLanes * (ndim == 3 && pass == Pass::kBackward ? 1 : 4);
}

struct MarchGeometry {
  int ndim;
  int outer, middle, inner;  // (D, H, W) in 3D, (H, 1, W) in 2D
  int64_t planes, channels, batch;  // N * C, C, N
  int strip;                 // samples per lane
  int spans;                 // warps along a row
  int span_stride;           // samples between the first lanes of consecutive spans
  int row_lanes;             // lanes along one row of a warp (32 unless rows are packed)
  int rows_per_warp;         // rows side by side in a warp (1 unless rows are packed)
  int rows_per_unit;         // middle rows whose outputs a unit owns
  int row_groups;            // units along the middle axis
  int segment, segments;     // outer positions per unit, units along the outer axis (split_outer_axis)
  int extra_planes;          // planes a unit marches beyond its outputs' own
  int unit_warps;            // warps per unit
  int64_t units;             // all units of the launch
  int64_t blocks;
  int threads;               // per block
  bool vector;               // whole-vector loads: inner % strip == 0 and aligned rows
  size_t unit_shared_bytes;  // a unit's shared memory: the 3D backward rows of u, then the staging slots
  size_t staging_offset;     // where a unit's staging slots start (whole-vector loads only)
  size_t shared_bytes;       // per block

  SEGNET_HD int64_t units_per_plane() const { return int64_t(segments) * spans * row_groups; }
  SEGNET_HD int64_t warps_per_plane() const { return units_per_plane() * unit_warps; }
  SEGNET_HD int64_t volume() const { return int64_t(outer) * middle * inner; }
};

// Where one lane of one unit works: decoded once per thread.
struct LaneSite {
  int64_t plane;    // n * C + c
  int channel;
  int row;          // middle-axis index of the lane's row (may lie outside the volume: a halo row)
  bool ghost_row;   // row lies outside the volume: the lane marches the nearest row of it instead
  int warp;         // warp within the unit
  int lane;         // lane within the warp
  int w0;           // first inner sample of the lane's strip
  int begin, end;   // outer positions whose outputs the unit owns
  bool owns;        // the lane's strip holds outputs of this unit (some may lie past the row end)
};

SEGNET_HD LaneSite lane_site(const MarchGeometry& g, unsigned unit, int thread) {
  LaneSite s;
  const unsigned upp = unsigned(g.units_per_plane());
  s.plane = unit / upp;
  unsigned r = unit % upp;
  const int row_group = int(r % unsigned(g.row_groups));
  r /= unsigned(g.row_groups);
  const int span = int(r % unsigned(g.spans));
  const int segment = int(r / unsigned(g.spans));
  s.warp = thread / kWarpLanes;
  s.lane = thread % kWarpLanes;
  // Rows packed into a warp: lanes past the last whole row read that row again (their loads join
  // its lanes' sectors) and own nothing.
  const int packed_row = s.lane / g.row_lanes;  // 0 unless rows are packed
  const int row_in_warp = packed_row < g.rows_per_warp ? packed_row : g.rows_per_warp - 1;
  const bool halo_rows = g.unit_warps > g.rows_per_unit / g.rows_per_warp;  // 3D backward: a halo row each side
  s.row = row_group * g.rows_per_unit + (s.warp - (halo_rows ? 1 : 0)) * g.rows_per_warp + row_in_warp;
  s.ghost_row = s.row < 0 || s.row >= g.middle;
  s.w0 = span * g.span_stride + s.lane % g.row_lanes * g.strip;
  s.begin = segment * g.segment;
  s.end = s.begin + g.segment < g.outer ? s.begin + g.segment : g.outer;
  const bool row_owned = s.row >= 0 && s.row < g.middle && (!halo_rows || (s.warp >= 1 && s.warp <= g.rows_per_unit));
  const bool lane_owned = (s.lane > 0 || span == 0) && (s.lane < kWarpLanes - 1 || span == g.spans - 1);
  s.owns = row_owned && lane_owned && packed_row < g.rows_per_warp && s.w0 < g.inner;
  s.channel = int(unsigned(s.plane) % unsigned(g.channels));
  return s;
}

// Where warp `warp` of `unit` puts its share of grad_alpha: channel-major, so that the second pass
// adds each channel's shares in a fixed order. Computed after the march from the launch's
// constants, so that no register holds it through the march.
SEGNET_HD int64_t partial_slot(const MarchGeometry& g, unsigned unit, int warp) {
  const unsigned upp = unsigned(g.units_per_plane());
  const unsigned plane = unit / upp;
  const unsigned n = plane / unsigned(g.channels), channel = plane % unsigned(g.channels);
  return (int64_t(channel) * g.batch + n) * g.warps_per_plane() + int64_t(unit % upp) * g.unit_warps + warp;
}

// `aligned`: the data pointers allow whole-vector loads (16 bytes in 2D, strip * element in 3D).
// `shared_limit`: the most shared memory a block may opt into on the device. A whole-vector layout
// that needs more (the 3D backward pass stages 88 KB in float32 and float64; a 7.5 GPU allows
// 64 KB) takes the general form, which stages nothing.
inline MarchGeometry make_march_geometry(int ndim, const int* size, int64_t planes, int64_t channels, Pass pass,
                                         int strip, size_t scalar_bytes, size_t acc_bytes, bool aligned,
                                         size_t shared_limit) {
  MarchGeometry g{};
  g.ndim = ndim;
  g.outer = ndim == 3 ? size[0] : size[1];
  g.middle = ndim == 3 ? size[1] : 1;
  g.inner = size[2];
  g.planes = planes;
  g.channels = channels;
  g.batch = planes / channels;
  g.strip = strip;
  const int span_width = kWarpLanes * strip;
  g.span_stride = (kWarpLanes - 2) * strip;
  g.spans = g.inner <= span_width ? 1 : 1 + (g.inner - span_width + g.span_stride - 1) / g.span_stride;
  g.vector = aligned && g.inner % strip == 0;
  const bool shared_rows = ndim == 3 && pass == Pass::kBackward;
  const int lanes_per_row = (g.inner + strip - 1) / strip;
  const bool packed = !shared_rows && g.middle > 1 && 2 * lanes_per_row <= kWarpLanes;
  g.row_lanes = packed ? lanes_per_row : kWarpLanes;
  g.rows_per_warp = packed ? std::min(kWarpLanes / lanes_per_row, g.middle) : 1;
  g.rows_per_unit = shared_rows ? backward_rows(g.vector) : g.rows_per_warp;
  g.unit_warps = unit_warps(ndim, pass, g.vector);
  g.row_groups = (g.middle + g.rows_per_unit - 1) / g.rows_per_unit;
  // Forward: the primed planes. Backward: those and two marched past the last output (its adjoint
  // reaches one plane further each way).
  g.extra_planes = kPrimedPlanes + (pass == Pass::kForward ? 0 : 2);
  g.threads = block_threads(ndim, pass, g.vector);
  g.staging_offset = shared_rows ? size_t(g.unit_warps) * kSharedQuantities * kWarpLanes * strip * acc_bytes : 0;
  // Staging: per warp, the ring's slots of each row read ahead (the middle-axis rows, and grad_y's).
  const int ahead_rows = (ndim == 3 ? 3 : 1) + (pass == Pass::kBackward ? 1 : 0);
  const size_t staging = g.vector ? size_t(g.unit_warps) * ring_slots(ndim, pass, true) * ahead_rows * kWarpLanes * strip * scalar_bytes : 0;
  g.unit_shared_bytes = g.staging_offset + staging;
  g.shared_bytes = g.unit_shared_bytes * size_t(g.threads / (g.unit_warps * kWarpLanes));
  if (g.vector && g.shared_bytes > shared_limit) {
    return make_march_geometry(ndim, size, planes, channels, pass, strip, scalar_bytes, acc_bytes, false, shared_limit);
  }
  return g;
}

// Splits the outer axis into segments for a device that runs `resident_units` units at a time
// (the CUDA launcher asks the device; the emulation and the report say what they model). A
// launch of U units takes ceil(U / resident_units) waves, each as long as a unit's march,
// segment + extra_planes steps: the split with the fewest steps in all wins, the fewest
// segments on a tie (they re-read the fewest planes). So segments multiply while they fill an
// idle device, and stay long where more would only add a wave.
inline void split_outer_axis(MarchGeometry& g, int64_t resident_units) {
  const int64_t across = g.planes * g.spans * g.row_groups;  // units per segment position
  int64_t fewest = -1;
  for (int wanted = 1; wanted <= (g.outer + kMinSegment - 1) / kMinSegment; ++wanted) {  // outer >= 1
    const int length = std::max((g.outer + wanted - 1) / wanted, kMinSegment);
    const int segments = (g.outer + length - 1) / length;
    const int64_t waves = (across * segments - 1) / resident_units + 1;
    const int64_t steps = waves * (length + g.extra_planes);
    if (fewest < 0 || steps < fewest) {
      fewest = steps;
      g.segment = length;
      g.segments = segments;
    }
  }
  g.units = g.planes * g.units_per_plane();
  const int64_t units_per_block = g.threads / (g.unit_warps * kWarpLanes);
  g.blocks = (g.units + units_per_block - 1) / units_per_block;
}

}  // namespace segnet
