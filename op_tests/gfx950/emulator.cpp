// Host emulation of the gfx950 fp8_mqa_logits kernel (csrc/kernels/fp8_mqa_logits_gfx950.hip),
// built by op_tests/test_gfx950_*.py with g++ and called through ctypes.
//
// It runs the kernel's algorithm with the kernel's own index math (fp8_mqa_logits_gfx950_layout.h):
// the launch plan, the device-side balanced plan (row compaction, block unions, unit prefix), every
// workgroup's segments, the LDS ring filled by emulated LDS DMAs (swizzled K, per-wave kv_scale
// areas, buffer range checks), ds_read_b128 B fragments, MFMA 32x32x64 on 64-lane fragments in the
// CDNA4 A/B/C register layouts, the even/odd epilogue chains, the software pipeline with its
// deferred epilogue and tails, the permlane32 row-pair reduction, the clean/masked stage runs,
// per-row buffer stores with out-of-range dropping, and the -inf fill units.
// Waves run one after another and memory is sequential: it checks the index math and the
// algorithm, not timing, hazards, waitcnts or the compiler.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "gfx950/layout.h"
#include "common/fp8_mqa_logits_params.h"

using namespace aiter::gfx950;
using aiter::Fp8MqaLogitsParams;

namespace {

constexpr int L = kLanes;

float fp8_to_float(uint8_t b) {
  const int sign = b >> 7, exp = (b >> 3) & 15, man = b & 7;
  float v;
  if (exp == 15 && man == 7) return NAN;
  if (exp == 0) v = std::ldexp(float(man), -9);
  else v = std::ldexp(float(8 + man), exp - 10);
  return sign ? -v : v;
}

struct Table {
  float v[256];
  Table() {
    for (int i = 0; i < 256; ++i) v[i] = fp8_to_float(uint8_t(i));
  }
};
const Table kFp8;

// Which head_dim index (k of the MFMA) byte b of lane half h holds inside the hardware. The
// kernel's result must not depend on it (A and B share the permutation); the tests run two.
int hw_k(int variant, int half, int byte) {
  if (variant == 0) return 32 * half + byte;                        // contiguous halves
  return 16 * half + (byte % 16) + 32 * (byte / 16);                // 16-byte interleave
}

// A buffer resource: base (bytes, relative to the tensor) and num_records.
struct Rsrc {
  int64_t base;
  uint32_t num_records;
};

struct Segment {
  int b, u_begin, u_end;
};

struct Emulator {
  Fp8MqaLogitsParams a;  // the launcher's argument block
  Geometry g;
  LaunchPlan lp;
  int kmap;
  int blocks;
  // Balanced plan, as the kernel keeps it in LDS.
  std::vector<uint64_t> mask;
  std::vector<int> cpre, blo, bhi, bpre;
  std::vector<int> se_s, se_e;
  // One workgroup's LDS ring and block row table.
  std::vector<uint8_t> ring;
  struct RowInfo {
    int row, s, e;
  };
  std::vector<RowInfo> rows;

  Emulator(const Fp8MqaLogitsParams& args, int split_n, int num_cus, int kmap_variant) : a(args), kmap(kmap_variant) {
    lp = plan_launch(a.M, a.N, a.H, split_n, num_cus, a.clean_logits);
    g = geometry(a.H, lp.small);
    blocks = int((a.M + g.block_rows - 1) / g.block_rows);
    ring.assign(size_t(g.slots) * g.slot_bytes, 0);
    rows.resize(g.block_rows);
  }

  // ----------------------------------------------------------------------------------------------
  // Balanced plan (kernel: build_plan, chunk_of, empty_chunk_of, plan_row).
  // ----------------------------------------------------------------------------------------------
  void build_plan() {
    const int nch = (a.M + L - 1) / L;
    mask.assign(nch, 0);
    cpre.assign(nch + 1, 0);
    se_s.assign(a.M, 0);
    se_e.assign(a.M, 0);
    for (int c = 0; c < nch; ++c) {
      uint64_t m = 0;
      for (int lane = 0; lane < L; ++lane) {
        const int row = c * L + lane;
        if (row >= a.M) continue;
        const int s = clamp_key(a.ks[row], a.N), e = clamp_key(a.ke[row], a.N);
        se_s[row] = s;
        se_e[row] = e;
        if (s < e) m |= 1ull << lane;
      }
      mask[c] = m;
      cpre[c] = __builtin_popcountll(m);
    }
    exclusive_scan(cpre, nch);
    const int n_nonempty = cpre[nch];
    blo.assign(blocks, 0);
    bhi.assign(blocks, 0);
    bpre.assign(blocks + 1, 0);
    for (int b = 0; b < blocks; ++b) {
      const int p0 = b * g.block_rows;
      const int count = std::min(g.block_rows, n_nonempty - p0);
      int lo = a.N, hi = 0;
      if (count > 0) {
        int c = chunk_of(p0, nch);
        uint64_t m = mask[c];
        for (int k = p0 - cpre[c]; k > 0; --k) m &= m - 1;
        for (int i = 0; i < count; ++i) {
          while (m == 0) m = mask[++c];
          const int row = c * L + __builtin_ctzll(m);
          m &= m - 1;
          lo = std::min(lo, se_s[row]);
          hi = std::max(hi, se_e[row]);
        }
      }
      const BlockWork w = block_work(g, lo, hi, a.N, a.clean_logits);
      blo[b] = w.lo;
      bhi[b] = w.hi;
      bpre[b] = w.units;
    }
    exclusive_scan(bpre, blocks);
  }
  static void exclusive_scan(std::vector<int>& v, int n) {
    int run = 0;
    for (int i = 0; i < n; ++i) {
      const int x = v[i];
      v[i] = run;
      run += x;
    }
    v[n] = run;
  }
  int chunk_of(int p, int nch) const {
    int lo = 0, hi = nch - 1;
    while (lo < hi) {
      const int mid = (lo + hi + 1) >> 1;
      if (cpre[mid] <= p) lo = mid; else hi = mid - 1;
    }
    return lo;
  }
  int empty_chunk_of(int k, int nch) const {
    int lo = 0, hi = nch - 1;
    while (lo < hi) {
      const int mid = (lo + hi + 1) >> 1;
      if (mid * L - cpre[mid] <= k) lo = mid; else hi = mid - 1;
    }
    return lo;
  }
  int plan_row(int p) const {
    if (p >= a.M) return -1;
    const int nch = (a.M + L - 1) / L;
    const int n_nonempty = cpre[nch];
    if (p < n_nonempty) {
      const int c = chunk_of(p, nch);
      return c * L + select_bit(mask[c], p - cpre[c]);
    }
    const int k = p - n_nonempty;
    const int c = empty_chunk_of(k, nch);
    const uint64_t empties = ~mask[c] & chunk_valid_mask(a.M, c);
    return c * L + select_bit(empties, k - (c * L - cpre[c]));
  }

  // ----------------------------------------------------------------------------------------------
  // Segment setup (kernel: setup_block).
  // ----------------------------------------------------------------------------------------------
  struct Facts {
    BlockWork w;
    int max_s, min_e;
  };
  Facts setup_block(int b, bool balanced) {
    for (int t = 0; t < g.block_rows; ++t) {
      const int p = b * g.block_rows + t;
      const int row = balanced ? plan_row(p) : (p < a.M ? p : -1);
      int s = 0, e = 0;
      if (row >= 0) {
        s = clamp_key(a.ks[row], a.N);
        e = clamp_key(a.ke[row], a.N);
      }
      rows[t] = {row, s, e};
    }
    int lo = a.N, hi = 0, max_s = 0, min_e = a.N;
    for (const RowInfo& r : rows) {
      if (r.row < 0) continue;
      max_s = std::max(max_s, r.s);
      min_e = std::min(min_e, r.e);
      if (r.s < r.e) {
        lo = std::min(lo, r.s);
        hi = std::max(hi, r.e);
      }
    }
    Facts f;
    f.w = block_work(g, lo, hi, a.N, a.clean_logits);
    f.max_s = max_s;
    f.min_e = min_e;
    return f;
  }

  // ----------------------------------------------------------------------------------------------
  // Memory: LDS DMA of a stage (kernel: stage_load + issue_*), buffer stores.
  // ----------------------------------------------------------------------------------------------
  void load_stage(const Facts& f, int i, int i_end, int slot) {
    const bool live = i < i_end;
    const int k0 = f.w.lo + i * g.stage_keys;
    uint8_t* s = ring.data() + size_t(slot) * g.slot_bytes;
    for (int wave = 0; wave < kWaves; ++wave) {
      const int m0 = dma_m0(g, wave);
      // K: resource base kv + k0 * 128, num_records (N - k0) * 128 (0 when not live).
      const uint64_t nk = live ? uint64_t(a.N - k0) * kKeyBytes : 0;
      for (int d = 0; d < g.dmas_per_wave; ++d)
        for (int lane = 0; lane < L; ++lane) {
          const uint64_t off = uint64_t(dma_voffset(g, wave, d, lane)) + dma_inst_offset(d);
          uint8_t* dst = s + m0 + dma_inst_offset(d) + kChunkBytes * lane;
          if (buffer_in_range(off, kChunkBytes, nk))
            std::memcpy(dst, a.kv + int64_t(k0) * kKeyBytes + int64_t(off), kChunkBytes);
          else
            std::memset(dst, 0, kChunkBytes);
        }
      // kv_scale: base scales + (k0 + first key) * 4 - inst, num_records (N - key) * 4 + inst.
      const int key_s = k0 + scale_first_key(g, wave);
      const int inst = scale_inst_offset(g);
      const uint64_t ns = live && key_s < a.N ? uint64_t(a.N - key_s) * 4 + inst : 0;
      for (int lane = 0; lane < L; ++lane) {
        const uint64_t off = uint64_t(lane) * 4 + inst;
        float v = 0.f;
        if (buffer_in_range(off, 4, ns)) v = a.kv_scales[int64_t(key_s) + lane];
        std::memcpy(s + m0 + inst + 4 * lane, &v, 4);
      }
    }
  }

  void store(float v, const Rsrc& r, uint32_t off) {
    if (!buffer_in_range(off, 4, r.num_records)) return;
    a.out[(r.base + off) / 4] = v;
  }
  Rsrc row_rsrc(int row, int k0, bool live) const {
    Rsrc r;
    r.base = int64_t(row < 0 ? 0 : row) * a.out_stride * 4 + int64_t(k0) * 4;
    r.num_records = live && row >= 0 ? uint32_t(a.N - k0) * 4 : 0;
    return r;
  }

  // ----------------------------------------------------------------------------------------------
  // One wave's registers, as 64-lane arrays.
  // ----------------------------------------------------------------------------------------------
  using Lanes = float[L];
  struct Frag {  // v8i: 32 bytes per lane
    uint8_t b[L][32];
  };
  struct Acc {  // v16f
    float v[L][16];
  };
  struct Chains {
    float v[kSubTiles][kTilesPerWave][2][L];  // [sub-tile][row of wave][even/odd][lane]
  };
  struct Carry {
    Acc acc;
    Chains part;
    float scale[kSubTiles][L];
    int k0;
    bool live;
  };
  struct WaveState {
    int wave;
    Frag qa[kTilesPerWave][kSteps];
    float w[kTilesPerWave][16][L];
    int row[kTilesPerWave];
    Carry cy;
  };

  void mfma(Acc& c, const Frag& A, const Frag& B, bool zero) const {
    float av[32][64], bv[64][32];
    for (int lane = 0; lane < L; ++lane)
      for (int byte = 0; byte < 32; ++byte) {
        const int k = hw_k(kmap, lane / 32, byte);
        av[lane % 32][k] = kFp8.v[A.b[lane][byte]];
        bv[k][lane % 32] = kFp8.v[B.b[lane][byte]];
      }
    for (int lane = 0; lane < L; ++lane)
      for (int v = 0; v < 16; ++v) {
        const int i = c_row(lane, v), j = c_col(lane);
        float s = zero ? 0.f : c.v[lane][v];
        for (int k = 0; k < kStepK; ++k) s += av[i][k] * bv[k][j];
        c.v[lane][v] = s;
      }
  }

  void load_rows(WaveState& W) const {
    for (int r = 0; r < g.rows_per_wave; ++r) W.row[r] = rows[wave_row_slot(g, W.wave, r)].row;
    for (int t = 0; t < kTilesPerWave; ++t) {
      const int rr = tile_row(g, t);
      const int row = W.row[rr] >= 0 ? W.row[rr] : 0;
      for (int lane = 0; lane < L; ++lane) {
        const int head = tile_head0(g, t) + lane % 32;
        const uint8_t* qrow = a.q + (int64_t(row) * a.H + head) * kHeadDim;
        for (int s = 0; s < kSteps; ++s) {
          std::memcpy(W.qa[t][s].b[lane], qrow + frag_chunk(lane, s, 0) * kChunkBytes, 16);
          std::memcpy(W.qa[t][s].b[lane] + 16, qrow + frag_chunk(lane, s, 1) * kChunkBytes, 16);
        }
        for (int v = 0; v < 16; ++v)
          W.w[t][v][lane] = a.weights[int64_t(row) * a.weights_stride + tile_head0(g, t) + c_row(lane, v)];
      }
    }
  }

  void read_b(Frag (&b)[kSteps], int slot, int wave, int j) const {
    const uint8_t* s = ring.data() + size_t(slot) * g.slot_bytes;
    const int sub0 = wave_subtile(g, wave, 0);
    for (int st = 0; st < kSteps; ++st)
      for (int lane = 0; lane < L; ++lane) {
        std::memcpy(b[st].b[lane], s + b_read_offset(g, sub0, lane, st, 0) + j * subtile_stride(g), 16);
        std::memcpy(b[st].b[lane] + 16, s + b_read_offset(g, sub0, lane, st, 1) + j * subtile_stride(g), 16);
      }
  }

  void epilogue(const Acc& acc, int t, const WaveState& W, float (&chain)[kTilesPerWave][2][L]) const {
    const int r = tile_row(g, t);
    const bool first = t % g.head_tiles == 0;
    for (int lane = 0; lane < L; ++lane)
      for (int v = 0; v < 16; ++v) {
        const float x = std::fmax(acc.v[lane][v], 0.f);
        float& ch = chain[r][v & 1][lane];
        ch = (first && v < 2) ? x * W.w[t][v][lane] : std::fmaf(x, W.w[t][v][lane], ch);
      }
  }

  static void permlane32_swap(float (&x)[L], float (&y)[L]) {
    float nx[L], ny[L];
    for (int l = 0; l < 32; ++l) {
      nx[l] = x[l];
      nx[l + 32] = y[l];
      ny[l] = x[l + 32];
      ny[l + 32] = y[l + 32];
    }
    std::memcpy(x, nx, sizeof nx);
    std::memcpy(y, ny, sizeof ny);
  }

  // Kernel: reduce_two (asm) via reduce_group; then store_group / store_pair.
  void reduce_group(int k, Chains& part, const float (&scale)[kSubTiles][L]) const {
    const int jx = tail_subtile(g, 2 * k), px = tail_pair(g, 2 * k);
    const int jy = tail_subtile(g, 2 * k + 1), py = tail_pair(g, 2 * k + 1);
    float(&axe)[L] = part.v[jx][2 * px][0];
    float(&bxe)[L] = part.v[jx][2 * px + 1][0];
    float(&aye)[L] = part.v[jy][2 * py][0];
    float(&bye)[L] = part.v[jy][2 * py + 1][0];
    for (int l = 0; l < L; ++l) {
      axe[l] += part.v[jx][2 * px][1][l];
      bxe[l] += part.v[jx][2 * px + 1][1][l];
      aye[l] += part.v[jy][2 * py][1][l];
      bye[l] += part.v[jy][2 * py + 1][1][l];
    }
    permlane32_swap(axe, bxe);
    for (int l = 0; l < L; ++l) axe[l] *= scale[jx][l];
    permlane32_swap(aye, bye);
  }
  void store_group(bool masked, int k, const Chains& part, const float (&scale)[kSubTiles][L],
                   int k0, bool live, const WaveState& W) {
    const int jx = tail_subtile(g, 2 * k), px = tail_pair(g, 2 * k);
    const int jy = tail_subtile(g, 2 * k + 1), py = tail_pair(g, 2 * k + 1);
    float vx[L], vy[L];
    for (int l = 0; l < L; ++l) {
      vx[l] = std::fmaf(part.v[jx][2 * px + 1][0][l], scale[jx][l], part.v[jx][2 * px][0][l]);
      vy[l] = (part.v[jy][2 * py][0][l] + part.v[jy][2 * py + 1][0][l]) * scale[jy][l];
    }
    store_pair(masked, vx, jx, px, k0, live, W);
    store_pair(masked, vy, jy, py, k0, live, W);
  }
  void store_pair(bool masked, const float (&v)[L], int j, int p, int k0, bool live, const WaveState& W) {
    const Rsrc ra = row_rsrc(W.row[2 * p], k0, live), rb = row_rsrc(W.row[2 * p + 1], k0, live);
    const int sub0 = wave_subtile(g, W.wave, 0);
    for (int lane = 0; lane < L; ++lane) {
      float x = v[lane];
      uint32_t off_a = store_offset(sub0, lane, 0), off_b = store_offset(sub0, lane, 1);
      if (masked) {
        const RowInfo& w = rows[wave_row_slot(g, W.wave, 2 * p + (lane < 32 ? 0 : 1))];
        const int n = k0 + wave_subtile(g, W.wave, j) * kTileCols + lane % 32;
        const bool in = n >= w.s && n < w.e;
        const bool keep = in || a.clean_logits;
        x = in ? x : -INFINITY;
        off_a = keep ? off_a : kOutOfRange;
        off_b = keep ? off_b : kOutOfRange;
      }
      store(x, ra, off_a + j * kTileCols * 4);
      store(x, rb, off_b + j * kTileCols * 4);
    }
  }

  static bool tail_deferred(const Geometry& g, int k) { return tail_subtile(g, 2 * k + 1) == kSubTiles - 1; }

  // Kernel: stage_body (one wave).
  void stage_body(bool masked, int k0, int slot, WaveState& W) {
    constexpr int T = kTilesPerWave;
    constexpr int STEPS = kSubTiles * T;
    const int TAILS = kSubTiles * g.pairs_per_wave;
    const uint8_t* s = ring.data() + size_t(slot) * g.slot_bytes;
    float scale[kSubTiles][L];
    for (int j = 0; j < kSubTiles; ++j)
      for (int lane = 0; lane < L; ++lane)
        std::memcpy(&scale[j][lane], s + scale_read_offset(g, W.wave, j, lane), 4);
    Frag b[kSubTiles][kSteps];
    read_b(b[0], slot, W.wave, 0);
    Chains part;
    Acc acc[2];
    for (int n = 0; n < STEPS; ++n) {
      const int j = n / T, t = n % T;
      bool pending[8] = {};
      for (int k = 0; k < TAILS / 2; ++k) {
        if (n == 1 && tail_deferred(g, k)) {
          reduce_group(k, W.cy.part, W.cy.scale);
          pending[k] = true;
        } else if (n > 1 && !tail_deferred(g, k) && n == (tail_subtile(g, 2 * k + 1) + 1) * T + 1) {
          reduce_group(k, part, scale);
          pending[k] = true;
        }
      }
      mfma(acc[n & 1], W.qa[t][0], b[j][0], true);
      mfma(acc[n & 1], W.qa[t][1], b[j][1], false);
      if (t == T - 1 && j + 1 < kSubTiles) read_b(b[j + 1], slot, W.wave, j + 1);
      if (n == 0) {
        epilogue(W.cy.acc, T - 1, W, W.cy.part.v[kSubTiles - 1]);
      } else {
        const int m = n - 1;
        epilogue(acc[m & 1], m % T, W, part.v[m / T]);
      }
      for (int k = 0; k < TAILS / 2; ++k) {
        if (!pending[k]) continue;
        if (tail_deferred(g, k))
          store_group(masked, k, W.cy.part, W.cy.scale, W.cy.k0, W.cy.live, W);
        else
          store_group(masked, k, part, scale, k0, true, W);
      }
    }
    W.cy.acc = acc[(STEPS - 1) & 1];
    W.cy.part = part;
    std::memcpy(W.cy.scale, scale, sizeof scale);
    W.cy.k0 = k0;
    W.cy.live = true;
  }

  void drain(WaveState& W) {
    epilogue(W.cy.acc, kTilesPerWave - 1, W, W.cy.part.v[kSubTiles - 1]);
    for (int k = 0; k < kSubTiles * g.pairs_per_wave / 2; ++k)
      if (tail_deferred(g, k)) {
        reduce_group(k, W.cy.part, W.cy.scale);
        store_group(true, k, W.cy.part, W.cy.scale, W.cy.k0, W.cy.live, W);
      }
  }

  // Kernel: compute_stages + stage_loop. All waves step through the stages together.
  void compute_stages(const Facts& f, int i_begin, int i_end) {
    const int S = g.stage_keys, D = kPrefetchStages;
    for (int d = 0; d < D; ++d) load_stage(f, i_begin + d, i_end, d);
    std::vector<WaveState> waves(kWaves);
    for (int w = 0; w < kWaves; ++w) {
      WaveState& W = waves[w];
      W.wave = w;
      load_rows(W);
      std::memset(&W.cy, 0, sizeof W.cy);
      W.cy.live = false;
    }
    const int c0 = f.max_s > f.w.lo ? div_up(f.max_s - f.w.lo, S) : 0;
    const int c1 = f.min_e - f.w.lo >= S ? (f.min_e - f.w.lo - S) / S : -1;
    const int clean_begin = std::min(std::max(i_begin >= c0 ? i_begin : c0 + 1, i_begin), i_end);
    const int clean_end = std::min(std::max(c1 + 1, clean_begin), i_end);
    int rd = 0;
    for (int i = i_begin; i < i_end; ++i) {
      const int wr = rd == 0 ? g.slots - 1 : rd - 1;
      load_stage(f, i + D, i_end, wr);
      const bool masked = !(i >= clean_begin && i < clean_end);
      for (WaveState& W : waves) stage_body(masked, f.w.lo + i * S, rd, W);
      rd = rd + 1 == g.slots ? 0 : rd + 1;
    }
    for (WaveState& W : waves) drain(W);
  }

  // Kernel: fill (all 512 threads of the workgroup).
  void fill(const Facts& f, int u_begin, int u_end) {
    for (int u = u_begin; u < u_end; ++u)
      for (int rs = 0; rs < g.block_rows; ++rs) {
        const Rsrc r = row_rsrc(rows[rs].row, 0, true);
        for (int k = 0; k < g.fill_cols / kThreads; ++k)
          for (int tid = 0; tid < kThreads; ++tid) {
            const int fi = u * g.fill_cols + k * kThreads + tid;
            const uint32_t off = fi < f.w.fill_total ? uint32_t(fill_column(f.w, fi)) * 4u : kOutOfRange;
            store(-INFINITY, r, off);
          }
      }
  }

  void segment(bool compute, int b, int u_begin, int u_end, bool balanced) {
    const Facts f = setup_block(b, balanced);
    const SegmentWork sw = segment_work(f.w, u_begin, u_end);
    if (compute) {
      if (sw.stage_begin < sw.stage_end) compute_stages(f, sw.stage_begin, sw.stage_end);
    } else {
      if (sw.fill_begin < sw.fill_end) fill(f, sw.fill_begin, sw.fill_end);
    }
  }

  void pass(bool compute, bool balanced, int b0, int u0, int u1) {
    int b = b0;
    if (balanced) {
      int lo = 0, hi = blocks - 1;
      while (lo < hi) {
        const int mid = (lo + hi + 1) >> 1;
        if (bpre[mid] <= u0) lo = mid; else hi = mid - 1;
      }
      b = lo;
    }
    for (int u = u0; u < u1 && b < blocks; ++b) {
      const int base = balanced ? bpre[b] : 0;
      const int next = balanced ? bpre[b + 1] : u1;
      if (next > u) segment(compute, b, u - base, std::min(u1, next) - base, balanced);
      u = std::max(u, next);
    }
  }

  // Kernel: run, for every workgroup of the grid. Returns the number of segments it processed.
  int run_all(std::vector<int>* wg_units) {
    int segments = 0;
    if (lp.balanced) {
      build_plan();
      const int total = bpre[blocks];
      for (int wg = 0; wg < lp.grid_x; ++wg) {
        const int u0 = int(share_begin(total, lp.grid_x, wg));
        const int u1 = int(share_begin(total, lp.grid_x, wg + 1));
        if (wg_units) wg_units->push_back(u1 - u0);
        if (u0 >= u1) continue;
        pass(true, true, 0, u0, u1);
        pass(false, true, 0, u0, u1);
        ++segments;
      }
    } else {
      for (int y = 0; y < lp.grid_y; ++y)
        for (int bx = 0; bx < lp.grid_x; ++bx) {
          const int b0 = lp.reverse_rows ? blocks - 1 - bx : bx;
          const int units = setup_block(b0, false).w.units;
          const int u0 = int(share_begin(units, lp.split_n, y));
          const int u1 = int(share_begin(units, lp.split_n, y + 1));
          if (wg_units) wg_units->push_back(u1 - u0);
          if (u0 >= u1) continue;
          pass(true, false, b0, u0, u1);
          pass(false, false, b0, u0, u1);
          ++segments;
        }
    }
    return segments;
  }
};

}  // namespace

extern "C" {

// Runs the whole grid; returns the number of non-empty workgroups, or -1 on bad arguments.
int gfx950_emulate(const uint8_t* q, const uint8_t* kv, const float* scales, const float* w,
                   const int32_t* ks, const int32_t* ke, float* out, int M, int N, int H,
                   long long w_stride, long long out_stride, int clean, int split_n, int num_cus,
                   int kmap_variant, int* plan_out) {
  if ((H != 32 && H != 64) || M <= 0 || N <= 0 || N > kMaxKeys) return -1;
  Fp8MqaLogitsParams a{q, kv, scales, w, ks, ke, out, M, N, H, kHeadDim, w_stride, out_stride, clean != 0};
  Emulator emu(a, split_n, num_cus, kmap_variant);
  if (plan_out) {
    plan_out[0] = emu.lp.small;
    plan_out[1] = emu.lp.balanced;
    plan_out[2] = emu.lp.grid_x;
    plan_out[3] = emu.lp.grid_y;
    plan_out[4] = emu.lp.split_n;
  }
  return emu.run_all(nullptr);
}

// The balanced plan alone (no compute): per workgroup, the real units it processes (stages and
// fill units, not the virtual overhead units) and its compute segments (Q/w loads, pipeline).
// Returns the total number of units (virtual ones included), or -1.
int gfx950_balanced_plan(const int32_t* ks, const int32_t* ke, int M, int N, int H, int clean,
                         int num_cus, int* wg_units, int* wg_segments) {
  if ((H != 32 && H != 64) || M <= 0 || N <= 0) return -1;
  Fp8MqaLogitsParams a{};
  a.ks = ks;
  a.ke = ke;
  a.M = M;
  a.N = N;
  a.H = H;
  a.D = kHeadDim;
  a.clean_logits = clean != 0;
  Emulator emu(a, 0, num_cus, 0);
  if (!emu.lp.balanced) return -1;
  emu.build_plan();
  const int total = emu.bpre[emu.blocks];
  for (int wg = 0; wg < emu.lp.grid_x; ++wg) {
    const int u0 = int(share_begin(total, emu.lp.grid_x, wg));
    const int u1 = int(share_begin(total, emu.lp.grid_x, wg + 1));
    int real = 0, segs = 0;
    for (int b = 0; b < emu.blocks; ++b) {
      const int base = emu.bpre[b], next = emu.bpre[b + 1];
      if (next <= u0 || base >= u1) continue;
      const SegmentWork sw = segment_work(emu.setup_block(b, true).w, std::max(u0, base) - base,
                                          std::min(u1, next) - base);
      real += (sw.stage_end - sw.stage_begin) + (sw.fill_end - sw.fill_begin);
      segs += sw.stage_begin < sw.stage_end;
    }
    wg_units[wg] = real;
    wg_segments[wg] = segs;
  }
  return total;
}

// The fp8 e4m3fn decode the emulator uses (checked against torch by the tests).
float gfx950_fp8_to_float(int b) { return kFp8.v[b & 255]; }

}  // extern "C"
