// The paged decode kernel's shapes: what one batch's Q tile holds and how the math warpgroups split it.
//
//   logits[b * next_n + j, p] = sum_h relu(scale(b, p) * Q[b,j,h,:] . K(b, p)) * w[b * next_n + j, h]
//
// Tensors: none (compile-time shapes). A batch's Q tile is its next_n x H (row, head) columns x D
// bytes, the B operand of wgmma m64n128k32 (the A operand is a 64-key tile of its cache blocks).
#pragma once
#include "sm90/tunables.h"

namespace aiter {
namespace sm90 {
namespace paged {

constexpr int kWgmmaCols = 128;  // the widest wgmma N the kernel issues (it uses the exact width below)

template <int H, int D, int NEXT_N>
struct PagedShape {
  static_assert(D == 64 || D == 128, "the paged kernel takes rows of 64 or 128 bytes: the swizzles of its cache map");
  static constexpr int kCols = NEXT_N * H;  // a batch's (row, head) columns
  static_assert(kCols % 8 == 0 && kCols <= 2 * kWgmmaCols, "next_n x H in [8, 256], a multiple of 8");
  // The first kPagedSharingWarpgroups warpgroups on every tile, each with its own rows, when the
  // columns exceed one wgmma; otherwise the warpgroups take the tiles in turn.
  static constexpr bool kSharedTiles = kCols > kWgmmaCols;
  static constexpr int kWgCols = kSharedTiles ? kCols / kPagedSharingWarpgroups : kCols;  // columns a warpgroup computes
  static constexpr int kWgRows = kWgCols / H;                                           // query rows among them
  static_assert(!kSharedTiles || kWgCols == kWgmmaCols, "a shared tile splits into two full wgmmas");
  static_assert((kWgCols & (kWgCols - 1)) == 0, "wgmma m64nNk32 is instantiated for N in {8, 16, 32, 64, 128}");
  static constexpr int kHeadGroups = H / 8 > 0 ? H / 8 : 1;  // 8-column groups of the fragment per row
  static constexpr int kQTileBytes = kCols * D;
  static constexpr int kKTileBytes = kKeysPerTile * D;
  static constexpr int kMmaSteps = D / 32;
  // Warps that release a K stage: one warpgroup's, or the sharing ones'.
  static constexpr int kStageConsumers = 4 * (kSharedTiles ? kPagedSharingWarpgroups : 1);
};

}  // namespace paged
}  // namespace sm90
}  // namespace aiter
