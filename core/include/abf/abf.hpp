// The abf library: one include for the whole public API.
//
//   abf::BloomSpec spec{.expected_item_count = 1'000'000, .target_fpp = 0.001};
//   auto filter = abf::build_filter(digests, spec);        // Result<Filter>
//   abf::save_snapshot(*filter, "catalog.abf");
//   auto loaded = abf::load_snapshot("catalog.abf");       // validated
//   loaded->query(candidates, answers);                    // SIMD by default
//
// No header here includes Highway, TBB or CUDA.
#pragma once

#include "abf/backend.hpp"
#include "abf/digest.hpp"
#include "abf/error.hpp"
#include "abf/filter.hpp"
#include "abf/filter_set.hpp"
#include "abf/fingerprint.hpp"
#include "abf/index.hpp"
#include "abf/index_set.hpp"
#include "abf/io.hpp"
#include "abf/layout.hpp"
#include "abf/merge.hpp"
#include "abf/probe.hpp"
#include "abf/snapshot.hpp"
#include "abf/summary.hpp"
#include "abf/version.hpp"
