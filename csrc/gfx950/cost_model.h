// gfx950 fp8_mqa_logits: how this backend prices a block for the shared work scheduler
// (common/work_scheduler.h), which does all the window, union, tile, fill and share arithmetic.
//
//   logits[m, n] = sum_h relu(kv_scale[n] * Q[m,h,:] . K[n,:]) * w[m,h]   for n in [s_m, e_m)
//
// A block's units: kSegmentOverheadStages virtual units when it computes (its Q/w loads, pipeline
// fill and drain), one unit per stage of stage_keys keys counted from its union's begin (not on a
// key grid: an LDS-DMA stage may start at any key), and with clean_logits one unit per fill_cols
// -inf columns outside the keys its stages cover. Layouts touched: none (counts only).
// Why one place: the device plan (plan.h), the fixed grid's model (launch_plan.h) and the host
// emulation must price blocks identically, or the even share of units is not an even share of
// time and the stage/fill ranges of a segment disagree.
#pragma once
#include <stdint.h>

#include "common/work_scheduler.h"
#include "gfx950/geometry.h"

namespace aiter {
namespace gfx950 {

GFX950_HD inline scheduler::CostModel cost_model(Geometry geometry, int64_t num_keys, bool clean) {
  scheduler::CostModel model;
  model.num_keys = num_keys;
  model.tile_keys = geometry.stage_keys;
  model.tiles_on_key_grid = false;
  model.start_overhead = kSegmentOverheadStages;
  model.fill_unit_keys = clean ? geometry.fill_cols : 0;
  return model;
}

}  // namespace gfx950
}  // namespace aiter
