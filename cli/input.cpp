// Inputs named on the command line (common.hpp): standard input read whole,
// snapshots and filter sets, the demo's generated digests.
#include "common.hpp"

#include <unistd.h>

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>
#include <utility>

namespace abf::cli {

Result<std::vector<std::uint8_t>> read_standard_input(std::uint64_t limit, std::string_view what) {
  std::vector<std::uint8_t> bytes;
  std::vector<std::uint8_t> buffer(std::size_t{1} << 20);
  for (;;) {
    const ssize_t got = ::read(STDIN_FILENO, buffer.data(), buffer.size());
    if (got < 0) {
      if (errno == EINTR) continue;
      return fail(ErrorCode::kIo, "<stdin>: read error: " + std::string(std::strerror(errno)));
    }
    if (got == 0) break;
    if (bytes.size() + static_cast<std::size_t>(got) > limit) {
      return fail(ErrorCode::kIo, "<stdin>: more than " + with_commas(limit) +
                                      " bytes, more than " + std::string(what) + " can be");
    }
    bytes.insert(bytes.end(), buffer.begin(), buffer.begin() + got);
  }
  return bytes;
}

Result<Filter> load_snapshot_argument(const std::string& path, const LoadOptions& options,
                                      SnapshotHeader* header, std::uint64_t* bytes) {
  if (path != "-") {
    auto filter = load_snapshot(path, options);
    if (!filter) return filter;
    if (header != nullptr) {
      // As stored: a formatVersion-1 file shows its own version and checksums.
      auto stored = read_snapshot_header(path);
      if (!stored) return std::unexpected(stored.error());
      *header = *stored;
    }
    if (bytes != nullptr) {
      std::error_code ec;
      *bytes = std::filesystem::file_size(path, ec);
    }
    return filter;
  }
  // The largest valid snapshot: the header and 2^30 bits. One byte more is
  // read, so a longer input is refused as trailing bytes by the parser.
  constexpr std::uint64_t kLargest = kSnapshotHeaderSize + (std::uint64_t{1} << 27);
  auto input = read_standard_input(kLargest + 1, "a snapshot");
  if (!input) return std::unexpected(input.error());
  auto named = [](Error error) {
    error.message = "<stdin>: " + error.message;
    return error;
  };
  if (input->size() >= 4 && std::memcmp(input->data(), "ABFS", 4) == 0) {
    return fail(ErrorCode::kInvalidArgument,
                "<stdin>: a filter set cannot come from standard input: its manifest names shard "
                "files beside it; give the manifest's path");
  }
  auto filter = parse_snapshot(*input, options.key);
  if (!filter) return std::unexpected(named(filter.error()));
  if (header != nullptr) {
    auto stored = parse_snapshot_header(*input);
    if (!stored) return std::unexpected(named(stored.error()));
    *header = *stored;
  }
  if (bytes != nullptr) *bytes = input->size();
  return filter;
}

Result<FilterSet> load_set_argument(const std::string& path, const LoadOptions& options) {
  if (path != "-") return load_filter_set(path, options);
  auto filter = load_snapshot_argument(path, options);
  if (!filter) return std::unexpected(filter.error());
  return FilterSet(std::move(*filter));
}

Result<bool> names_filter_set(const std::string& path) {
  if (path == "-") return false;
  auto kind = filter_file_kind(path);
  if (!kind) return std::unexpected(kind.error());
  return *kind == FilterFileKind::kManifest;
}

std::vector<Digest> generate_digests(std::string_view prefix, std::uint64_t count) {
  std::vector<Digest> digests(count);
  tbb::parallel_for(tbb::blocked_range<std::uint64_t>(0, count, 4096),
                    [&](const tbb::blocked_range<std::uint64_t>& range) {
                      std::string text(prefix);
                      for (auto i = range.begin(); i != range.end(); ++i) {
                        text.resize(prefix.size());
                        text += std::to_string(i);
                        digests[i] = sha256(text);
                      }
                    });
  return digests;
}

}  // namespace abf::cli
