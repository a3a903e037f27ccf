// gfx950 fp8_mqa_logits: how this backend prices a block for the shared work scheduler
// (common/work_scheduler.h), which does all the window, union, tile, fill and share arithmetic.
//
//   logits[m, n] = sum_h relu(kv_scale[n] * Q[m,h,:] . K[n,:]) * w[m,h]   for n in [s_m, e_m)
//
// A block's units: kSegmentOverheadStages virtual units when it computes (its Q/w loads, pipeline
// fill and drain), one unit per stage of stage_keys keys counted from its union's begin (not on a
// key grid: an LDS-DMA stage may start at any key), and with clean_logits one unit per fill_cols
// -inf columns outside the keys its stages cover. Layouts touched: none (counts only).
// The units' order within a block (block_parts): the start overhead, then the stages and the fill
// units interleaved evenly, so that every share of a block holds stages and fill units in the
// block's own ratio and its workgroup writes that fill while it computes (kernel.h): a share of
// stages alone, next to one of fill alone, would leave one CU computing while another writes.
// Why one place: the device plan (plan.h), the fixed grid's model (launch_plan.h) and the host
// emulation must price and order blocks identically, or the even share of units is not an even
// share of time and the stage/fill ranges of a segment disagree.
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

// Of the first `body_units` units after a block's start overhead, how many are stages: body_units
// x stages / (stages + fill units), rounded down. It grows by 0 (a fill unit) or 1 (a stage) per
// unit, from 0 to all the stages, so a block's first body unit is a fill unit whenever it has one
// and its last is a stage whenever it has one.
GFX950_HD inline int64_t stages_within(const scheduler::BlockPrice& price, int64_t body_units) {
  const int64_t body = price.compute + price.fill;
  return body > 0 ? body_units * price.compute / body : 0;
}

// Where units [u_begin, u_end) of a block fall in that order: stages [tile_begin, tile_end) and
// fill units [fill_begin, fill_end), each possibly empty.
GFX950_HD inline scheduler::SegmentParts block_parts(const scheduler::BlockPrice& price, int64_t u_begin,
                                                     int64_t u_end) {
  const int64_t body = price.compute + price.fill;
  const int64_t begin = scheduler::clamp_to(u_begin - price.overhead, 0, body);
  const int64_t end = scheduler::clamp_to(u_end - price.overhead, 0, body);
  const int64_t stages_before = stages_within(price, begin), stages_through = stages_within(price, end);
  return scheduler::SegmentParts{stages_before, stages_through, begin - stages_before, end - stages_through};
}

}  // namespace gfx950
}  // namespace aiter
