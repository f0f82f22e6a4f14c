// The fuzz targets' property checks (checks.hpp).
#include "checks.hpp"

#include <sys/mman.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "abf/abf.hpp"

namespace abf::fuzz {

namespace {

using Bytes = std::vector<std::uint8_t>;

// The key of tests/data/vectors/v2/member-1000-keyed.abf.
const Key& golden_key() {
  static const Key key = *Key::parse_hex("000102030405060708090a0b0c0d0e0f");
  return key;
}

std::string code_name(ErrorCode code) { return std::string(to_string(code)); }

template <class T>
T load_le(const std::uint8_t* p) {
  T value;
  std::memcpy(&value, p, sizeof value);
  return value;
}

// Recomputes the checksums a mutation broke, so that the fuzzer reaches the
// rules behind them: the payload's over everything after the header, then
// the header's as its format version defines it (other versions: left).
void reseal(Bytes& bytes, bool payload, bool header) {
  if (bytes.size() < kSnapshotHeaderSize) return;
  if (payload) {
    const std::uint64_t sum =
        XXH3_64bits(bytes.data() + kSnapshotHeaderSize, bytes.size() - kSnapshotHeaderSize);
    std::memcpy(bytes.data() + 64, &sum, 8);
  }
  if (header) {
    const auto version = load_le<std::uint32_t>(bytes.data() + 4);
    std::uint64_t sum = 0;
    if (version == 1) {
      sum = XXH3_64bits(bytes.data(), 72);
    } else if (version == 2) {
      std::array<std::uint8_t, kSnapshotHeaderSize> copy;
      std::memcpy(copy.data(), bytes.data(), copy.size());
      std::memset(copy.data() + 72, 0, 8);
      sum = XXH3_64bits(copy.data(), copy.size());
    } else {
      return;
    }
    std::memcpy(bytes.data() + 72, &sum, 8);
  }
}

// Every stored field but the checksum of the header itself and the format
// version: what a snapshot means.
std::string same_fields(const SnapshotHeader& a, const SnapshotHeader& b) {
  if (a.hash_protocol_version != b.hash_protocol_version) return "hashProtocolVersion";
  if (a.hash_count != b.hash_count) return "hashCount";
  if (a.catalog_version != b.catalog_version) return "catalogVersion";
  if (a.bit_count != b.bit_count) return "bitCount";
  if (a.expected_item_count != b.expected_item_count) return "expectedItemCount";
  if (a.inserted_item_count != b.inserted_item_count) return "insertedItemCount";
  if (std::bit_cast<std::uint64_t>(a.target_fpp) != std::bit_cast<std::uint64_t>(b.target_fpp)) {
    return "targetFpp";
  }
  if (a.payload_length != b.payload_length) return "payloadLength";
  if (a.payload_checksum != b.payload_checksum) return "payloadChecksum";
  if (a.catalog_id != b.catalog_id) return "catalogId";
  if (a.key_fingerprint != b.key_fingerprint) return "keyFingerprint";
  if (a.content_fingerprint() != b.content_fingerprint()) return "contentFingerprint";
  return {};
}

// The filter says what its header said.
std::string filter_matches_header(const Filter& f, const SnapshotHeader& h) {
  if (f.bit_count() != h.bit_count) return "bitCount";
  if (f.hash_count() != h.hash_count) return "hashCount";
  if (f.hash_protocol_version() != h.hash_protocol_version) return "hashProtocolVersion";
  if (f.expected_item_count() != h.expected_item_count) return "expectedItemCount";
  if (f.inserted_item_count() != h.inserted_item_count) return "insertedItemCount";
  if (std::bit_cast<std::uint64_t>(f.target_fpp()) != std::bit_cast<std::uint64_t>(h.target_fpp)) {
    return "targetFpp";
  }
  if (f.catalog_version() != h.catalog_version) return "catalogVersion";
  if (f.catalog_id() != h.catalog_id) return "catalogId";
  if (f.scheme().key_fingerprint() != h.key_fingerprint) return "keyFingerprint";
  if (f.content_fingerprint() != h.content_fingerprint()) return "contentFingerprint";
  if (f.payload().size() != h.payload_length) return "payload size";
  return {};
}

// Digests to probe: pseudo-random ones seeded by the input, and the
// input's own 32-byte pieces (which the fuzzer steers).
std::vector<Digest> probe_digests(std::span<const std::uint8_t> bytes) {
  std::vector<Digest> digests(64);
  std::uint64_t state = XXH3_64bits(bytes.data(), bytes.size());
  for (auto& digest : digests) {
    for (std::size_t i = 0; i < Digest::kSize; i += 8) {
      std::uint64_t z = (state += 0x9e3779b97f4a7c15ull);
      z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
      z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
      z ^= z >> 31;
      std::memcpy(digest.bytes.data() + i, &z, 8);
    }
  }
  for (std::size_t at = 0; at + Digest::kSize <= bytes.size() && digests.size() < 96;
       at += Digest::kSize) {
    Digest digest;
    std::memcpy(digest.bytes.data(), bytes.data() + at, Digest::kSize);
    digests.push_back(digest);
  }
  return digests;
}

// might_contain (the reference), and the scalar and SIMD engines, agree on
// every digest: a maybe never turns absent between backends.
std::string backends_agree(const Filter& filter, std::span<const Digest> digests) {
  std::vector<Answer> scalar(digests.size());
  std::vector<Answer> simd(digests.size());
  if (auto ok = filter.query(digests, scalar, Backend::kScalar); !ok) {
    return "scalar query failed: " + ok.error().describe();
  }
  if (auto ok = filter.query(digests, simd, Backend::kSimd); !ok) {
    return "simd query failed: " + ok.error().describe();
  }
  for (std::size_t i = 0; i < digests.size(); ++i) {
    const Answer reference =
        filter.might_contain(digests[i]) ? Answer::kMaybe : Answer::kDefinitelyNot;
    if (scalar[i] != reference || simd[i] != reference) {
      return "backends disagree on " + digests[i].hex() + ": might_contain " +
             std::to_string(static_cast<int>(reference)) + ", scalar " +
             std::to_string(static_cast<int>(scalar[i])) + ", simd " +
             std::to_string(static_cast<int>(simd[i]));
    }
  }
  return {};
}

// The bytes as a file, for load_snapshot: one memfd, rewritten per input,
// named through /proc/self/fd. Empty when the system has neither.
class MemoryFile {
 public:
  MemoryFile() : fd_(::memfd_create("abf-fuzz-snapshot", MFD_CLOEXEC)) {}
  ~MemoryFile() {
    if (fd_ >= 0) ::close(fd_);
  }
  MemoryFile(const MemoryFile&) = delete;
  MemoryFile& operator=(const MemoryFile&) = delete;

  std::optional<std::string> hold(std::span<const std::uint8_t> bytes) {
    if (fd_ < 0 || ::ftruncate(fd_, 0) != 0) return std::nullopt;
    std::size_t done = 0;
    while (done < bytes.size()) {
      const ssize_t wrote =
          ::pwrite(fd_, bytes.data() + done, bytes.size() - done, static_cast<off_t>(done));
      if (wrote <= 0) return std::nullopt;
      done += static_cast<std::size_t>(wrote);
    }
    return "/proc/self/fd/" + std::to_string(fd_);
  }

 private:
  int fd_;
};

std::string describe_outcome(const Result<Filter>& r) {
  return r ? std::string("loaded") : code_name(r.error().code);
}

std::string key_name(const std::optional<Key>& key) { return key ? "the golden key" : "no key"; }

// What a loaded snapshot must re-serialize to.
std::string check_reserialized(const Filter& filter, const SnapshotHeader& header,
                               std::span<const std::uint8_t> bytes, const std::optional<Key>& key) {
  const Bytes again = serialize_snapshot(filter);
  if (header.format_version == 2) {
    if (!std::ranges::equal(again, bytes)) return "a version-2 snapshot re-serializes differently";
    return {};
  }
  // Version 1 is rewritten as version 2: same payload, same fields, no
  // catalog named.
  if (again.size() != bytes.size() || !std::equal(again.begin() + kSnapshotHeaderSize, again.end(),
                                                  bytes.begin() + kSnapshotHeaderSize)) {
    return "a version-1 snapshot re-serializes with another payload";
  }
  auto rewritten = parse_snapshot_header(again);
  if (!rewritten)
    return "the re-serialized version-1 snapshot fails: " + rewritten.error().describe();
  if (rewritten->format_version != 2)
    return "re-serialized as version " + std::to_string(rewritten->format_version);
  if (auto field = same_fields(*rewritten, header); !field.empty()) {
    return "re-serializing a version-1 snapshot changed " + field;
  }
  auto reloaded = parse_snapshot(again, key);
  if (!reloaded)
    return "the re-serialized version-1 snapshot does not load: " + reloaded.error().describe();
  if (serialize_snapshot(*reloaded) != again)
    return "the rewritten version-1 snapshot is not stable";
  return {};
}

}  // namespace

std::string check_snapshot(std::span<const std::uint8_t> data) {
  if (data.empty()) return {};
  Bytes bytes(data.begin() + 1, data.end());
  reseal(bytes, (data[0] & 1) != 0, (data[0] & 2) != 0);

  const auto header = parse_snapshot_header(bytes);
  const bool payload_ok =
      header && XXH3_64bits(bytes.data() + kSnapshotHeaderSize,
                            bytes.size() - kSnapshotHeaderSize) == header->payload_checksum;
  // After the checksum, the payload's popcount against insertedItemCount
  // and k (every load checks the upper bounds).
  std::uint64_t popcount = 0;
  for (std::size_t i = kSnapshotHeaderSize; i < bytes.size(); ++i) popcount += std::popcount(bytes[i]);
  const bool fill_ok = header && describe_fill_fault(Layout{header->bit_count, header->hash_count},
                                                     header->inserted_item_count, popcount,
                                                     FillCheck::kAnyInsertions)
                                     .empty();
  static MemoryFile memory_file;
  const auto path = memory_file.hold(bytes);

  if (path) {
    // The header alone: the header's error, or the payload's, or the header.
    const auto from_file = read_snapshot_header(*path);
    const std::string expected = !header       ? code_name(header.error().code)
                                 : !payload_ok ? code_name(ErrorCode::kSnapshotPayloadChecksum)
                                 : !fill_ok    ? code_name(ErrorCode::kSnapshotImplausibleFill)
                                               : "loaded";
    const std::string got = from_file ? "loaded" : code_name(from_file.error().code);
    if (got != expected) return "read_snapshot_header: " + got + ", expected " + expected;
    if (from_file && !same_fields(*from_file, *header).empty()) {
      return "read_snapshot_header changed " + same_fields(*from_file, *header);
    }
  }

  for (const std::optional<Key>& key : {std::optional<Key>(), std::optional<Key>(golden_key())}) {
    const auto parsed = parse_snapshot(bytes, key);
    // The whole outcome follows from the header, the payload checksum and
    // the key, in the order of section 7 and Scheme::open.
    std::string expected;
    if (!header) {
      expected = code_name(header.error().code);
    } else if (!payload_ok) {
      expected = code_name(ErrorCode::kSnapshotPayloadChecksum);
    } else if (!fill_ok) {
      expected = code_name(ErrorCode::kSnapshotImplausibleFill);
    } else if (header->hash_protocol_version == 2) {
      expected = !key ? code_name(ErrorCode::kKeyRequired)
                 : key_fingerprint(*key) == header->key_fingerprint
                     ? "loaded"
                     : code_name(ErrorCode::kKeyMismatch);
    } else {
      expected = key ? code_name(ErrorCode::kKeyMismatch) : "loaded";
    }
    if (describe_outcome(parsed) != expected) {
      return "parse_snapshot with " + key_name(key) + ": " + describe_outcome(parsed) +
             ", expected " + expected + (parsed ? "" : " (" + parsed.error().message + ")");
    }
    if (parsed) {
      if (auto field = filter_matches_header(*parsed, *header); !field.empty()) {
        return "the loaded filter's " + field + " is not the header's";
      }
      if (auto problem = check_reserialized(*parsed, *header, bytes, key); !problem.empty()) {
        return problem;
      }
      if (auto problem = backends_agree(*parsed, probe_digests(bytes)); !problem.empty()) {
        return problem;
      }
    }
    if (!path) continue;
    for (const LoadMode mode : {LoadMode::kCopy, LoadMode::kMap}) {
      const auto loaded = load_snapshot(*path, LoadOptions{.mode = mode, .key = key});
      if (describe_outcome(loaded) != expected) {
        return std::string("load_snapshot (") + (mode == LoadMode::kMap ? "mapped" : "copied") +
               ") with " + key_name(key) + ": " + describe_outcome(loaded) + ", expected " +
               expected;
      }
      if (loaded && serialize_snapshot(*loaded) != serialize_snapshot(*parsed)) {
        return "load_snapshot and parse_snapshot give different filters";
      }
    }
  }
  return {};
}

std::string check_text_reader(std::span<const std::uint8_t> data) {
  const std::string_view text(reinterpret_cast<const char*>(data.data()), data.size());

  // The reference: each record on its own. Records end with NUL where the
  // text's first MiB holds a NUL, else with newlines, and then a NUL in a
  // line is an error naming the line and the NUL's byte offset.
  const bool nul_terminated =
      text.substr(0, DigestReader::kMaxRecordBytes).find('\0') != std::string_view::npos;
  const char terminator = nul_terminated ? '\0' : '\n';
  std::vector<Digest> expected;
  std::optional<std::string> first_error;
  bool exact_error = true;  // else first_error is the message's start
  std::uint64_t line_number = 0;
  for (std::size_t at = 0; at < text.size() && !first_error;) {
    const std::size_t found = text.find(terminator, at);
    const std::size_t end = found == std::string_view::npos ? text.size() : found;
    const std::string_view line = text.substr(at, end - at);
    const std::uint64_t offset = at;
    at = end + 1;
    ++line_number;
    if (!nul_terminated) {
      if (const std::size_t nul = line.find('\0'); nul != std::string_view::npos) {
        first_error = "fuzz: line " + std::to_string(line_number) + ": a NUL byte at byte offset " +
                      std::to_string(offset + nul) + ": ";
        exact_error = false;
        break;
      }
    }
    if (nul_terminated ? is_blank_record(line) : is_blank_line(line)) continue;
    auto digest = nul_terminated ? parse_digest_record(line, line_number, offset)
                                 : parse_digest_line(line, line_number);
    if (!digest) {
      if (digest.error().code != ErrorCode::kInvalidDigest) {
        return "parse_digest_line failed with " + digest.error().describe();
      }
      first_error = "fuzz: " + digest.error().message;
    } else {
      expected.push_back(*digest);
    }
  }
  const auto is_first_error = [&](const Error& error) {
    return error.code == ErrorCode::kInvalidDigest &&
           (exact_error ? error.message == *first_error : error.message.starts_with(*first_error));
  };

  auto reader = DigestReader::from_memory(text, InputFormat::kHex, "fuzz");
  const auto all = reader.read_all();
  if (first_error) {
    if (all) return "the reader accepted text with a bad line: " + *first_error;
    if (!is_first_error(all.error())) {
      return "the reader's error '" + all.error().describe() + "' is not '" + *first_error + "'";
    }
  } else {
    if (!all) return "the reader refused text whose every line parses: " + all.error().describe();
    if (*all != expected) return "the reader's digests are not the lines' digests";
    if (reader.bytes_read() != text.size()) return "bytes_read is not the text's size";
  }

  // Small spans give what read_all gives.
  auto chunked = DigestReader::from_memory(text, InputFormat::kHex, "fuzz");
  std::vector<Digest> pieces;
  static constexpr std::size_t kSpans[] = {1, 2, 3, 7, 64};
  std::vector<Digest> buffer(64);
  for (std::size_t i = 0;; ++i) {
    const std::span<Digest> out = std::span(buffer).first(kSpans[i % std::size(kSpans)]);
    const auto got = chunked.read(out);
    if (!got) {
      if (!first_error || !is_first_error(got.error())) {
        return "reading in spans failed differently: " + got.error().describe();
      }
      break;
    }
    if (*got == 0) break;
    pieces.insert(pieces.end(), out.begin(), out.begin() + static_cast<std::ptrdiff_t>(*got));
  }
  if (!std::equal(pieces.begin(), pieces.end(), expected.begin(), expected.end()) &&
      !(first_error && pieces.size() <= expected.size() &&
        std::equal(pieces.begin(), pieces.end(), expected.begin()))) {
    return "reading in spans gives other digests";
  }

  // Every accepted digest prints back to lines that parse to it.
  std::string printed;
  for (const Digest& digest : expected) {
    const std::string hex = digest.hex();
    std::string upper = hex;
    for (char& c : upper) c = static_cast<char>(c >= 'a' && c <= 'f' ? c - 'a' + 'A' : c);
    for (const std::string& line :
         {"sha256:" + hex, upper + "\r", " \t" + hex + "  name", hex + " *binary name"}) {
      const auto again = parse_digest_line(line, 1);
      if (!again || *again != digest) return "the printed line '" + line + "' does not parse back";
    }
    printed += "sha256:" + hex + "\n";
  }
  // (In spans of 64: read_all's 4096-digest chunk, zeroed per call, cost
  // more than the rest of this check under ASan.)
  auto again = DigestReader::from_memory(printed, InputFormat::kHex);
  std::size_t matched = 0;
  for (;;) {
    const auto got = again.read(buffer);
    if (!got) return "the printed digests do not read back: " + got.error().describe();
    if (*got == 0) break;
    if (matched + *got > expected.size() ||
        !std::equal(buffer.begin(), buffer.begin() + static_cast<std::ptrdiff_t>(*got),
                    expected.begin() + static_cast<std::ptrdiff_t>(matched))) {
      return "the printed digests read back differently";
    }
    matched += *got;
  }
  if (matched != expected.size()) return "the printed digests read back short";

  // And printed as sha256sum -z records, names with newlines, they read
  // back too.
  std::string records;
  for (std::size_t i = 0; i < expected.size(); ++i) {
    records += expected[i].hex() + "  name\n" + std::to_string(i);
    records += '\0';
  }
  auto zero = DigestReader::from_memory(records, InputFormat::kHex);
  matched = 0;
  for (;;) {
    const auto got = zero.read(buffer);
    if (!got) return "the printed records do not read back: " + got.error().describe();
    if (*got == 0) break;
    if (matched + *got > expected.size() ||
        !std::equal(buffer.begin(), buffer.begin() + static_cast<std::ptrdiff_t>(*got),
                    expected.begin() + static_cast<std::ptrdiff_t>(matched))) {
      return "the printed records read back differently";
    }
    matched += *got;
  }
  if (matched != expected.size()) return "the printed records read back short";
  return {};
}

std::string check_binary_reader(std::span<const std::uint8_t> data) {
  if (data.empty()) return {};
  std::vector<std::size_t> spans;
  std::size_t at = 1;
  for (std::size_t i = 0; i < data[0] % 16u && at < data.size(); ++i) {
    spans.push_back(data[at++] % 64u + 1);
  }
  if (spans.empty()) spans.push_back(4);
  const std::string_view input(reinterpret_cast<const char*>(data.data() + at), data.size() - at);
  const std::size_t records = input.size() / Digest::kSize;
  const bool whole = input.size() % Digest::kSize == 0;
  const auto record = [&](std::size_t i) {
    Digest digest;
    std::memcpy(digest.bytes.data(), input.data() + i * Digest::kSize, Digest::kSize);
    return digest;
  };

  auto reader = DigestReader::from_memory(input, InputFormat::kBinary, "fuzz");
  if (reader.size_hint() != input.size()) return "size_hint is not the input's size";
  std::size_t delivered = 0;
  for (std::size_t i = 0; i <= records + 1; ++i) {
    std::vector<Digest> out(spans[i % spans.size()]);
    const auto got = reader.read(out);
    if (!got) {
      if (whole) return "whole records refused: " + got.error().describe();
      const std::string offset =
          "fuzz: byte offset " + std::to_string(records * Digest::kSize) + ":";
      if (got.error().code != ErrorCode::kInvalidDigest ||
          !got.error().message.starts_with(offset)) {
        return "stray bytes reported as '" + got.error().describe() + "', expected '" + offset +
               "...'";
      }
      return {};
    }
    if (*got > out.size()) return "a read returned more than its span";
    for (std::size_t j = 0; j < *got; ++j) {
      if (delivered + j >= records || out[j] != record(delivered + j)) {
        return "digest " + std::to_string(delivered + j) + " is not the input's record";
      }
    }
    delivered += *got;
    if (*got < out.size()) {
      // Only the end of input stops a read short: whole records, all read.
      if (!whole) return "stray bytes passed without an error";
      if (delivered != records) return "a short read before the end";
      const auto after = reader.read(out);
      if (!after || *after != 0) return "a read after the end was not 0";
      if (reader.bytes_read() != input.size()) return "bytes_read is not the input's size";
      return {};
    }
  }
  return "more reads than records";
}

std::string check_merge(std::span<const std::uint8_t> data) {
  if (data.size() < 3) return {};
  const std::uint8_t control = data[0];
  const std::size_t length =
      std::min<std::size_t>(data[1] | std::size_t{data[2]} << 8, data.size() - 3);
  Bytes a_bytes(data.begin() + 3, data.begin() + 3 + static_cast<std::ptrdiff_t>(length));
  Bytes b_bytes(data.begin() + 3 + static_cast<std::ptrdiff_t>(length), data.end());
  reseal(a_bytes, (control & 1) != 0, (control & 1) != 0);
  reseal(b_bytes, (control & 2) != 0, (control & 2) != 0);
  const std::optional<Key> a_key =
      (control & 4) != 0 ? std::optional<Key>(golden_key()) : std::nullopt;
  const std::optional<Key> b_key =
      (control & 8) != 0 ? std::optional<Key>(golden_key()) : std::nullopt;
  auto a = parse_snapshot(a_bytes, a_key);
  auto b = parse_snapshot(b_bytes, b_key);
  if (!a || !b) return {};
  MergeOptions options;
  if ((control & 16) != 0) options.catalog_version = control >> 5;

  // One filter merges into itself (unless it is a catalog's, relabelled).
  if (!options.catalog_version || a->catalog_id().is_zero() ||
      a->catalog_version() == *options.catalog_version) {
    const Filter one[] = {*a};
    auto alone = merge_filters(one, options);
    if (!alone) return "merging one filter failed: " + alone.error().describe();
    if (!std::ranges::equal(alone->payload(), a->payload()))
      return "a merge of one changed its bits";
  }

  const Filter pair[] = {*a, *b};
  const auto merged = merge_filters(pair, options);
  const bool compatible =
      a->catalog_id() == b->catalog_id() &&
      a->hash_protocol_version() == b->hash_protocol_version() &&
      a->scheme().key_fingerprint() == b->scheme().key_fingerprint() &&
      a->hash_count() == b->hash_count() &&
      (options.catalog_version || a->catalog_version() == b->catalog_version()) &&
      // A catalog's snapshots keep their version: relabelling is for unbound inputs.
      (!options.catalog_version || a->catalog_id().is_zero() ||
       (a->catalog_version() == *options.catalog_version &&
        b->catalog_version() == *options.catalog_version)) &&
      a->bit_count() == b->bit_count() && a->expected_item_count() == b->expected_item_count() &&
      std::bit_cast<std::uint64_t>(a->target_fpp()) ==
          std::bit_cast<std::uint64_t>(b->target_fpp());
  const std::uint64_t inserted = a->inserted_item_count() + b->inserted_item_count();
  if (!compatible) {
    if (merged || merged.error().code != ErrorCode::kIncompatibleFilters) {
      return "incompatible filters merged as " +
             (merged ? std::string("a filter") : merged.error().describe());
    }
    return {};
  }
  if (inserted > a->expected_item_count()) {
    if (merged || merged.error().code != ErrorCode::kCapacityExceeded) {
      return "over capacity, the merge gave " +
             (merged ? std::string("a filter") : merged.error().describe());
    }
    return {};
  }
  if (!merged && merged.error().code == ErrorCode::kSnapshotImplausibleFill) {
    // Only when the OR really has more bits than the summed count allows.
    std::uint64_t popcount = 0;
    for (std::size_t i = 0; i < a->payload().size(); ++i) {
      popcount += std::popcount(static_cast<std::uint8_t>(a->payload()[i] | b->payload()[i]));
    }
    if (describe_fill_fault(Layout{a->bit_count(), a->hash_count()}, inserted, popcount,
                            FillCheck::kAnyInsertions)
            .empty()) {
      return "a plausible merge was refused as implausible: " + merged.error().describe();
    }
    return {};
  }
  if (!merged) return "compatible filters did not merge: " + merged.error().describe();
  const auto out = merged->payload();
  for (std::size_t i = 0; i < out.size(); ++i) {
    if (out[i] != (a->payload()[i] | b->payload()[i])) {
      return "the merge is not the OR at byte " + std::to_string(i);
    }
  }
  if (merged->inserted_item_count() != inserted)
    return "the merge's insertedItemCount is not the sum";
  if (merged->catalog_version() != options.catalog_version.value_or(a->catalog_version())) {
    return "the merge's catalogVersion is wrong";
  }
  const auto sum = a->content_fingerprint() && b->content_fingerprint()
                       ? std::optional(*a->content_fingerprint() + *b->content_fingerprint())
                       : std::nullopt;
  if (merged->content_fingerprint() != sum) return "the merge's content fingerprint is not the sum";
  if (merged->catalog_id() != a->catalog_id() || !(merged->scheme() == a->scheme()) ||
      merged->expected_item_count() != a->expected_item_count() ||
      std::bit_cast<std::uint64_t>(merged->target_fpp()) !=
          std::bit_cast<std::uint64_t>(a->target_fpp())) {
    return "the merge changed a field of its inputs";
  }
  const Bytes saved = serialize_snapshot(*merged);
  const auto reloaded = parse_snapshot(saved, a_key);
  if (!reloaded) return "the merged snapshot does not load: " + reloaded.error().describe();
  if (serialize_snapshot(*reloaded) != saved) return "the merged snapshot does not round-trip";
  return {};
}

namespace {

// Recomputes an index's checksums a mutation broke (docs/protocol.md,
// section 14): `body` the block table and its checksum from the digests
// as they are (when the header's count and block size fit the bytes),
// `header` the header checksum.
void reseal_index(Bytes& bytes, bool body, bool header) {
  if (bytes.size() < kIndexHeaderSize) return;
  if (body) {
    const auto count = load_le<std::uint64_t>(bytes.data() + 56);
    const auto block = load_le<std::uint32_t>(bytes.data() + 64);
    if (block != 0 && count <= (bytes.size() - kIndexHeaderSize) / Digest::kSize) {
      const std::uint64_t blocks = (count + block - 1) / block;
      const std::uint64_t table = kIndexHeaderSize + count * Digest::kSize;
      if (blocks <= (bytes.size() - table) / 8 && bytes.size() - table - blocks * 8 >= 8) {
        for (std::uint64_t b = 0; b < blocks; ++b) {
          const std::uint64_t first = b * block;
          const std::uint64_t n = std::min<std::uint64_t>(block, count - first);
          const std::uint64_t sum = XXH3_64bits(
              bytes.data() + kIndexHeaderSize + first * Digest::kSize, n * Digest::kSize);
          std::memcpy(bytes.data() + table + 8 * b, &sum, 8);
        }
        const std::uint64_t sum = XXH3_64bits(bytes.data() + table, blocks * 8);
        std::memcpy(bytes.data() + table + blocks * 8, &sum, 8);
      }
    }
  }
  if (header) {
    std::array<std::uint8_t, kIndexHeaderSize> copy;
    std::memcpy(copy.data(), bytes.data(), copy.size());
    std::memset(copy.data() + 80, 0, 8);
    const std::uint64_t sum = XXH3_64bits(copy.data(), copy.size());
    std::memcpy(bytes.data() + 80, &sum, 8);
  }
}

std::string describe_index_outcome(const Result<Index>& r) {
  return r ? std::string("loaded") : code_name(r.error().code);
}

}  // namespace

std::string check_index(std::span<const std::uint8_t> data) {
  if (data.empty()) return {};
  Bytes bytes(data.begin() + 1, data.end());
  reseal_index(bytes, (data[0] & 1) != 0, (data[0] & 2) != 0);
  const auto parsed = Index::parse(bytes);
  // The header check alone agrees with the whole load about the header.
  if (const auto header = parse_index_header(bytes, bytes.size()); !header) {
    if (parsed || parsed.error().code != header.error().code) {
      return "parse_index_header says " + code_name(header.error().code) + ", Index::parse " +
             describe_index_outcome(parsed);
    }
  }
  // From a file, copied and mapped: the same outcome.
  static MemoryFile file;
  if (const auto path = file.hold(bytes)) {
    for (LoadMode mode : {LoadMode::kCopy, LoadMode::kMap}) {
      const auto loaded = Index::load(*path, mode);
      if (describe_index_outcome(loaded) != describe_index_outcome(parsed)) {
        return "Index::load (" + std::string(mode == LoadMode::kMap ? "map" : "copy") + ") " +
               describe_index_outcome(loaded) + ", Index::parse " + describe_index_outcome(parsed);
      }
    }
  }
  if (!parsed) return {};
  const Index& index = *parsed;
  // A loaded index is what the writer writes for its identity and digests.
  IndexIdentity identity{index.catalog_id(), index.catalog_version(),
                         index.content_fingerprint(), index.header().block_digests};
  const auto again = serialize_index(identity, index.digests());
  if (!again) return "a loaded index does not re-serialize: " + again.error().describe();
  if (*again != bytes) return "a loaded index re-serializes differently";
  // Every lookup agrees with std::binary_search: each digest held, and its
  // neighbours one bit away (first and last byte).
  const auto held = index.digests();
  std::vector<Digest> probes;
  for (std::size_t i = 0; i < held.size() && i < 512; ++i) {
    probes.push_back(held[i]);
    Digest low = held[i], high = held[i];
    low.bytes[31] ^= 1;
    high.bytes[0] ^= 0x80;
    probes.push_back(low);
    probes.push_back(high);
  }
  probes.push_back(Digest{});
  std::vector<std::uint8_t> batch(probes.size());
  if (auto ok = index.contains(probes, batch); !ok) return "contains: " + ok.error().describe();
  for (std::size_t i = 0; i < probes.size(); ++i) {
    const bool expected = std::binary_search(held.begin(), held.end(), probes[i]);
    if ((batch[i] != 0) != expected || index.contains(probes[i]) != expected) {
      return "lookup of " + probes[i].hex() + " disagrees with std::binary_search";
    }
  }
  return {};
}

std::string check_index_set(std::span<const std::uint8_t> data) {
  if (data.empty()) return {};
  Bytes bytes(data.begin() + 1, data.end());
  if (bytes.size() >= kIndexSetHeaderSize) {
    if ((data[0] & 1) != 0) {
      std::uint64_t body_length = 0;
      std::memcpy(&body_length, bytes.data() + 64, 8);
      if (body_length == bytes.size() - kIndexSetHeaderSize) {
        const std::uint64_t sum =
            XXH3_64bits(bytes.data() + kIndexSetHeaderSize, bytes.size() - kIndexSetHeaderSize);
        std::memcpy(bytes.data() + 72, &sum, 8);
      }
    }
    if ((data[0] & 2) != 0) {
      Bytes header(bytes.begin(), bytes.begin() + kIndexSetHeaderSize);
      std::memset(header.data() + 80, 0, 8);
      const std::uint64_t sum = XXH3_64bits(header.data(), header.size());
      std::memcpy(bytes.data() + 80, &sum, 8);
    }
  }
  const auto parsed = parse_index_set_manifest(bytes, "m");
  if (parsed) {
    const IndexSetManifest& m = *parsed;
    if (encode_index_set_manifest(m) != bytes) return "an accepted manifest encodes differently";
    if (m.shard_count() < 1 || m.shard_count() > kIndexSetMaxShardCount) {
      return "an accepted manifest has " + std::to_string(m.shard_count()) + " shards";
    }
    std::uint64_t sum = 0;
    std::vector<std::string> names;
    for (const auto& entry : m.shards) {
      sum += entry.digest_count;
      if (entry.file.empty() || entry.file.find('/') != std::string::npos) {
        return "an accepted manifest names " + entry.file;
      }
      names.push_back(entry.file);
    }
    if (sum != m.digest_count) return "an accepted manifest's counts do not sum";
    std::sort(names.begin(), names.end());
    if (std::adjacent_find(names.begin(), names.end()) != names.end()) {
      return "an accepted manifest names a file twice";
    }
  }
  // From a file with no shard beside it: the manifest's own error, or a
  // missing shard (the name is in a private folder that holds none). A
  // file without the magic is read as an ABFX index.
  static MemoryFile file;
  if (bytes.size() >= 4 && std::memcmp(bytes.data(), "ABXS", 4) == 0) {
    if (const auto path = file.hold(bytes)) {
      const auto loaded = IndexSet::load(*path);
      if (loaded) return "a manifest loaded without its shards";
      // Refused by the parser: the load answers the same rule. Accepted:
      // the shards are looked for beside the memfd's target, where none of
      // the fuzzer's names is an ABFX index, so some shard refuses.
      if (!parsed && loaded.error().code != parsed.error().code) {
        return "IndexSet::load says " + code_name(loaded.error().code) + ", the parser " +
               code_name(parsed.error().code);
      }
    }
  }
  return {};
}

std::span<const Target> targets() {
  static constexpr Target kTargets[] = {
      {"snapshot", check_snapshot},
      {"index", check_index},
      {"index_set", check_index_set},
      {"text_reader", check_text_reader},
      {"binary_reader", check_binary_reader},
      {"merge", check_merge},
  };
  return kTargets;
}

}  // namespace abf::fuzz
