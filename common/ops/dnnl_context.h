#pragma once
// Internal to common/ops: the process's oneDNN engine and stream, and the primitive cache.
// Nothing outside common/ops includes this header (or dnnl.hpp).
#include <functional>
#include <string>

#include <oneapi/dnnl/dnnl.hpp>

#include "common/tensor.h"

namespace vitk::ops::detail {

dnnl::engine& engine();
dnnl::stream& stream();

// Returns the primitive cached under key, creating it with make() on first use. Creating a
// primitive descriptor costs microseconds to milliseconds; executing a cached one costs nothing.
const dnnl::primitive& cached_primitive(const std::string& key,
                                        const std::function<dnnl::primitive()>& make);

dnnl::memory::data_type dnnl_type(DType dt);

// A memory object over caller-owned data (no copy).
inline dnnl::memory wrap(const dnnl::memory::desc& md, const void* data) {
  return dnnl::memory(md, engine(), const_cast<void*>(data));
}

}  // namespace vitk::ops::detail
