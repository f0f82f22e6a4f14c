// merge_filters: the OR of filters of one layout.
#include "abf/merge.hpp"

#include <bit>
#include <cstring>
#include <sstream>
#include <string>

#include "abf/probe.hpp"
#include "parallel.hpp"

namespace abf {

namespace {

// 32 Ki words (256 KiB) per task: a few microseconds of streaming ORs per
// input, far above a task's spawn cost.
constexpr std::size_t kMergeGrain = 32 * 1024;

std::string label_of(const MergeOptions& options, std::size_t index) {
  if (!options.labels.empty()) return options.labels[index];
  return "input " + std::to_string(index + 1);
}

// Every field that must match, in the order of the snapshot header.
std::string mismatch(const MergeOptions& options, const Filter& first, const Filter& other,
                     std::size_t index) {
  const auto differs = [&](std::string_view field, const auto& a, const auto& b) {
    std::ostringstream text;
    text.precision(17);  // a double's every digit: values may differ in the last
    text << field << " differs: " << label_of(options, 0) << " has " << a << ", "
         << label_of(options, index) << " has " << b;
    return text.str();
  };
  if (first.catalog_id() != other.catalog_id()) {
    return differs("catalogId", first.catalog_id().hex(), other.catalog_id().hex());
  }
  if (first.hash_protocol_version() != other.hash_protocol_version()) {
    return differs("hashProtocolVersion", first.hash_protocol_version(),
                   other.hash_protocol_version());
  }
  if (first.scheme().key_fingerprint() != other.scheme().key_fingerprint()) {
    return differs("keyFingerprint", first.scheme().key_fingerprint().hex(),
                   other.scheme().key_fingerprint().hex());
  }
  if (first.hash_count() != other.hash_count()) {
    return differs("hashCount", first.hash_count(), other.hash_count());
  }
  if (!options.catalog_version && first.catalog_version() != other.catalog_version()) {
    return differs("catalogVersion", first.catalog_version(), other.catalog_version()) +
           (first.catalog_id().is_zero()
                ? " (name the result's version to merge different versions)"
                : " (inputs bound to a catalog merge only at one version)");
  }
  // A catalog-bound input holds its catalog at its own version: labelling
  // the result with another would make the digests added in between answer
  // Definitely Not (issue 22). Only unbound inputs may be relabelled.
  if (options.catalog_version && !other.catalog_id().is_zero() &&
      other.catalog_version() != *options.catalog_version) {
    return "catalogVersion " + std::to_string(*options.catalog_version) + " is not " +
           label_of(options, index) + "'s: it has catalogVersion " +
           std::to_string(other.catalog_version()) + " of catalog " + other.catalog_id().hex() +
           ", and a merge of a catalog's snapshots keeps their version (only inputs with a zero "
           "catalogId may be given another)";
  }
  if (first.bit_count() != other.bit_count()) {
    return differs("bitCount", first.bit_count(), other.bit_count());
  }
  if (first.expected_item_count() != other.expected_item_count()) {
    return differs("expectedItemCount", first.expected_item_count(), other.expected_item_count());
  }
  if (std::bit_cast<std::uint64_t>(first.target_fpp()) !=
      std::bit_cast<std::uint64_t>(other.target_fpp())) {
    return differs("targetFpp", first.target_fpp(), other.target_fpp());
  }
  // Equal fingerprints with unequal keys: 2^-64 by chance, but never merged.
  if (!(first.scheme() == other.scheme())) {
    return "keys differ: " + label_of(options, 0) + " and " + label_of(options, index) +
           " were built with different keys of the same fingerprint";
  }
  return {};
}

}  // namespace

Result<Filter> merge_filters(std::span<const Filter> filters, const MergeOptions& options) {
  if (filters.empty()) return fail(ErrorCode::kInvalidArgument, "merge needs at least one filter");
  if (!options.labels.empty() && options.labels.size() != filters.size()) {
    return fail(ErrorCode::kInvalidArgument, "merge got " + std::to_string(options.labels.size()) +
                                                 " labels for " + std::to_string(filters.size()) +
                                                 " filters");
  }
  const Filter& first = filters.front();
  std::uint64_t inserted = 0;
  for (std::size_t index = 0; index < filters.size(); ++index) {
    if (auto problem = mismatch(options, first, filters[index], index); !problem.empty()) {
      return fail(ErrorCode::kIncompatibleFilters, "cannot merge: " + problem);
    }
    const std::uint64_t count = filters[index].inserted_item_count();
    // Each count is <= expectedItemCount <= 2^30, so the running sum only
    // overflows after 2^34 inputs; check against capacity at every step.
    inserted += count;
    if (inserted > first.expected_item_count()) {
      return fail(ErrorCode::kCapacityExceeded,
                  "merged insertedItemCount reaches " + std::to_string(inserted) + " at " +
                      label_of(options, index) + ", more than the expectedItemCount " +
                      std::to_string(first.expected_item_count()));
    }
  }

  FilterInfo info = first.info();
  info.inserted_item_count = inserted;
  info.catalog_version = options.catalog_version.value_or(first.catalog_version());
  // The sum is the fingerprint of the multiset union, exact whatever the
  // inputs overlap; an input that does not know its own leaves the result
  // not knowing either.
  info.content_fingerprint = ContentFingerprint{};
  for (const Filter& filter : filters) {
    if (!filter.content_fingerprint()) {
      info.content_fingerprint.reset();
      break;
    }
    *info.content_fingerprint += *filter.content_fingerprint();
  }
  const std::size_t word_count = first.words().size();
  auto words = allocate_words(word_count);
  std::uint64_t* out = words.get();
  detail::parallel_for_chunks(0, word_count, kMergeGrain, [&](std::size_t begin, std::size_t end) {
    std::memcpy(out + begin, first.words().data() + begin, (end - begin) * sizeof(std::uint64_t));
    for (std::size_t f = 1; f < filters.size(); ++f) {
      const std::uint64_t* in = filters[f].words().data();
      for (std::size_t w = begin; w < end; ++w) out[w] |= in[w];
    }
  });
  auto merged = Filter::from_words(info, std::move(words), word_count);
  if (!merged) return merged;
  // Inputs each plausible on their own can still OR into more bits than
  // their summed counts allow (bits where no build of theirs puts them):
  // such a result would be refused by every loader, so it is not made.
  if (auto plausible = check_fill(*merged, FillCheck::kAnyInsertions, "the merged filter");
      !plausible) {
    return std::unexpected(plausible.error());
  }
  return merged;
}

}  // namespace abf
