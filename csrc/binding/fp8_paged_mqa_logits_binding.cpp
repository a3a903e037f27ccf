// ATen binding of the decode op fp8_paged_mqa_logits and of its metadata, get_paged_mqa_logits_metadata
// (module_fp8_mqa_logits).
//
//   logits[b * next_n + j, p] = sum_h relu(scale(b, p) * Q[b,j,h,:] . K(b, p)) * w[b * next_n + j, h]
//                               for p < keys(b, j); -inf after it up to max_context_len when
//                               clean_logits (else unspecified; the CPU path leaves it untouched)
//   keys(b, j) = context_lens[b] - next_n + j + 1 ([B] lens) or context_lens[b, j] ([B, next_n] lens),
//                clamped to [0, max_context_len]; K(b, p): slot p % block_kv of block block_table[b, p / block_kv]
//
// This file only validates the arguments against the contract (docs/operator.md, "The decode op"),
// fills aiter::Fp8PagedMqaLogitsParams (every tensor's layout is at the top of
// common/fp8_paged_mqa_logits_params.h) and hands them to the CPU path or to the paged kernel of the
// tensors' GPU (the attached entries of gpu_backends.h: sm90; another GPU is a NotImplementedError
// saying which backends have a paged kernel). Errors name the argument: TypeError for a dtype, ValueError for a
// rank, shape, stride, size, a logits size beyond 2^48 bytes, or a block_table entry a row needs that
// is no block of kv_cache (the backends check each entry where they read it: the CPU path refuses
// the call after its kernel, a GPU kernel records the entry and a later call or check_block_table
// refuses it), NotImplementedError for a device or option no compiled kernel serves, RuntimeError for
// mixed devices, OutOfMemoryError naming max_context_len when the logits cannot be allocated. The
// fake kernels in aiter/ops/fp8_paged_mqa_logits.py repeat these checks on metadata, in the same
// order and words: change both together.
#include <ATen/core/Tensor.h>
#include <c10/core/DeviceGuard.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>

#include "binding/checks.h"
#include "binding/empty_tensor.h"
#include "binding/gpu_backends.h"
#include "binding/ops.h"
#include "common/fp8_paged_mqa_logits_params.h"
#include "common/work_scheduler.h"
#include "cpu/fp8_paged_mqa_logits_cpu.h"

namespace {

using namespace aiter::checks;

constexpr const char kOp[] = "fp8_paged_mqa_logits: ";
constexpr const char kMetadataOp[] = "get_paged_mqa_logits_metadata: ";

// context_lens and block_table are int32 (DeepGEMM's and vLLM's); an int64 one gets the fix in the message.
void check_int32(const char* op, const at::Tensor& t, const char* name) {
  check_dtype(op, t, name, at::kInt, "torch.int32",
              t.scalar_type() == at::kLong ? " (int64 is not accepted: pass .to(torch.int32))" : "");
}

// context_lens: [B] (one length per batch) or [B, next_n] (one per row); returns whether per row.
bool check_context_lens_rank(const char* op, const at::Tensor& context_lens) {
  TORCH_CHECK_VALUE(context_lens.dim() == 1 || context_lens.dim() == 2, op,
                    "context_lens must be 1-D [B] or 2-D [B, next_n], got shape ", context_lens.sizes());
  return context_lens.dim() == 2;
}

// The attached GPU backend with a paged kernel that runs on `device`, or a NotImplementedError naming
// what is missing. `first_name` is the argument whose device decides (q, or context_lens).
const aiter::PagedGpuBackend& paged_backend_for(const char* op, const char* first_name, const at::Device& device) {
  const auto& table = aiter::paged_gpu_backends();
  TORCH_CHECK_NOT_IMPLEMENTED(table.size() > 0, op, first_name, " is on ", device, ", but ", aiter::kNoGpuBackendHint,
                              " (a paged decode kernel exists for sm90, not yet for gfx950); pass CPU tensors");
  std::string why_not;
  const aiter::PagedGpuBackend* backend = aiter::find_backend(table, device.index(), &why_not);
  TORCH_CHECK_NOT_IMPLEMENTED(backend != nullptr, op, "no paged kernel for ", device, ": ", why_not,
                              "; use CPU tensors");
  return *backend;
}


// DeepGEMM's row pitch for the paged op's logits, which callers read through logits.stride(0)
// (vLLM's top-k kernels do): a multiple of 256 elements and of 1024 bytes.
int64_t paged_pitch_multiple(int64_t itemsize) { return std::max<int64_t>(256, 1024 / itemsize); }

// Refuses a [rows, cols] result beyond kMaxLogitsBytes, naming max_context_len.
void check_logits_size(int64_t rows, int64_t cols, at::ScalarType dtype) {
  const int64_t itemsize = static_cast<int64_t>(c10::elementSize(dtype));
  const int64_t multiple = paged_pitch_multiple(itemsize);
  bool fits = cols <= kMaxLogitsBytes / itemsize;
  if (fits) {
    const int64_t row_bytes = std::max<int64_t>(1, (cols + multiple - 1) / multiple) * multiple * itemsize;
    fits = rows == 0 || row_bytes <= kMaxLogitsBytes / rows;
  }
  TORCH_CHECK_VALUE(fits, kOp, "the logits [B * next_n = ", rows, ", max_context_len = ", cols,
                    "] would take more than 2^48 bytes (rows padded to a multiple of ", multiple,
                    " elements): max_context_len (or B * next_n) is too large");
}

// A new [rows, cols] logits tensor with that row pitch (check_logits_size passed); an allocation
// failure names max_context_len.
at::Tensor allocate_paged_logits(int64_t rows, int64_t cols, const at::TensorOptions& options) {
  const int64_t itemsize = static_cast<int64_t>(c10::elementSize(options.dtype().toScalarType()));
  const int64_t multiple = paged_pitch_multiple(itemsize);
  const int64_t pitch = std::max<int64_t>(1, (cols + multiple - 1) / multiple) * multiple;
  at::Tensor buffer;
  try {
    buffer = aiter::empty_tensor({rows, pitch}, options);
  } catch (const c10::Error& e) {
    TORCH_CHECK_WITH(OutOfMemoryError, false, kOp, "cannot allocate the logits [B * next_n = ", rows,
                     ", max_context_len = ", cols, "] (", rows * pitch * itemsize, " bytes with the row pitch) on ",
                     options.device(), ": max_context_len (or B * next_n) is too large for its memory (",
                     e.what_without_backtrace(), ")");
  }
  return buffer.narrow(1, 0, cols);
}

// The error of an out-of-range block_table entry the CPU path read (common/fp8_paged_mqa_logits_params.h).
[[noreturn]] void refuse_bad_block(const aiter::Fp8PagedMqaLogitsParams& p, const aiter::PagedBlockTableFault& fault) {
  const int64_t keys = aiter::scheduler::paged_batch_keys(p.context_lens, fault.batch, p.next_n, p.lens_per_row,
                                                          p.max_context_len);
  TORCH_CHECK_VALUE(false, kOp, "block_table[", fault.batch, ", ", fault.column, "] = ", fault.value,
                    " is not a block of kv_cache (num_blocks = ", fault.num_blocks, "), but batch ", fault.batch,
                    " sees ", keys, " keys, which are in its first ", aiter::scheduler::ceil_div(keys, p.block_kv),
                    " blocks (entries past a batch's last visible block are never read)");
  __builtin_unreachable();
}

// The bad block_table entry that earlier calls on a GPU read and their kernel recorded (a kernel
// cannot raise: it reads no memory through the entry, writes NaN for its keys and records it).
void refuse_recorded_bad_block(const char* op, const aiter::PagedBlockTableFault& fault, const at::Device& device) {
  TORCH_CHECK_VALUE(false, op, "an earlier fp8_paged_mqa_logits call on ", device, " read block_table[",
                    fault.batch, ", ", fault.column, "] = ", fault.value, ", which is not a block of kv_cache "
                    "(num_blocks = ", fault.num_blocks, "): that call's logits of the entry's keys are NaN. It is "
                    "reported now because the GPU does not stop for it; check_block_table(device) synchronises with "
                    "the device's current stream and reports at once (docs/operator.md, \"Bad block_table "
                    "entries\")");
}

// Raises the bad entry that earlier calls on `device` recorded; with `wait` it first synchronises with
// the current stream, else it reads the record as it is (no synchronisation).
void check_recorded_bad_block(const char* op, const aiter::PagedGpuBackend& backend, const at::Device& device,
                              bool wait) {
  aiter::PagedBlockTableFault fault{};
  const char* err =
      backend.take_block_table_fault(device.index(), backend.current_stream(device.index()), wait, &fault);
  TORCH_CHECK(err == nullptr, op, backend.name, " failed on ", device, ": ", err);
  if (fault.found != 0) refuse_recorded_bad_block(op, fault, device);
}

}  // namespace

namespace aiter {

at::Tensor get_paged_mqa_logits_metadata(const at::Tensor& context_lens, int64_t block_kv, int64_t num_sms) {
  check_defined(kMetadataOp, context_lens, "context_lens");
  TORCH_CHECK_VALUE(block_kv >= 1, kMetadataOp, "block_kv must be >= 1 (keys per cache block), got ", block_kv);
  TORCH_CHECK_VALUE(block_kv <= kInt32Max, kMetadataOp, "block_kv must be <= 2^31 - 1 (context lengths are int32, "
                    "so no row sees more keys than that), got ", block_kv);
  TORCH_CHECK_VALUE(num_sms >= 1 && num_sms < kInt32Max, kMetadataOp,
                    "num_sms must be >= 1 and < 2^31 - 1 (the number of work shares: the GPU's SM count), got ",
                    num_sms);
  check_int32(kMetadataOp, context_lens, "context_lens");
  const bool lens_per_row = check_context_lens_rank(kMetadataOp, context_lens);
  const int64_t batches = context_lens.size(0);
  const int64_t next_n = lens_per_row ? context_lens.size(1) : 1;
  TORCH_CHECK_VALUE(batches <= kInt32Max, kMetadataOp, "context_lens has B = ", batches,
                    " batches; the metadata stores batch indices as int32");
  const at::Device device = context_lens.device();
  TORCH_CHECK_NOT_IMPLEMENTED(device.is_cpu() || device.is_cuda(), kMetadataOp, "context_lens is on ", device,
                              ", which has no kernel here (cpu or cuda tensors only; the fake kernel of "
                              "torch.ops.aiter.get_paged_mqa_logits_metadata handles meta tensors)");
  check_contiguous(kMetadataOp, context_lens, "context_lens");
  const aiter::PagedGpuBackend* backend =
      device.is_cpu() ? nullptr : &paged_backend_for(kMetadataOp, "context_lens", device);

  const c10::DeviceGuard guard(device);
  at::Tensor schedule_meta = aiter::empty_tensor({num_sms + 1, 2}, context_lens.options());
  if (backend == nullptr) {
    aiter::paged_mqa_logits_metadata_cpu(context_lens.data_ptr<int32_t>(), batches, next_n, lens_per_row, block_kv,
                                         num_sms, schedule_meta.data_ptr<int32_t>());
  } else {
    const char* err = backend->metadata(context_lens.data_ptr<int32_t>(), batches, next_n, lens_per_row, block_kv,
                                        num_sms, schedule_meta.data_ptr<int32_t>(), device.index(),
                                        backend->current_stream(device.index()));
    TORCH_CHECK(err == nullptr, kMetadataOp, backend->name, " launch failed on ", device, ": ", err);
  }
  return schedule_meta;
}

at::Tensor fp8_paged_mqa_logits(const at::Tensor& q, const at::Tensor& kv_cache, const at::Tensor& weights,
                                const at::Tensor& context_lens, const at::Tensor& block_table,
                                const at::Tensor& schedule_meta, int64_t max_context_len, bool clean_logits,
                                const std::string& logits_dtype) {
  check_defined(kOp, q, "q");
  check_defined(kOp, kv_cache, "kv_cache");
  check_defined(kOp, weights, "weights");
  check_defined(kOp, context_lens, "context_lens");
  check_defined(kOp, block_table, "block_table");
  check_defined(kOp, schedule_meta, "schedule_meta");
  TORCH_CHECK_VALUE(max_context_len >= 0 && max_context_len <= kInt32Max, kOp,
                    "max_context_len must be >= 0 and fit in int32 (the logits' columns), got ", max_context_len);
  TORCH_CHECK_VALUE(logits_dtype.empty() || logits_dtype == "float32" || logits_dtype == "bfloat16", kOp,
                    "logits_dtype must be torch.float32 or torch.bfloat16, got ", logits_dtype);
  const bool bf16_logits = logits_dtype == "bfloat16";

  check_fp8(kOp, q, "q");
  check_dtype(kOp, kv_cache, "kv_cache", at::kByte, "torch.uint8",
              " (each block's bytes: block_kv keys of D e4m3fn bytes, then block_kv float32 scales)");
  check_dtype(kOp, weights, "weights", at::kFloat, "torch.float32");
  check_int32(kOp, context_lens, "context_lens");
  check_int32(kOp, block_table, "block_table");
  check_dtype(kOp, schedule_meta, "schedule_meta", at::kInt, "torch.int32");

  check_dim(kOp, q, "q", 4, "[B, next_n, H, D]");
  check_dim(kOp, kv_cache, "kv_cache", 4, "[num_blocks, block_kv, 1, D + 4]");
  check_dim(kOp, weights, "weights", 2, "[B * next_n, H]");
  const bool lens_per_row = check_context_lens_rank(kOp, context_lens);
  check_dim(kOp, block_table, "block_table", 2, "[B, max_blocks]");
  check_dim(kOp, schedule_meta, "schedule_meta", 2, "[num_sms + 1, 2]");
  const int64_t B = q.size(0), next_n = q.size(1), H = q.size(2), D = q.size(3);
  TORCH_CHECK_VALUE(next_n >= 1 && H >= 1 && D >= 1, kOp,
                    "q must have next_n >= 1 tokens per batch, H >= 1 heads and head dim D >= 1, got shape ",
                    q.sizes());
  TORCH_CHECK_VALUE(H <= kInt32Max && D <= kInt32Max - 4, kOp, "q's H and D must fit in int32, got shape ",
                    q.sizes());
  const int64_t num_blocks = kv_cache.size(0), block_kv = kv_cache.size(1);
  TORCH_CHECK_VALUE(block_kv >= 1, kOp, "kv_cache must have block_kv >= 1 keys per block, got shape ",
                    kv_cache.sizes());
  TORCH_CHECK_VALUE(block_kv <= kInt32Max, kOp, "kv_cache must have block_kv <= 2^31 - 1 keys per block (context "
                    "lengths are int32, so no row sees more keys than that), got shape ", kv_cache.sizes());
  check_size(kOp, kv_cache, "kv_cache", 2, 1, "one K head");
  check_size(kOp, kv_cache, "kv_cache", 3, D + 4, "D + 4 (q's head dim D, then a float32 scale)");
  check_size(kOp, weights, "weights", 0, B * next_n, "q's B * next_n");
  check_size(kOp, weights, "weights", 1, H, "q's H");
  check_size(kOp, context_lens, "context_lens", 0, B, "q's B");
  if (lens_per_row) check_size(kOp, context_lens, "context_lens", 1, next_n, "q's next_n");
  check_size(kOp, block_table, "block_table", 0, B, "q's B");
  const int64_t max_blocks = block_table.size(1);
  // Every key a row may see (p < max_context_len) has a column of its batch's block table.
  TORCH_CHECK_VALUE(max_blocks * block_kv >= max_context_len, kOp, "block_table has ", max_blocks,
                    " columns of block_kv = ", block_kv, " keys, fewer than max_context_len = ", max_context_len,
                    " keys; a row may see up to max_context_len keys, so it needs at least ",
                    (max_context_len + block_kv - 1) / block_kv, " columns");
  check_size(kOp, schedule_meta, "schedule_meta", 1, 2, "2 (batch, block)");
  TORCH_CHECK_VALUE(schedule_meta.size(0) >= 2, kOp,
                    "schedule_meta must have num_sms + 1 >= 2 rows (from get_paged_mqa_logits_metadata), got shape ",
                    schedule_meta.sizes());

  const at::Device device = q.device();
  TORCH_CHECK_NOT_IMPLEMENTED(device.is_cpu() || device.is_cuda(), kOp, "q is on ", device,
                              ", which has no kernel here (cpu or cuda tensors only; the fake kernel of "
                              "torch.ops.aiter.fp8_paged_mqa_logits handles meta tensors)");
  check_same_device(kOp, kv_cache, "kv_cache", device);
  check_same_device(kOp, weights, "weights", device);
  check_same_device(kOp, context_lens, "context_lens", device);
  check_same_device(kOp, block_table, "block_table", device);
  check_same_device(kOp, schedule_meta, "schedule_meta", device);

  check_contiguous(kOp, q, "q");
  // A block's block_kv * (D + 4) bytes are dense; blocks may lie further apart (a cache allocated with
  // others), as DeepGEMM takes it.
  TORCH_CHECK_VALUE(kv_cache.stride(3) == 1 && (block_kv <= 1 || kv_cache.stride(1) == D + 4) &&
                        (num_blocks <= 1 || kv_cache.stride(0) >= block_kv * (D + 4)),
                    kOp, "kv_cache must hold each block's block_kv * (D + 4) bytes densely (stride(3) == 1, "
                    "stride(1) == D + 4 = ", D + 4, ", stride(0) >= block_kv * (D + 4) = ", block_kv * (D + 4),
                    "), got strides ", kv_cache.strides());
  check_row_major(kOp, weights, "weights", "H");
  check_contiguous(kOp, context_lens, "context_lens");
  check_row_major(kOp, block_table, "block_table", "max_blocks");
  check_contiguous(kOp, schedule_meta, "schedule_meta");

  const aiter::PagedGpuBackend* backend = device.is_cpu() ? nullptr : &paged_backend_for(kOp, "q", device);
  if (backend != nullptr) {
    TORCH_CHECK_NOT_IMPLEMENTED(backend->serves(H, D, block_kv, next_n), kOp, "the ", backend->name,
                                " paged kernel serves ", backend->serves_text, ", got q of shape ", q.sizes(),
                                " and block_kv = ", block_kv, "; use CPU tensors");
    // The GPU kernels read q and the cache's blocks with TMA: 16-byte aligned bases and block strides.
    const int64_t block_stride = num_blocks > 1 ? kv_cache.stride(0) : block_kv * (D + 4);
    TORCH_CHECK_VALUE(block_stride % 16 == 0, kOp, "kv_cache's blocks must lie a multiple of 16 bytes apart on ",
                      device, " (the GPU kernel reads them with TMA), got kv_cache.stride(0) = ", block_stride);
    TORCH_CHECK_VALUE(reinterpret_cast<uintptr_t>(kv_cache.data_ptr()) % 16 == 0 &&
                          reinterpret_cast<uintptr_t>(q.data_ptr()) % 16 == 0,
                      kOp, "q and kv_cache must start 16-byte aligned on ", device, " (the GPU kernel reads them with TMA)");
    TORCH_CHECK_VALUE(schedule_meta.size(0) == backend->num_shares(device.index()) + 1, kOp,
                      "schedule_meta must have num_sms + 1 = ", backend->num_shares(device.index()) + 1,
                      " rows on ", device, " (get_paged_mqa_logits_metadata(context_lens, block_kv, num_sms) with "
                      "the device's SM count), got shape ", schedule_meta.sizes());
  }

  aiter::Fp8PagedMqaLogitsParams p{};
  p.q = static_cast<const uint8_t*>(q.data_ptr());
  p.kv_cache = static_cast<const uint8_t*>(kv_cache.data_ptr());
  p.weights = weights.data_ptr<float>();
  p.context_lens = context_lens.data_ptr<int32_t>();
  p.block_table = block_table.data_ptr<int32_t>();
  p.schedule_meta = schedule_meta.data_ptr<int32_t>();
  p.batches = B;
  p.next_n = next_n;
  p.H = static_cast<int32_t>(H);
  p.D = static_cast<int32_t>(D);
  p.num_blocks = num_blocks;
  p.block_kv = block_kv;
  p.kv_block_stride = num_blocks > 1 ? kv_cache.stride(0) : block_kv * (D + 4);
  p.max_blocks = max_blocks;
  p.block_table_stride = row_stride(block_table);
  p.weights_stride = row_stride(weights);
  p.max_context_len = max_context_len;
  p.num_shares = schedule_meta.size(0) - 1;
  p.logits_dtype = bf16_logits ? aiter::LogitsDtype::kBFloat16 : aiter::LogitsDtype::kFloat32;
  p.lens_per_row = lens_per_row;
  p.clean_logits = clean_logits;
  const at::ScalarType result_dtype = bf16_logits ? at::kBFloat16 : at::kFloat;
  check_logits_size(B * next_n, max_context_len, result_dtype);

  const c10::DeviceGuard guard(device);
  // A bad entry that an earlier call recorded on this GPU is reported before this call runs.
  if (backend != nullptr) check_recorded_bad_block(kOp, *backend, device, /*wait=*/false);
  at::Tensor result = allocate_paged_logits(B * next_n, max_context_len, q.options().dtype(result_dtype));
  p.out = result.data_ptr();
  p.out_stride = result.stride(0);
  if (B == 0 || max_context_len == 0) return result;
  if (backend == nullptr) {
    // The CPU path reads each block_table entry once, checked (another thread may be rewriting the
    // table): a bad one reads nothing, and the call is refused after the kernel.
    const aiter::PagedBlockTableFault fault = aiter::fp8_paged_mqa_logits_cpu(p);
    if (fault.found != 0) refuse_bad_block(p, fault);
  } else {
    const char* err = backend->launch(p, device.index(), backend->current_stream(device.index()));
    TORCH_CHECK(err == nullptr, kOp, backend->name, " launch failed on ", device, ": ", err);
  }
  return result;
}

// check_block_table(device): synchronises with the device's current stream and raises the bad
// block_table entry that the calls so far recorded. A CPU call refuses a bad entry itself.
void check_paged_block_table(const std::string& device_name) {
  const at::Device device(device_name);
  constexpr const char kCheckOp[] = "check_block_table: ";
  if (device.is_cpu()) return;
  TORCH_CHECK_NOT_IMPLEMENTED(device.is_cuda(), kCheckOp, device, " has no paged kernel here (cpu or cuda only)");
  const aiter::PagedGpuBackend& backend = paged_backend_for(kCheckOp, "device", device);
  const c10::DeviceGuard guard(device);
  check_recorded_bad_block(kCheckOp, backend, device, /*wait=*/true);
}

std::string paged_cpu_simd_variant() { return aiter::fp8_paged_mqa_logits_cpu_variant(); }

}  // namespace aiter
