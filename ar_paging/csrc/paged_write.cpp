// The CPU kernel of ar_paging::paged_write, without the dispatcher-to-Python trampoline.
//
// The op's schema, its fake and the kernel for every other device stay in
// ar_paging/paged_write.py (torch.library.Library): this file only adds a kernel
// for the CPU dispatch key, which the dispatcher prefers to the Python
// CompositeExplicitAutograd one. So under torch.compile the op is functionalized
// and re-inplaced exactly as before; only the call it lands on is C++.
//
// Every check mirrors ar_paging/paged_write.py (_check_shapes, _check_no_aliasing,
// _check_slot_values) with the same order and the same ValueError messages
// (tests/test_paged_write_native.py compares them string for string), all before
// anything is written. No device-to-host sync outside the opt-in debug mode.

#include <ATen/core/Tensor.h>
#include <ATen/ops/_unique2.h>
#include <ATen/record_function.h>
#include <c10/core/ScalarType.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace {

std::atomic<bool> g_debug_checks{false};

// ── Python-identical formatting (the messages must match the Python kernel's) ──

std::string py_tuple(c10::IntArrayRef sizes) {
  std::ostringstream out;
  out << "(";
  for (size_t i = 0; i < sizes.size(); ++i) {
    out << (i ? ", " : "") << sizes[i];
  }
  out << (sizes.size() == 1 ? ",)" : ")");
  return out.str();
}

std::string py_dtype(c10::ScalarType dtype) {
  return "torch." + std::string(c10::getDtypeNames(dtype).first);
}

std::string py_device(const c10::Device& device) {
  return device.str();
}

[[noreturn]] void value_error(const std::string& message) {
  TORCH_CHECK_VALUE(false, message);
  __builtin_unreachable();
}

// ── metadata checks (_check_shapes) ──

void check_shapes(
    const at::Tensor& k_pool,
    const at::Tensor& v_pool,
    const at::Tensor& new_k,
    const at::Tensor& new_v,
    const at::Tensor& slot_mapping) {
  const auto k_shape = k_pool.sizes();
  if (k_shape.size() != 3) {
    value_error(
        "k_pool must be a flat pool (num_slots, num_kv_heads, head_dim), got shape " + py_tuple(k_shape));
  }
  if (v_pool.sizes() != k_shape) {
    value_error("v_pool shape " + py_tuple(v_pool.sizes()) + " != k_pool shape " + py_tuple(k_shape));
  }
  const auto dtype = k_pool.scalar_type();
  const auto device = k_pool.device();
  if (v_pool.scalar_type() != dtype || v_pool.device() != device) {
    value_error(
        "v_pool (" + py_dtype(v_pool.scalar_type()) + ", " + py_device(v_pool.device()) + ") must match k_pool (" +
        py_dtype(dtype) + ", " + py_device(device) + ")");
  }
  const int64_t heads = k_shape[1];
  const int64_t head_dim = k_shape[2];
  const std::pair<const char*, const at::Tensor*> chunks[] = {{"new_k", &new_k}, {"new_v", &new_v}};
  for (const auto& [name, t] : chunks) {
    const auto shape = t->sizes();
    const auto n = shape.size();
    if ((n != 3 && n != 4) || shape[n - 2] != heads || shape[n - 1] != head_dim) {
      const std::string h = std::to_string(heads);
      const std::string d = std::to_string(head_dim);
      value_error(
          std::string(name) + " must be (batch, chunk_size, " + h + ", " + d + ") or (num_tokens, " + h + ", " + d +
          ") to match the pool, got " + py_tuple(shape));
    }
    if (t->scalar_type() != dtype) {
      value_error(std::string(name) + " dtype " + py_dtype(t->scalar_type()) + " != pool dtype " + py_dtype(dtype));
    }
    if (t->device() != device) {
      value_error(std::string(name) + " is on " + py_device(t->device()) + " but the pool is on " + py_device(device));
    }
  }
  if (new_v.sizes() != new_k.sizes()) {
    value_error("new_v shape " + py_tuple(new_v.sizes()) + " != new_k shape " + py_tuple(new_k.sizes()));
  }
  if (slot_mapping.scalar_type() != at::kLong) {
    value_error("slot_mapping must be torch.long (int64), got " + py_dtype(slot_mapping.scalar_type()));
  }
  if (slot_mapping.device() != device) {
    value_error(
        "slot_mapping is on " + py_device(slot_mapping.device()) + " but the pool is on " + py_device(device));
  }
  const auto nk = new_k.sizes();
  const auto tokens = nk.slice(0, nk.size() - 2);
  const auto slots = slot_mapping.sizes();
  if (slots.size() == 1 && tokens.size() == 2 && tokens[0] != 1) {
    value_error(
        "slot_mapping is 1-D " + py_tuple(slots) + " but new_k has batch " + std::to_string(tokens[0]) +
        ": pass a (batch, chunk_size) slot_mapping, one row of slots per sequence");
  }
  const auto expected = slots.size() != 1 ? tokens : tokens.slice(tokens.size() - 1);
  if (slots != expected) {
    value_error(
        "slot_mapping shape " + py_tuple(slots) + " does not match new_k tokens " + py_tuple(tokens) + " (expected " +
        py_tuple(expected) + ")");
  }
}

// ── aliasing (overlap.py: byte_span, spans_overlap, tensors_overlap) ──

struct Span {
  uintptr_t start;
  uintptr_t end;
};

int64_t extent(const at::Tensor& t) {
  int64_t e = 0;
  for (int64_t i = 0; i < t.dim(); ++i) {
    e += (t.size(i) - 1) * t.stride(i);
  }
  return e;
}

Span byte_span(const at::Tensor& t) {
  const auto start = reinterpret_cast<uintptr_t>(t.data_ptr());
  if (t.is_contiguous()) {
    return {start, start + t.nbytes()};
  }
  if (t.numel() == 0) {
    return {start, start};
  }
  return {start, start + static_cast<uintptr_t>((extent(t) + 1) * t.element_size())};
}

bool spans_overlap(const Span& a, const Span& b) {
  return a.start < b.end && b.start < a.end && a.start < a.end && b.start < b.end;
}

bool is_dense(const at::Tensor& t) {
  if (t.is_contiguous()) {
    return true;
  }
  std::vector<std::pair<int64_t, int64_t>> dims;  // (stride, size), as Python sorts them
  for (int64_t i = 0; i < t.dim(); ++i) {
    if (t.size(i) != 1) {
      dims.emplace_back(t.stride(i), t.size(i));
    }
  }
  std::sort(dims.begin(), dims.end());
  int64_t expected = 1;
  for (const auto& [stride, size] : dims) {
    if (stride != expected) {
      return false;
    }
    expected *= size;
  }
  return true;
}

// Sorted, unique byte addresses at which each element of t starts (the rare, exact path).
std::vector<uintptr_t> element_starts(const at::Tensor& t) {
  std::vector<uintptr_t> starts;
  starts.reserve(static_cast<size_t>(t.numel()));
  const auto base = reinterpret_cast<uintptr_t>(t.data_ptr());
  const auto itemsize = static_cast<int64_t>(t.element_size());
  const int64_t dims = t.dim();
  std::vector<int64_t> index(static_cast<size_t>(dims), 0);
  for (int64_t n = 0; n < t.numel(); ++n) {
    int64_t offset = 0;
    for (int64_t d = 0; d < dims; ++d) {
      offset += index[d] * t.stride(d);
    }
    starts.push_back(base + static_cast<uintptr_t>(offset * itemsize));
    for (int64_t d = dims - 1; d >= 0; --d) {  // odometer over the shape
      if (++index[d] < t.size(d)) {
        break;
      }
      index[d] = 0;
    }
  }
  std::sort(starts.begin(), starts.end());
  starts.erase(std::unique(starts.begin(), starts.end()), starts.end());
  return starts;
}

bool tensors_overlap(const at::Tensor& a, const Span& span_a, const at::Tensor& b, const Span& span_b) {
  if (!spans_overlap(span_a, span_b) || a.device() != b.device()) {
    return false;
  }
  if (is_dense(a) && is_dense(b)) {
    return true;
  }
  const auto a_starts = element_starts(a);
  const auto b_starts = element_starts(b);
  const auto a_size = static_cast<uintptr_t>(a.element_size());
  const auto b_size = static_cast<uintptr_t>(b.element_size());
  for (const auto b_start : b_starts) {
    // The last a element starting before this b element ends must end after it starts.
    auto it = std::lower_bound(a_starts.begin(), a_starts.end(), b_start + b_size);
    if (it != a_starts.begin() && *std::prev(it) + a_size > b_start) {
      return true;
    }
  }
  return false;
}

void check_no_aliasing(
    const at::Tensor& k_pool,
    const at::Tensor& v_pool,
    const at::Tensor& new_k,
    const at::Tensor& new_v,
    const at::Tensor& slot_mapping) {
  const Span k_span = byte_span(k_pool);
  const Span v_span = byte_span(v_pool);
  if (spans_overlap(k_span, v_span) && tensors_overlap(k_pool, k_span, v_pool, v_span)) {
    value_error("k_pool and v_pool overlap in memory: K and V must be two separate regions");
  }
  const std::pair<const char*, const at::Tensor*> inputs[] = {
      {"new_k", &new_k}, {"new_v", &new_v}, {"slot_mapping", &slot_mapping}};
  for (const auto& [name, t] : inputs) {
    const Span span = byte_span(*t);
    const char* pool_name = nullptr;
    if (spans_overlap(span, k_span) && tensors_overlap(*t, span, k_pool, k_span)) {
      pool_name = "k_pool";
    } else if (spans_overlap(span, v_span) && tensors_overlap(*t, span, v_pool, v_span)) {
      pool_name = "v_pool";
    } else {
      continue;
    }
    value_error(
        std::string(name) + " overlaps " + pool_name +
        " in memory: the write would read slots it has already overwritten; pass a copy (" + name + ".clone())");
  }
}

// ── debug mode only: slot values (syncs on a device; the same ATen ops as the Python kernel) ──

void check_slot_values(const at::Tensor& slots, int64_t num_slots) {
  if (slots.numel() == 0) {
    return;
  }
  const int64_t lo = slots.min().item<int64_t>();
  const int64_t hi = slots.max().item<int64_t>();
  if (lo < 0 || hi >= num_slots) {
    value_error(
        "slot_mapping has slots in [" + std::to_string(lo) + ", " + std::to_string(hi) + "] outside the pool's [0, " +
        std::to_string(num_slots) + ")");
  }
  if (std::get<0>(at::_unique2(slots)).numel() != slots.numel()) {
    value_error(
        "slot_mapping has duplicate slots: two tokens (or two sequences) would write one slot, "
        "and which one lands is unspecified");
  }
}

// ── the copy: rows as 16-byte elements ──

// ATen's CPU index_copy_ copies element by element: 16-byte elements move a row of K or V about 2.5x
// faster than 4-byte ones (8 heads x 128 float32, 16 tokens: ~3 us against ~8 us), bit for bit, with
// the same per-slot bounds check. A view, so only where view(dtype) allows it (innermost dimension
// contiguous, every stride, offset and row a whole number of 16 bytes); elsewhere the tensor as is.
// Below kWideMinBytes of chunk the two views cost more than they save (2 heads x 16, 16 tokens: 2 KiB).
constexpr int64_t kWideMinBytes = 16 * 1024;

at::Tensor as_wide_rows(const at::Tensor& t) {
  constexpr int64_t kWide = 16;  // sizeof(c10::complex<double>)
  const int64_t itemsize = static_cast<int64_t>(t.element_size());
  if (itemsize >= kWide || t.dim() == 0 || t.numel() == 0 || t.is_conj() || t.is_neg() || t.stride(-1) != 1 ||
      (t.size(-1) * itemsize) % kWide != 0 || (t.storage_offset() * itemsize) % kWide != 0) {
    return t;
  }
  for (int64_t d = 0; d + 1 < t.dim(); ++d) {
    if ((t.stride(d) * itemsize) % kWide != 0) {
      return t;
    }
  }
  return t.view(at::kComplexDouble);
}

void copy_rows(at::Tensor& pool, const at::Tensor& slots, const at::Tensor& chunk) {
  if (chunk.numel() * static_cast<int64_t>(chunk.element_size()) < kWideMinBytes) {
    pool.index_copy_(0, slots, chunk);
    return;
  }
  const at::Tensor wide_pool = as_wide_rows(pool);
  const at::Tensor wide_chunk = as_wide_rows(chunk);
  if (wide_pool.scalar_type() == wide_chunk.scalar_type()) {
    at::Tensor target = wide_pool;  // a view of pool: writing it writes the pool
    target.index_copy_(0, slots, wide_chunk);
  } else {
    pool.index_copy_(0, slots, chunk);
  }
}

// ── the kernel ──

void paged_write_cpu(
    at::Tensor& k_pool,
    at::Tensor& v_pool,
    const at::Tensor& new_k,
    const at::Tensor& new_v,
    const at::Tensor& slot_mapping) {
  // Named in the profiler, so a test can tell this kernel from the Python one (free when not profiling).
  RECORD_FUNCTION("ar_paging::paged_write_native", c10::ArrayRef<const c10::IValue>{});
  check_shapes(k_pool, v_pool, new_k, new_v, slot_mapping);
  // Reached with other devices only through an explicit redispatch; the metadata checks above hold for any.
  TORCH_CHECK(k_pool.device().is_cpu(), "ar_paging native paged_write is the CPU kernel, got ", k_pool.device());
  check_no_aliasing(k_pool, v_pool, new_k, new_v, slot_mapping);
  const at::Tensor slots = slot_mapping.dim() == 1 ? slot_mapping : slot_mapping.reshape({-1});
  const bool batched = new_k.dim() == 4;
  if (g_debug_checks.load(std::memory_order_relaxed)) {
    check_slot_values(slots, k_pool.size(0));
  }
  copy_rows(k_pool, slots, batched ? new_k.flatten(0, 1) : new_k);
  copy_rows(v_pool, slots, batched ? new_v.flatten(0, 1) : new_v);
}

void set_debug_checks(bool enabled) {
  g_debug_checks.store(enabled, std::memory_order_relaxed);
}

bool debug_checks_enabled() {
  return g_debug_checks.load(std::memory_order_relaxed);
}

}  // namespace

// The schema is defined in Python (ar_paging/paged_write.py); this only adds the CPU kernel.
TORCH_LIBRARY_IMPL(ar_paging, CPU, m) {
  m.impl("paged_write", TORCH_FN(paged_write_cpu));
}

// Helpers of the native kernel, in their own namespace: the debug switch mirrored from Python.
TORCH_LIBRARY(ar_paging_native, m) {
  m.def("set_debug_checks(bool enabled) -> ()", &set_debug_checks);
  m.def("debug_checks_enabled() -> bool", &debug_checks_enabled);
}
