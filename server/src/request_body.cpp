// Find-missing bodies and answers for `abf serve` (request.hpp): the
// digests of a binary, text or JSON body, and the answer bodies, as pure
// functions of bytes.
#include <cstring>
#include <optional>

#include <nlohmann/json.hpp>

#include "abf/server/request.hpp"
#include "request_text.hpp"

namespace abf::server {

namespace {

using detail::describe_digest_text;
using detail::kShaPrefix;
using detail::lower;
using detail::parse_prefixed_or_bare;

// JSON bodies, read with nlohmann-json's SAX interface: no DOM is built
// (a DOM of a 32 MiB body of small numbers took 610 MB, and of nested
// arrays 890 MB), digests are kept as they come, and reading stops at the
// first mistake, at max_digests + 1 digests and at kMaxJsonDepth levels.
// What a body costs is its digests (32 bytes each, fewer than its bytes)
// and one string at a time.
constexpr std::size_t kMaxJsonDepth = 32;

class DigestListSax {
 public:
  using json = nlohmann::json;
  using number_integer_t = json::number_integer_t;
  using number_unsigned_t = json::number_unsigned_t;
  using number_float_t = json::number_float_t;
  using string_t = json::string_t;
  using binary_t = json::binary_t;

  explicit DigestListSax(std::size_t max_digests) : max_digests_(max_digests) {}

  std::vector<Digest> digests;
  std::optional<RequestError> error;

  bool null() { return scalar(); }
  bool boolean(bool) { return scalar(); }
  bool number_integer(number_integer_t) { return scalar(); }
  bool number_unsigned(number_unsigned_t) { return scalar(); }
  bool number_float(number_float_t, const string_t&) { return scalar(); }
  bool binary(binary_t&) { return scalar(); }
  bool string(string_t& text) {
    if (!in_list()) return scalar();
    const std::size_t index = digests.size();
    if (index == max_digests_) {
      return stop(413, "too_many_digests",
                  "request has more than " + std::to_string(max_digests_) +
                      " digests; the limit is " + std::to_string(max_digests_) +
                      " per request: split the batch");
    }
    auto digest = parse_prefixed_or_bare(text, /*require_prefix=*/false,
                                         "JSON body: digests[" + std::to_string(index) + "]");
    if (!digest) {
      error = digest.error();
      return false;
    }
    digests.push_back(*digest);
    return true;
  }
  bool start_object(std::size_t) {
    if (in_list()) return not_a_string();
    if (depth_ == 1 && key_is_digests_) return not_a_list();
    return enter();
  }
  bool key(string_t& name) {
    key_is_digests_ = depth_ == 1 && name == "digests";
    if (key_is_digests_ && seen_digests_) {
      return stop(400, "invalid_request", "JSON body: \"digests\" is given twice");
    }
    return true;
  }
  bool end_object() {
    --depth_;
    if (depth_ == 0 && !seen_digests_) return not_a_list();
    return true;
  }
  bool start_array(std::size_t) {
    if (in_list()) return not_a_string();
    if (depth_ == 0) return not_a_list();
    if (depth_ == 1 && key_is_digests_) {
      seen_digests_ = true;
      list_depth_ = depth_ + 1;
    }
    return enter();
  }
  bool end_array() {
    if (depth_ == list_depth_) list_depth_ = 0;
    --depth_;
    return true;
  }
  bool parse_error(std::size_t position, const std::string&,
                   const nlohmann::detail::exception& ex) {
    // nlohmann-json reports a number past a double's range (1e400) as
    // out_of_range 406 through this call too.
    if (ex.id == 406) {
      error = RequestError{400, "invalid_json",
                           "JSON body: a number is out of range"
                           " (expected {\"digests\": [\"sha256:<hex>\", ...]})"};
    } else {
      error = RequestError{400, "invalid_json",
                           "JSON body: not JSON at byte " + std::to_string(position) +
                               " (expected {\"digests\": [\"sha256:<hex>\", ...]})"};
    }
    return false;
  }

 private:
  bool in_list() const noexcept { return list_depth_ != 0 && depth_ == list_depth_; }
  bool scalar() {
    if (in_list()) return not_a_string();
    if (depth_ == 0 || (depth_ == 1 && key_is_digests_)) return not_a_list();
    return true;
  }
  bool enter() {
    if (++depth_ > kMaxJsonDepth) {
      return stop(400, "invalid_json",
                  "JSON body: nested deeper than " + std::to_string(kMaxJsonDepth) + " levels");
    }
    return true;
  }
  bool not_a_string() {
    return stop(400, "invalid_digest",
                "JSON body: digests[" + std::to_string(digests.size()) +
                    "]: expected a string \"sha256:<hex>\"");
  }
  bool not_a_list() {
    return stop(400, "invalid_request",
                "JSON body: expected an object with a \"digests\" array of strings");
  }
  bool stop(int status, std::string code, std::string message) {
    error = RequestError{status, std::move(code), std::move(message)};
    return false;
  }

  std::size_t max_digests_;
  std::size_t depth_ = 0;        // objects and arrays open
  std::size_t list_depth_ = 0;   // depth_ inside the "digests" array; 0 outside it
  bool key_is_digests_ = false;  // the value being read is the top object's "digests"
  bool seen_digests_ = false;
};

RequestResult<std::vector<Digest>> parse_json_body(std::string_view body, std::size_t max_digests) {
  DigestListSax sax(max_digests);
  const bool ok = nlohmann::json::sax_parse(body, &sax, nlohmann::json::input_format_t::json,
                                            /*strict=*/true);
  if (sax.error) return std::unexpected(std::move(*sax.error));
  if (!ok) {
    return refuse(400, "invalid_json",
                  "JSON body: not JSON (expected {\"digests\": [\"sha256:<hex>\", ...]})");
  }
  return std::move(sax.digests);
}

// One line of a text/plain body: one digest, bare hex or sha256:<hex>
// (either case; surrounding spaces, tabs and '\r' ignored). A second word is
// refused, never read as a sha256sum name: `<hex>  <hex>` would lose its
// second digest, and a NUL-separated `sha256sum -z` body all but its first.
RequestResult<Digest> parse_text_line(std::string_view line, std::uint64_t line_number) {
  const auto blank = [](char c) { return c == ' ' || c == '\t' || c == '\r'; };
  while (!line.empty() && blank(line.front())) line.remove_prefix(1);
  while (!line.empty() && blank(line.back())) line.remove_suffix(1);
  const auto where = [&] { return "text body: line " + std::to_string(line_number); };
  if (const auto space = line.find_first_of(" \t"); space != std::string_view::npos) {
    return refuse(400, "invalid_digest",
                  where() + ": more than one word (" + describe_digest_text(line.substr(0, space)) +
                      ", then " + describe_digest_text(line.substr(space)) +
                      "): send one digest a line, <64 hex digits> or sha256:<64 hex digits>");
  }
  const bool prefixed =
      line.size() >= kShaPrefix.size() && lower(line.substr(0, kShaPrefix.size())) == kShaPrefix;
  const std::string_view hex = prefixed ? line.substr(kShaPrefix.size()) : line;
  auto digest = parse_hex_digest(hex);
  if (!digest) {
    return refuse(400, "invalid_digest",
                  where() + ": expected " +
                      (prefixed ? "64 hex digits after sha256:"
                                : "<64 hex digits> or sha256:<64 hex digits>") +
                      ", got " + describe_digest_text(hex) +
                      (hex.size() == 64 ? " with a non-hex digit" : ""));
  }
  return *digest;
}

}  // namespace

RequestResult<std::vector<Digest>> parse_find_missing_body(BodyEncoding encoding,
                                                           std::string_view body,
                                                           std::size_t max_digests) {
  const auto too_many = [&](std::size_t count) {
    return refuse(413, "too_many_digests",
                  "request has " +
                      (count == 0 ? std::string("more than ") + std::to_string(max_digests)
                                  : std::to_string(count)) +
                      " digests; the limit is " + std::to_string(max_digests) +
                      " per request: split the batch");
  };
  std::vector<Digest> digests;
  switch (encoding) {
    case BodyEncoding::kBinary: {
      if (body.size() % Digest::kSize != 0) {
        const std::size_t cut = body.size() / Digest::kSize * Digest::kSize;
        return refuse(400, "truncated_record",
                      "binary body of " + std::to_string(body.size()) +
                          " bytes is not whole 32-byte records: the record at byte offset " +
                          std::to_string(cut) + " has " + std::to_string(body.size() - cut) +
                          " bytes");
      }
      const std::size_t count = body.size() / Digest::kSize;
      if (count > max_digests) return too_many(count);
      digests.resize(count);
      if (count != 0) std::memcpy(digests.data(), body.data(), body.size());
      return digests;
    }
    case BodyEncoding::kText: {
      std::uint64_t line_number = 0;
      std::size_t start = 0;
      while (start < body.size()) {
        std::size_t end = body.find('\n', start);
        if (end == std::string_view::npos) end = body.size();
        const std::string_view line = body.substr(start, end - start);
        start = end + 1;
        ++line_number;
        if (is_blank_line(line)) continue;
        auto digest = parse_text_line(line, line_number);
        if (!digest) return std::unexpected(digest.error());
        if (digests.size() == max_digests) return too_many(0);
        digests.push_back(*digest);
      }
      return digests;
    }
    case BodyEncoding::kJson:
      return parse_json_body(body, max_digests);
  }
  return digests;
}

namespace {

// The find-missing answer body of `count` digests, the i-th `at(i)`.
template <class At>
std::string encode_missing_with(BodyEncoding encoding, std::size_t count, At at,
                                std::uint64_t catalog_version) {
  std::string out;
  switch (encoding) {
    case BodyEncoding::kBinary:
      out.resize(count * Digest::kSize);
      for (std::size_t i = 0; i < count; ++i) {
        std::memcpy(out.data() + i * Digest::kSize, &at(i), Digest::kSize);
      }
      return out;
    case BodyEncoding::kText:
      out.resize(count * 65);
      for (std::size_t i = 0; i < count; ++i) {
        write_hex(at(i), out.data() + i * 65);
        out[i * 65 + 64] = '\n';
      }
      return out;
    case BodyEncoding::kJson: {
      // Written by hand: 75 bytes a digest, no allocation per entry.
      out.reserve(count * 75 + 64);
      out += "{\"missing\":[";
      char hex[64];
      for (std::size_t i = 0; i < count; ++i) {
        if (i != 0) out += ',';
        write_hex(at(i), hex);
        out += "\"sha256:";
        out.append(hex, sizeof hex);
        out += '"';
      }
      out += "],\"catalog_version\":" + std::to_string(catalog_version) + "}\n";
      return out;
    }
  }
  return out;
}

}  // namespace

std::string encode_missing(BodyEncoding encoding, std::span<const Digest> missing,
                           std::uint64_t catalog_version) {
  if (encoding == BodyEncoding::kBinary) {
    // The records are the digests' own bytes: one copy.
    std::string out(missing.size() * Digest::kSize, '\0');
    if (!missing.empty()) std::memcpy(out.data(), missing.data(), out.size());
    return out;
  }
  return encode_missing_with(
      encoding, missing.size(), [&](std::size_t i) -> const Digest& { return missing[i]; },
      catalog_version);
}

std::string encode_missing(BodyEncoding encoding, std::span<const Digest> digests,
                           std::span<const std::uint32_t> missing, std::uint64_t catalog_version) {
  return encode_missing_with(
      encoding, missing.size(), [&](std::size_t i) -> const Digest& { return digests[missing[i]]; },
      catalog_version);
}

std::string encode_blob_answer(const Digest& digest, bool present, std::uint64_t catalog_version) {
  // Written by hand, as nlohmann's dump() writes it: no character of it
  // needs escaping.
  std::string out = "{\"digest\":\"sha256:";
  char hex[64];
  write_hex(digest, hex);
  out.append(hex, sizeof hex);
  out += present ? "\",\"present\":true" : "\",\"present\":false";
  out += ",\"catalog_version\":" + std::to_string(catalog_version) + "}\n";
  return out;
}

}  // namespace abf::server
