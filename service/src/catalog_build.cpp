// The filters of a catalog: built at a version (one filter or a set), or
// advanced from an older one (abf/service/catalog_build.hpp). Only the
// catalog's public reads: no SQLite here.
#include "abf/service/catalog_build.hpp"

#include <span>
#include <string>
#include <utility>

#include "abf/service/sqlite_catalog.hpp"

namespace abf::service {
namespace {

std::string version_text(std::uint64_t version) { return std::to_string(version); }

// Fills `builder` (a FilterBuilder or FilterSetBuilder made from
// options_for(catalog, ...)) with the catalog's digests at `catalog_version`
// and finishes it: refused for a catalog without an id, or one holding more
// digests than the spec expects.
template <class Builder>
auto fill_from_catalog(SqliteCatalog& catalog, std::uint64_t catalog_version, const BloomSpec& spec,
                       Result<Builder> builder, Backend backend)
    -> decltype(std::move(*builder).finish()) {
  if (!builder) return std::unexpected(builder.error());
  if (!catalog.catalog_id()) {
    return fail(ErrorCode::kCatalog,
                "catalog " + catalog.path().string() +
                    ": schema 1, opened read-only, has no catalog id yet, so its snapshot would "
                    "belong to no catalog; run `abf catalog upgrade --db " +
                    catalog.path().string() + "` first");
  }
  auto count = catalog.count_at_version(catalog_version);
  if (!count) return std::unexpected(count.error());
  if (*count > spec.expected_item_count) {
    return fail(ErrorCode::kCapacityExceeded, "catalog " + catalog.path().string() + " holds " +
                                                  std::to_string(*count) + " digests at version " +
                                                  version_text(catalog_version) +
                                                  ", more than the expected item count " +
                                                  std::to_string(spec.expected_item_count));
  }
  auto walked = catalog.for_each_digest_at_version(
      catalog_version, [&](std::span<const Digest> chunk) { return builder->add(chunk, backend); });
  if (!walked) return std::unexpected(walked.error());
  return std::move(*builder).finish();
}

BuildOptions options_for(const SqliteCatalog& catalog, std::uint64_t catalog_version,
                         const std::optional<Key>& key,
                         std::uint32_t protocol = BuildOptions::kProtocolByKey) {
  BuildOptions options;
  options.catalog_version = catalog_version;
  options.catalog_id = catalog.catalog_id().value_or(CatalogId{});
  options.key = key;
  options.protocol = protocol != BuildOptions::kProtocolByKey
                         ? protocol
                         : (key ? probe::kProtocolKeyed : probe::kProtocolUnkeyed);  // classic
  return options;
}

}  // namespace

Result<Filter> build_filter_from_catalog(SqliteCatalog& catalog, std::uint64_t catalog_version,
                                         const BloomSpec& spec, const std::optional<Key>& key,
                                         Backend backend) {
  return fill_from_catalog(catalog, catalog_version, spec,
                           FilterBuilder::create(spec, options_for(catalog, catalog_version, key)),
                           backend);
}

Result<Filter> build_filter_from_catalog(SqliteCatalog& catalog, std::uint64_t catalog_version,
                                         const BloomSpec& spec, const std::optional<Key>& key,
                                         std::uint32_t protocol, Backend backend) {
  return fill_from_catalog(
      catalog, catalog_version, spec,
      FilterBuilder::create(spec, options_for(catalog, catalog_version, key, protocol)), backend);
}

Result<Filter> build_filter_from_catalog(SqliteCatalog& catalog, std::uint64_t catalog_version,
                                         const BloomSpec& spec, Backend backend) {
  return build_filter_from_catalog(catalog, catalog_version, spec, std::nullopt, backend);
}

Result<Filter> advance_filter(const Filter& base, SqliteCatalog& catalog,
                              std::uint64_t catalog_version, const std::optional<Key>& key,
                              Backend backend) {
  const std::string where = "advancing the filter of catalog " + catalog.path().string() +
                            " version " + version_text(base.catalog_version()) + " to " +
                            version_text(catalog_version);
  if (!catalog.catalog_id() || base.catalog_id() != *catalog.catalog_id()) {
    return fail(ErrorCode::kInvalidArgument, where + ": the filter is of catalog " +
                                                 base.catalog_id().hex() + ", not of this one");
  }
  if (base.catalog_version() > catalog_version) {
    return fail(ErrorCode::kInvalidArgument, where + ": the filter is newer");
  }
  // The base must be what the catalog holds at its version now: after a
  // backup was restored and advanced again, the same version number holds
  // other digests, and adding the new history to the old bits would keep
  // what is gone (and miss nothing the check below would see).
  auto at_base = catalog.content_at_version(base.catalog_version());
  if (!at_base) return std::unexpected(at_base.error());
  if (at_base->item_count != base.inserted_item_count() ||
      (base.info().content_fingerprint &&
       !(*base.info().content_fingerprint == at_base->fingerprint))) {
    return fail(ErrorCode::kInvalidArgument,
                where + ": the catalog's version " + version_text(base.catalog_version()) +
                    " no longer holds what the filter was built from (its history was "
                    "rewritten); only a full build is exact");
  }
  auto changes = catalog.changes_between(base.catalog_version(), catalog_version);
  if (!changes) return std::unexpected(changes.error());
  if (changes->removed != 0) {
    // A Bloom filter cannot forget a digest: only a full build is exact.
    return fail(ErrorCode::kInvalidArgument,
                where + ": " + std::to_string(changes->removed) +
                    " digests were removed since; only a full build drops them");
  }
  if (base.inserted_item_count() + changes->added > base.expected_item_count()) {
    return fail(ErrorCode::kCapacityExceeded,
                where + ": " + std::to_string(base.inserted_item_count()) + " + " +
                    std::to_string(changes->added) + " digests exceed the expected item count " +
                    std::to_string(base.expected_item_count()));
  }
  // The added digests in a filter of the same spec, protocol, key and
  // labels, then OR-ed with base's bits: the same positions a build of both
  // sets sets. The protocol is base's own, never chosen by whether a key is
  // given: a blocked filter (3, or 4 with its key) stays blocked.
  auto builder =
      FilterBuilder::create(base.info().spec, BuildOptions{.catalog_version = catalog_version,
                                                           .catalog_id = base.catalog_id(),
                                                           .protocol = base.hash_protocol_version(),
                                                           .key = key});
  if (!builder) {
    const ErrorCode code = builder.error().code;
    if (code == ErrorCode::kKeyRequired || code == ErrorCode::kKeyMismatch) {
      return fail(code, where + ": " + builder.error().message);
    }
    return std::unexpected(builder.error());
  }
  if (!(builder->info().scheme == base.scheme())) {
    return fail(key ? ErrorCode::kKeyMismatch : ErrorCode::kKeyRequired,
                where + ": the filter's hash scheme (protocol " +
                    std::to_string(base.hash_protocol_version()) +
                    ") is not the one this key (or no key) makes");
  }
  auto read = catalog.for_each_digest_added(
      base.catalog_version(), catalog_version,
      [&](std::span<const Digest> chunk) { return builder->add(chunk, backend); });
  if (!read) return std::unexpected(read.error());
  auto added = std::move(*builder).finish();
  if (!added) return std::unexpected(added.error());
  const std::span<const std::uint64_t> old_words = base.words();
  const std::span<const std::uint64_t> new_words = added->words();
  auto words = allocate_words(old_words.size());
  for (std::size_t i = 0; i < old_words.size(); ++i) words.get()[i] = old_words[i] | new_words[i];
  FilterInfo info = added->info();
  info.inserted_item_count = base.inserted_item_count() + added->inserted_item_count();
  // The fingerprint of a union of disjoint sets is the sum of theirs; a base
  // without one leaves the result without one (as a merge would).
  info.content_fingerprint =
      base.info().content_fingerprint && info.content_fingerprint
          ? std::optional(*base.info().content_fingerprint + *info.content_fingerprint)
          : std::nullopt;
  return Filter::from_words(info, std::move(words), old_words.size());
}

Result<FilterSet> build_filter_set_from_catalog(SqliteCatalog& catalog,
                                                std::uint64_t catalog_version,
                                                const BloomSpec& spec, std::uint32_t shard_count,
                                                const std::optional<Key>& key, Backend backend) {
  return fill_from_catalog(
      catalog, catalog_version, spec,
      FilterSetBuilder::create(spec, shard_count, options_for(catalog, catalog_version, key)),
      backend);
}

Result<FilterSet> build_filter_set_from_catalog(SqliteCatalog& catalog,
                                                std::uint64_t catalog_version,
                                                const BloomSpec& spec, std::uint32_t shard_count,
                                                const std::optional<Key>& key,
                                                std::uint32_t protocol, Backend backend) {
  return fill_from_catalog(catalog, catalog_version, spec,
                           FilterSetBuilder::create(
                               spec, shard_count, options_for(catalog, catalog_version, key, protocol)),
                           backend);
}
}  // namespace abf::service
